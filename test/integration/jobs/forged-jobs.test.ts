/**
 * A job written into Redis by hand (BullMQ's Queue.add,
 * not the API) that names another organization's keys is refused by the
 * worker before anything is read or removed: the job fails with
 * MEDIA_NOT_FOUND, the other organization's objects and records remain and
 * serve the same bytes, the forging organization gets no record, and the
 * worker goes on with the next job. (A render that names the source's
 * checksum reads it ahead, beside its lookup of the record, into the
 * worker's own cache under that key and checksum, and may start rendering
 * it; nothing of it is stored or answered unless the record is the job's
 * organization's.)
 */
import { randomUUID } from 'node:crypto';
import { Queue, QueueEvents } from 'bullmq';
import { Redis } from 'ioredis';
import {
  newJobId,
  decodeJobError,
  JOB_OPTIONS,
  type JobName,
  type JobPayloads,
  type JobResults,
} from '../../../shared/jobs';
import { createLogger } from '../../../shared/logger';
import { normalizeRenderOptions } from '../../../shared/media/render-options';
import { DirectUploads, type DirectUploadState } from '../../../shared/uploads/direct-uploads';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture, form, sha256 } from '../../support/files';
import { startWorker, type TestWorker } from '../../support/worker';

let api: TestApi;
let worker: TestWorker;
let attacker: TestOrg;
let victim: TestOrg;
let redis: Redis;
const queues = new Map<string, { queue: Queue; events: QueueEvents }>();

beforeAll(async () => {
  api = await startApi('forged-jobs');
  worker = await startWorker(api.env.env);
  attacker = await api.createOrg('forger');
  victim = await api.createOrg('victim');
  redis = new Redis(api.env.config.redisUrl!, { maxRetriesPerRequest: null });
});
afterAll(async () => {
  for (const { queue, events } of queues.values()) {
    await events.close();
    await queue.close();
    // A connection handed to BullMQ is the caller's to close.
    eventsConnection.get(events)?.disconnect();
  }
  redis.disconnect();
  await worker.close();
  await api.close();
});

const eventsConnection = new Map<QueueEvents, Redis>();

async function queueOf(name: 'image' | 'pdf' | 'import') {
  let q = queues.get(name);
  if (!q) {
    const prefix = api.env.config.queuePrefix;
    const connection = redis.duplicate();
    q = {
      queue: new Queue(name, { connection: redis, prefix }),
      events: new QueueEvents(name, { connection, prefix }),
    };
    eventsConnection.set(q.events, connection);
    await q.events.waitUntilReady();
    queues.set(name, q);
  }
  return q;
}

/** Adds a job straight to its queue, as someone with Redis access could, and waits for its end. */
async function forge<N extends JobName>(
  name: N,
  queueName: 'image' | 'pdf' | 'import',
  data: JobPayloads[N],
) {
  const { queue, events } = await queueOf(queueName);
  const job = await queue.add(name, data, { ...JOB_OPTIONS, jobId: newJobId(name, randomUUID()) });
  try {
    const result = (await job.waitUntilFinished(events, 30_000)) as JobResults[N];
    return { state: 'completed' as const, error: undefined, result };
  } catch (err) {
    return { state: 'failed' as const, error: decodeJobError((err as Error).message) };
  }
}

async function download(org: TestOrg, key: string): Promise<{ status: number; sha: string }> {
  const res = await fetch(`${api.url}/media/download?media=${encodeURIComponent(key)}`, {
    headers: org.auth,
  });
  return { status: res.status, sha: sha256(Buffer.from(await res.arrayBuffer())) };
}

const base = (org: TestOrg) => ({
  organizationId: org.organization.id,
  requestId: randomUUID(),
  origin: { ipAddress: '127.0.0.1', userAgent: 'forged' },
  tokenId: org.tokenId,
  folderId: null,
});

const recordsOf = (org: TestOrg) =>
  api.ctx.models.Media.countDocuments({ organizationId: org.organization.id });

describe('a job written into Redis by hand', () => {
  const pdf = fixture('minimal-document.pdf');
  const image = fixture('Canon_40D.jpg');

  it('cannot read or remove another organization’s objects', async () => {
    const victimPdf = await victim.upload(pdf, 'secret.pdf');
    const victimImage = await victim.upload(image, 'secret.jpg');
    // A temporary input of the victim's (as a merge in flight has): written straight to the store.
    const victimTemporary = `${victim.organization.slug}/.tmp/${randomUUID()}.pdf`;
    await api.ctx.store.put(victimTemporary, pdf, { contentType: 'application/pdf' });
    const ownPdf = await attacker.upload(pdf, 'mine.pdf');
    const attackerRecords = await recordsOf(attacker);

    // Reads the victim's PDF into a merge of the attacker's.
    const read = await forge('pdf.merge', 'pdf', {
      ...base(attacker),
      inputs: [{ key: victimPdf, name: 'x.pdf' }],
      temporaryKeys: [],
    });
    // Removes the victim's objects as "temporary inputs", whether the merge succeeds or fails.
    const removeOnSuccess = await forge('pdf.merge', 'pdf', {
      ...base(attacker),
      inputs: [{ key: ownPdf, name: 'mine.pdf' }],
      temporaryKeys: [victimPdf, victimTemporary],
    });
    const removeAsInput = await forge('pdf.merge', 'pdf', {
      ...base(attacker),
      inputs: [{ key: victimTemporary, name: 'x.pdf' }],
      temporaryKeys: [victimTemporary, `${attacker.organization.slug}/.tmp/../../${victimPdf}`],
    });
    // Reads the victim's image's metadata.
    const metadata = await forge('image.metadata', 'image', {
      organizationId: attacker.organization.id,
      requestId: randomUUID(),
      key: victimImage,
    });

    for (const outcome of [read, removeOnSuccess, removeAsInput, metadata]) {
      expect(outcome.state).toBe('failed');
      expect(outcome.error?.code).toBe('MEDIA_NOT_FOUND');
      expect(outcome.error?.status).toBe(404);
    }
    // The victim's objects and records are all there and serve the same bytes.
    expect(await download(victim, victimPdf)).toEqual({ status: 200, sha: sha256(pdf) });
    expect(await download(victim, victimImage)).toEqual({ status: 200, sha: sha256(image) });
    expect((await api.objectKeys(`${victim.organization.slug}/`)).sort()).toEqual(
      [victimPdf, victimImage, victimTemporary].sort(),
    );
    expect(await recordsOf(victim)).toBe(2);
    // The attacker got nothing.
    expect(await recordsOf(attacker)).toBe(attackerRecords);

    // The worker goes on: the attacker's own merge through the API works.
    const merged = await fetch(`${api.url}/media/merge-pdfs`, {
      method: 'POST',
      headers: attacker.auth,
      body: form([['mediaKeys', ownPdf]]),
    });
    expect(merged.status).toBe(201);
    await api.ctx.store.remove(victimTemporary);
  });

  it('cannot merge a range past the end of its own uploaded bytes', async () => {
    // An input bundle of the attacker's own (as a merge request writes one), and a range
    // that reaches past it: refused before anything is merged, nothing recorded.
    const bundle = `${attacker.organization.slug}/.tmp/${randomUUID()}.bundle`;
    await api.ctx.store.put(bundle, pdf, { contentType: 'application/octet-stream' });
    const records = await recordsOf(attacker);
    const outcome = await forge('pdf.merge', 'pdf', {
      ...base(attacker),
      inputs: [
        { key: bundle, name: 'a.pdf', range: { offset: 0, length: pdf.length } },
        { key: bundle, name: 'b.pdf', range: { offset: 1, length: pdf.length } },
      ],
      temporaryKeys: [bundle],
    });
    expect(outcome.state).toBe('failed');
    expect(outcome.error).toMatchObject({ code: 'BAD_REQUEST', status: 400 });
    expect(outcome.error?.details).toEqual([expect.objectContaining({ index: 1 })]);
    expect(await recordsOf(attacker)).toBe(records);
    // A job that failed for good removes its temporary inputs.
    await api.expectNoObjects(`${attacker.organization.slug}/.tmp/`);
  });

  it('cannot read back (and learn the checksum of) anything but its own direct uploads (upload.verify-direct, what older API replicas queue)', async () => {
    const victimPdf = await victim.upload(pdf, 'secret.pdf');
    const victimQuarantined = `${victim.organization.slug}/.tmp/direct/${randomUUID().replaceAll('-', '')}`;
    await api.ctx.store.put(victimQuarantined, pdf, { contentType: 'application/pdf' });
    const own = attacker.organization.slug;
    for (const key of [
      victimPdf,
      victimQuarantined,
      `${own}/.tmp/direct/../../${victimPdf}`,
      `${own}/.tmp/direct/`,
    ]) {
      const outcome = await forge('upload.verify-direct', 'import', {
        organizationId: attacker.organization.id,
        requestId: randomUUID(),
        key,
        bytes: pdf.length,
      });
      expect({ key, state: outcome.state, code: outcome.error?.code }).toEqual({
        key,
        state: 'failed',
        code: 'UPLOAD_NOT_FOUND',
      });
    }
    // Its own upload's object, for an older API replica: read back, its SHA-256 and type answered.
    const ownQuarantined = `${own}/.tmp/direct/${randomUUID().replaceAll('-', '')}`;
    await api.ctx.store.put(ownQuarantined, pdf, { contentType: 'application/pdf' });
    const outcome = await forge('upload.verify-direct', 'import', {
      organizationId: attacker.organization.id,
      requestId: randomUUID(),
      key: ownQuarantined,
      bytes: pdf.length,
    });
    expect(outcome).toMatchObject({
      state: 'completed',
      result: {
        bytes: pdf.length,
        sha256: sha256(pdf).replace(/^sha256:/, ''),
        mime: 'application/pdf',
      },
    });
    await api.ctx.store.remove(ownQuarantined);
    await api.ctx.store.remove(victimQuarantined);
  });

  it('cannot complete (read back, learn the checksum of, or record) anything but its own direct uploads (upload.complete-direct)', async () => {
    // The victim's direct upload, its bytes in its quarantine key, waiting for its completion.
    const uploads = new DirectUploads({
      redis: () => redis,
      store: api.ctx.store,
      usage: api.ctx.repositories.usage,
      queuePrefix: api.env.config.queuePrefix,
      logger: createLogger({ level: 'warn' }),
    });
    const id = randomUUID().replaceAll('-', '');
    const victimQuarantined = `${victim.organization.slug}/.tmp/direct/${id}`;
    await api.ctx.store.put(victimQuarantined, pdf, { contentType: 'application/pdf' });
    const now = Date.now();
    const [mediaId] = await api.ctx.repositories.media.nextIds(1);
    const state: DirectUploadState = {
      id,
      organizationId: victim.organization.id,
      key: victimQuarantined,
      name: 'secret.pdf',
      bytes: pdf.length,
      contentType: 'application/pdf',
      method: 'put',
      mediaId: mediaId!,
      bookingUntil: now + 60_000,
      createdAt: now,
      expiresAt: now + 60_000,
    };
    await uploads.add(state);
    const attackerRecords = await recordsOf(attacker);
    try {
      for (const uploadId of [id, `../${id}`, '', 'f'.repeat(32)]) {
        const outcome = await forge('upload.complete-direct', 'import', {
          ...base(attacker),
          uploadId,
          bytes: pdf.length,
          onDuplicate: 'allow',
        });
        expect({ uploadId, state: outcome.state, code: outcome.error?.code }).toEqual({
          uploadId,
          state: 'failed',
          code: 'UPLOAD_NOT_FOUND',
        });
      }
      // Nothing of it was touched: its bytes are where they were, it is not completed, no record.
      expect(await api.ctx.store.stat(victimQuarantined)).toMatchObject({ size: pdf.length });
      expect((await uploads.get(id))?.completed).toBeUndefined();
      expect(
        await api.ctx.repositories.media.findById(victim.organization.id, mediaId!),
      ).toBeNull();
      expect(await recordsOf(attacker)).toBe(attackerRecords);
    } finally {
      await uploads.forget(state);
      await api.ctx.store.remove(victimQuarantined);
    }
  });

  it('renders from its own organization’s record only, whatever checksum it names', async () => {
    const victimImage = await victim.upload(image, 'other.jpg');
    const ownImage = await attacker.upload(image, 'own.jpg');
    const checksumOf = async (key: string) =>
      (await api.ctx.models.Media.findOne({ key }).lean())!.checksum;
    const options = (width: number) =>
      normalizeRenderOptions({
        width,
        height: null,
        fit: 'cover',
        format: 'webp',
        quality: null,
        keepMetadata: false,
      });
    const variantsOf = async (key: string) =>
      ((await api.ctx.models.Media.findOne({ key }).lean())?.variants ?? []).map((v) => v.width);
    // Another organization's key with its own checksum: read ahead, perhaps, never used.
    const foreign = await forge('image.render', 'image', {
      organizationId: attacker.organization.id,
      requestId: randomUUID(),
      key: victimImage,
      options: options(30),
      checksum: await checksumOf(victimImage),
    });
    expect([foreign.state, foreign.error?.code]).toEqual(['failed', 'MEDIA_NOT_FOUND']);
    expect(await variantsOf(victimImage)).toEqual([]);
    // Its own key without a checksum (an older API's job), or with a wrong one: rendered from
    // the record's source.
    for (const [width, checksum] of [
      [31, undefined],
      [32, 'f'.repeat(64)],
      [33, await checksumOf(ownImage)],
    ] as const) {
      const own = await forge('image.render', 'image', {
        organizationId: attacker.organization.id,
        requestId: randomUUID(),
        key: ownImage,
        options: options(width),
        ...(checksum === undefined ? {} : { checksum }),
      });
      expect([width, own.state]).toEqual([width, 'completed']);
    }
    await eventually(async () => {
      expect((await variantsOf(ownImage)).sort()).toEqual([31, 32, 33]);
      expect(await api.objectKeys(`.variants/${ownImage}/`)).toHaveLength(3);
    }, 10_000);
    expect(await api.objectKeys(`.variants/${victimImage}/`)).toEqual([]);
  });
});
