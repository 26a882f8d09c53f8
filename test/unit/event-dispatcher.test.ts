/**
 * The event dispatcher (worker/events/dispatcher.ts) on its own, with an
 * in-memory outbox and queue: one delivery per event and listener that takes
 * it, under an id derived from both; an event no listener takes is marked
 * dispatched at once; a failed queueing gives the claim back and marks
 * nothing, and the next tick queues the same delivery ids again. The real
 * thing, with processes killed at each step, is tested in
 * test/integration/events/events.test.ts.
 */
import type { DomainEvent } from '../../shared/events/events';
import type { EventOutbox } from '../../shared/events/outbox';
import { createLogger } from '../../shared/logger';
import { deliveryUuid, EventDispatcher } from '../../worker/events/dispatcher';
import { buildListeners, type Listener } from '../../worker/listeners/listener';

const listener = (name: string, events: Listener['events']): Listener => ({
  name,
  events,
  handle: () => Promise.resolve(),
});

const event = (id: string, type: DomainEvent['type']): DomainEvent => ({
  id,
  type,
  organizationId: 3,
  occurredAt: new Date(),
  data: {} as DomainEvent['data'],
});

function setup(
  events: DomainEvent[],
  failAdds = 0,
  fanOut?: { batches: string[][]; fail: number },
) {
  const waiting = [...events];
  const dispatched: string[] = [];
  const unclaimed: string[] = [];
  const added: string[] = [];
  let failures = failAdds;
  const outbox = {
    promoteMedia: () => Promise.resolve(0),
    promoteFolders: () => Promise.resolve(0),
    claim: (limit: number) => Promise.resolve(waiting.splice(0, limit)),
    dispatched: (ids: string[]) => {
      dispatched.push(...ids);
      return Promise.resolve();
    },
    unclaim: (ids: string[]) => {
      unclaimed.push(...ids);
      waiting.push(...ids.map((id) => events.find((e) => e.id === id)!));
      return Promise.resolve();
    },
  } as unknown as EventOutbox;
  const queue = {
    add: (_name: string, _payload: unknown, uuid: string) => {
      if (failures-- > 0) return Promise.reject(new Error('Redis is away'));
      added.push(uuid);
      return Promise.resolve(uuid);
    },
  };
  const dispatcher = new EventDispatcher(
    {
      outbox,
      queue: queue as never,
      listeners: buildListeners([
        listener('hooks', ['media.created', 'media.deleted']),
        listener('thumbs', ['media.created']),
        ...(fanOut
          ? [
              {
                ...listener('fan', ['media.created', 'folder.deleted']),
                fanOut: (batch: DomainEvent[]) => {
                  if (fanOut.fail-- > 0) return Promise.reject(new Error('Redis is away'));
                  fanOut.batches.push(batch.map((e) => e.id));
                  return Promise.resolve();
                },
              },
            ]
          : []),
      ]),
      ...(fanOut ? { context: {} as never } : {}),
      logger: createLogger({ level: 'silent' }),
    },
    { batch: 2 },
  );
  return { dispatcher, dispatched, unclaimed, added };
}

it('queues one delivery per event and listener that takes it, then marks the event', async () => {
  const { dispatcher, dispatched, added } = setup([
    event('media.created:1', 'media.created'),
    event('media.deleted:1', 'media.deleted'),
    event('folder.deleted:4', 'folder.deleted'),
  ]);
  expect(await dispatcher.tick()).toBe(3);
  // A batch's events are queued side by side: in no particular order.
  expect(added.sort()).toEqual(
    [
      deliveryUuid('media.created:1', 'hooks'),
      deliveryUuid('media.created:1', 'thumbs'),
      deliveryUuid('media.deleted:1', 'hooks'),
    ].sort(),
  );
  // No listener takes folder.deleted: dispatched with nothing queued.
  expect(dispatched).toEqual(['media.created:1', 'media.deleted:1', 'folder.deleted:4']);
});

it('a queueing that fails gives the claim back; the next tick queues the same deliveries', async () => {
  const { dispatcher, dispatched, unclaimed, added } = setup(
    [event('media.created:2', 'media.created')],
    1,
  );
  expect(await dispatcher.tick()).toBe(0);
  expect([unclaimed, dispatched]).toEqual([['media.created:2'], []]);
  expect(await dispatcher.tick()).toBe(1);
  expect(dispatched).toEqual(['media.created:2']);
  expect(added).toEqual([
    deliveryUuid('media.created:2', 'hooks'),
    deliveryUuid('media.created:2', 'thumbs'),
  ]);
});

it('a fan-out listener gets each claimed batch’s events of its types, and no job of its own', async () => {
  const fan = { batches: [] as string[][], fail: 0 };
  const { dispatcher, dispatched, added } = setup(
    [
      event('media.created:5', 'media.created'),
      event('media.deleted:5', 'media.deleted'),
      event('folder.deleted:6', 'folder.deleted'),
    ],
    0,
    fan,
  );
  expect(await dispatcher.tick()).toBe(3);
  // Batches of 2: the fan-out is called once per batch, with the events it takes.
  expect(fan.batches).toEqual([['media.created:5'], ['folder.deleted:6']]);
  expect(added.sort()).toEqual(
    [
      deliveryUuid('media.created:5', 'hooks'),
      deliveryUuid('media.created:5', 'thumbs'),
      deliveryUuid('media.deleted:5', 'hooks'),
    ].sort(),
  );
  expect(dispatched).toEqual(['media.created:5', 'media.deleted:5', 'folder.deleted:6']);
});

it('a fan-out that fails gives its events back; the next tick hands them over again', async () => {
  const fan = { batches: [] as string[][], fail: 1 };
  const { dispatcher, dispatched, unclaimed } = setup(
    [event('media.created:7', 'media.created'), event('media.deleted:7', 'media.deleted')],
    0,
    fan,
  );
  // The media.deleted event (not the fan-out's) is dispatched; the other is given back.
  expect(await dispatcher.tick()).toBe(1);
  expect([unclaimed, dispatched]).toEqual([['media.created:7'], ['media.deleted:7']]);
  expect(await dispatcher.tick()).toBe(1);
  expect(fan.batches).toEqual([['media.created:7']]);
  expect(dispatched).toEqual(['media.deleted:7', 'media.created:7']);
});

it('a delivery’s id depends on the event and the listener only', () => {
  expect(deliveryUuid('media.created:1', 'hooks')).toBe(deliveryUuid('media.created:1', 'hooks'));
  expect(deliveryUuid('media.created:1', 'hooks')).not.toBe(
    deliveryUuid('media.created:1', 'thumbs'),
  );
  expect(deliveryUuid('media.created:1', 'hooks')).toMatch(
    /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
  );
});

it('refuses a listener registry with two of one name or an unknown event', () => {
  expect(() =>
    buildListeners([listener('a', ['media.created']), listener('a', ['media.deleted'])]),
  ).toThrow(/two listeners are named "a"/);
  expect(() => buildListeners([listener('b', ['media.exploded' as never])])).toThrow(
    /unknown event "media.exploded"/,
  );
});
