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

function setup(events: DomainEvent[], failAdds = 0) {
  const waiting = [...events];
  const dispatched: string[] = [];
  const unclaimed: string[] = [];
  const added: string[] = [];
  let failures = failAdds;
  const outbox = {
    promoteMedia: () => Promise.resolve(0),
    promoteFolders: () => Promise.resolve(0),
    claim: (limit: number) => Promise.resolve(waiting.splice(0, limit)),
    dispatched: (id: string) => {
      dispatched.push(id);
      return Promise.resolve();
    },
    unclaim: (id: string) => {
      unclaimed.push(id);
      waiting.push(events.find((e) => e.id === id)!);
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
      ]),
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
  expect(added).toEqual([
    deliveryUuid('media.created:1', 'hooks'),
    deliveryUuid('media.created:1', 'thumbs'),
    deliveryUuid('media.deleted:1', 'hooks'),
  ]);
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
