/**
 * Domain events through the real API, worker, Redis, S3 and MongoDB: each
 * change records its event with it, and the worker's dispatcher hands every
 * event to every listener that takes it, once per listener (a delivery job
 * whose id derives from the event and the listener), whatever step a process
 * died at:
 *
 * - a record written with its pending event, never promoted (the writer died
 *   right after its insert);
 * - an event recorded, never dispatched (the dispatcher died before
 *   claiming it, or with its claim);
 * - an event whose delivery was queued, never marked dispatched (the
 *   dispatcher died between the two).
 *
 * A recording listener counts what it is handed, by event id.
 */
import { randomUUID } from 'node:crypto';
import { Queue } from 'bullmq';
import { pendingEvent, type DomainEvent, type EventType } from '../../../shared/events/events';
import { newJobId } from '../../../shared/jobs';
import { deliveryUuid } from '../../../worker/events/dispatcher';
import type { Listener } from '../../../worker/listeners/listener';
import { startApi, type TestApi } from '../../support/api';
import { eventually } from '../../support/eventually';
import { gauge } from '../../support/metrics';
import { startWorker, type TestWorker } from '../../support/worker';

let api: TestApi;
let worker: TestWorker;
let maintenance: Queue;

/** What the listener was handed: event id → the events (one per delivery run). */
const seen = new Map<string, DomainEvent[]>();
const recorder: Listener = {
  name: 'test.recorder',
  events: ['media.created', 'media.deleted', 'folder.deleted', 'job.completed', 'job.failed'],
  handle(event) {
    seen.set(event.id, [...(seen.get(event.id) ?? []), event]);
    return Promise.resolve();
  },
};

beforeAll(async () => {
  api = await startApi('events', { env: { RATE_LIMIT_MAX: '0' } });
  worker = await startWorker(api.env.env, {}, { listeners: [recorder] });
  maintenance = new Queue('maintenance', {
    connection: { url: api.env.env.REDIS_URL },
    prefix: api.env.queuePrefix,
  });
}, 60_000);
afterAll(async () => {
  await maintenance.close();
  await worker.close();
  await api.close();
});

/** Waits until the listener has been handed each of these events, then checks each came once. */
async function expectDeliveredOnce(ids: string[]): Promise<DomainEvent[]> {
  await eventually(() => {
    const missing = ids.filter((id) => !seen.has(id));
    if (missing.length) throw new Error(`not delivered yet: ${missing.join(', ')}`);
  }, 30_000);
  const out: DomainEvent[] = [];
  for (const id of ids) {
    // One delivery job per event and listener, and the listener ran once.
    const job = await maintenance.getJob(
      newJobId('event.deliver', deliveryUuid(id, recorder.name)),
    );
    expect({ id, job: job?.name, runs: seen.get(id)!.length }).toEqual({
      id,
      job: 'event.deliver',
      runs: 1,
    });
    out.push(seen.get(id)![0]!);
  }
  // Every event of the outbox is dispatched.
  await eventually(async () =>
    expect(
      await api.ctx.models.Event.countDocuments({ _id: { $in: ids }, dispatchedAt: null }),
    ).toBe(0),
  );
  return out;
}

describe('each change records its event, delivered once to each listener', () => {
  it('an upload: media.created with the record', async () => {
    const org = await api.createOrg('ev-upload');
    const media = await org.uploadRecord('xmp-BlueSquare.jpg');
    const [created] = await expectDeliveredOnce([`media.created:${media.id}`]);
    expect(created).toMatchObject({
      type: 'media.created',
      organizationId: org.organization.id,
      data: { media: { id: media.id, key: media.key, mimetype: 'image/jpeg' } },
    });
    // Promoted: the record no longer holds it.
    const doc = await api.ctx.models.Media.findOne({ id: media.id }).lean();
    expect(doc?.pendingEvents ?? []).toEqual([]);
  });

  it('a delete: media.deleted; a recursive folder delete: each file, then folder.deleted', async () => {
    const org = await api.createOrg('ev-delete');
    const alone = await org.uploadRecord('xmp-BlueSquare.jpg');
    const res = await fetch(`${api.url}/media/record?media=${encodeURIComponent(alone.key)}`, {
      method: 'DELETE',
      headers: org.auth,
    });
    expect(res.status).toBe(200);
    const [deleted] = await expectDeliveredOnce([`media.deleted:${alone.id}`]);
    expect(deleted!.data).toMatchObject({ media: { id: alone.id, key: alone.key } });

    const inFolder = [
      await org.uploadRecord('xmp-BlueSquare.jpg', 'xmp-BlueSquare.jpg', { folder: 'Trip' }),
      await org.uploadRecord('Canon_40D.jpg', 'Canon_40D.jpg', { folder: 'Trip' }),
    ];
    const folders = await fetch(`${api.url}/media/folders`, { headers: org.auth });
    const folder = (
      (await folders.json()) as { data: { folders: { id: number; name: string }[] } }
    ).data.folders.find((f) => f.name === 'Trip')!;
    const gone = await fetch(`${api.url}/media/folders/${folder.id}?recursive=true`, {
      method: 'DELETE',
      headers: org.auth,
    });
    expect(gone.status).toBe(202);
    const events = await expectDeliveredOnce([
      ...inFolder.map((m) => `media.deleted:${m.id}`),
      `folder.deleted:${folder.id}`,
    ]);
    expect(events.at(-1)!.data).toEqual({ folder: { id: folder.id, name: 'Trip' } });
    // The name is free at once; the removed folder's document is gone once its event is.
    const again = await fetch(`${api.url}/media/folders`, {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: 'Trip' }),
    });
    expect(again.status).toBe(201);
    await eventually(async () =>
      expect(await api.ctx.models.Folder.countDocuments({ id: folder.id })).toBe(0),
    );
  });

  it('a conversion: media.created and job.completed; a refused one: job.failed', async () => {
    const org = await api.createOrg('ev-jobs');
    const source = await org.uploadRecord('xmp-BlueSquare.jpg');
    const call = (format: string) =>
      fetch(`${api.url}/media/convert`, {
        method: 'POST',
        headers: { ...org.auth, 'Content-Type': 'application/json', Prefer: 'respond-async' },
        body: JSON.stringify({ mediaKey: source.key, format }),
      });
    const ok = (await (await call('webp')).json()) as { data: { jobId: string } };
    await eventually(async () => {
      const status = await fetch(`${api.url}/media/jobs/${ok.data.jobId}`, { headers: org.auth });
      expect(status.status).toBe(200);
    });
    const converted = await api.ctx.models.Media.findOne({ jobId: ok.data.jobId }).lean();
    const [, completed] = await expectDeliveredOnce([
      `media.created:${converted!.id}`,
      `job.completed:${ok.data.jobId}`,
    ]);
    expect(completed!.data).toEqual({
      job: {
        id: ok.data.jobId,
        name: 'image.convert',
        status: 'completed',
        mediaId: converted!.id,
        resultKey: converted!.key,
      },
    });

    // The source deleted before its job runs: the job fails for good (404).
    await worker.worker.workers.find((w) => w.name === 'image')!.pause();
    const doomed = (await (await call('png')).json()) as { data: { jobId: string } };
    await api.ctx.models.Media.updateOne({ id: source.id }, { $set: { deletingAt: new Date() } });
    await worker.worker.workers.find((w) => w.name === 'image')!.resume();
    const [failed] = await expectDeliveredOnce([`job.failed:${doomed.data.jobId}`]);
    expect(failed!.data).toMatchObject({
      job: { id: doomed.data.jobId, status: 'failed', error: { status: 404 } },
    });
    await api.ctx.models.Media.updateOne({ id: source.id }, { $set: { deletingAt: null } });
  });
});

describe('a process killed at any step: every event dispatched, none twice to a listener', () => {
  async function orgWithRecord() {
    const org = await api.createOrg(`ev-crash-${randomUUID().slice(0, 6)}`);
    const media = await org.uploadRecord('xmp-BlueSquare.jpg');
    await expectDeliveredOnce([`media.created:${media.id}`]);
    return { org, media };
  }

  it('after the record was written with its event, before it was promoted', async () => {
    const { org, media } = await orgWithRecord();
    // What a writer killed after its insert leaves: the event pending in the document.
    const id = `media.created:${media.id + 1_000_000}`;
    await api.ctx.models.Media.updateOne(
      { id: media.id },
      {
        $push: {
          pendingEvents: {
            ...pendingEvent('media.created', media.id + 1_000_000),
            at: new Date(Date.now() - 10_000),
          },
        },
      },
    );
    const [event] = await expectDeliveredOnce([id]);
    expect(event).toMatchObject({ organizationId: org.organization.id, type: 'media.created' });
  });

  it('after the event was recorded, before it was dispatched', async () => {
    const { org, media } = await orgWithRecord();
    const id = `media.deleted:${media.id}-recorded`;
    await api.ctx.repositories.events.record([
      event(id, 'media.deleted', org.organization.id, { media: { id: media.id } }),
    ]);
    await expectDeliveredOnce([id]);
  });

  it('after its delivery was queued, before it was marked dispatched (its claim lapsed)', async () => {
    const { org, media } = await orgWithRecord();
    const id = `media.deleted:${media.id}-queued`;
    await api.ctx.repositories.events.record([
      event(id, 'media.deleted', org.organization.id, { media: { id: media.id } }),
    ]);
    // What a dispatcher killed between the two left: the delivery queued, the event
    // claimed (its claim since lapsed) and not marked.
    await api.ctx.models.Event.updateOne({ _id: id }, { $set: { lockedUntil: new Date(0) } });
    await api.ctx.queue.add(
      'event.deliver',
      { organizationId: org.organization.id, requestId: id, eventId: id, listener: recorder.name },
      deliveryUuid(id, recorder.name),
      { uncapped: true },
    );
    await expectDeliveredOnce([id]);
  });
});

describe('metrics', () => {
  it('say how many events wait and how old the oldest is', async () => {
    const org = await api.createOrg('ev-metrics');
    const id = `media.deleted:${randomUUID()}-held`;
    await api.ctx.repositories.events.record([
      {
        ...event(id, 'media.deleted', org.organization.id, { media: {} }),
        occurredAt: new Date(Date.now() - 120_000),
      },
    ]);
    // Claimed by a dispatcher at work on it (so the running one leaves it be).
    await api.ctx.models.Event.updateOne(
      { _id: id },
      { $set: { lockedUntil: new Date(Date.now() + 60_000) } },
    );
    expect(await gauge(api.url, 'media_events_pending')).toBeGreaterThanOrEqual(1);
    expect(await gauge(api.url, 'media_events_oldest_pending_seconds')).toBeGreaterThanOrEqual(120);
    await api.ctx.models.Event.updateOne({ _id: id }, { $set: { lockedUntil: null } });
    await expectDeliveredOnce([id]);
    await eventually(async () => expect(await gauge(api.url, 'media_events_pending')).toBe(0));
  });
});

function event(
  id: string,
  type: EventType,
  organizationId: number,
  data: Record<string, unknown>,
): DomainEvent {
  return {
    id,
    type,
    organizationId,
    occurredAt: new Date(),
    data: data as unknown as DomainEvent['data'],
  };
}
