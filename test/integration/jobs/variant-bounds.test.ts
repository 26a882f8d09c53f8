/**
 * Rendered variants are bounded where they are written, and counted: through
 * the API, the queue and a real worker.
 *
 * - RENDER_MAX_VARIANTS holds under renders at once: twelve distinct first
 *   renders all pass the API's check (queued before any worker runs), and
 *   the worker records only as many as the bound allows; the others answer
 *   400 and leave no object (before: every one was stored, 12 against 5).
 * - A variant's bytes are in the organization's usage (`variantBytes`) and
 *   against its quota: one that would pass it is refused 413 and nothing is
 *   stored; `DELETE /media/variants` and deleting the source give the bytes
 *   back; reconcile's counts agree (before: variants were in no count, and a
 *   4096 px TIFF of a 14 MB source stored 67 MB past any quota).
 * - Reconcile lists a variant object its source's record does not list.
 */
import { createLogger } from '../../../shared/logger';
import { MediaDeletion } from '../../../shared/media-deletion';
import { createRepositories } from '../../../shared/repositories';
import { ReconcileService } from '../../../api/services/reconcile.service';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Body<T> = {
  data: T;
  error?: string;
  jobId?: string;
  limit?: number;
  details?: { field?: string; message: string }[];
};
type Usage = {
  bytes: number;
  files: number;
  variants: number;
  variantBytes: number;
  resultBytes: number;
  quota: { bytes: number | null; remaining: number | null };
};

const MAX = 5;
let api: TestApi;
let worker: TestWorker | undefined;

beforeAll(async () => {
  api = await startApi('variant-bounds', {
    env: { RENDER_MAX_VARIANTS: String(MAX), WORKER_CONCURRENCY: '3' },
  });
}, 60_000);
afterAll(async () => {
  await worker?.close();
  await api.close();
});

async function render(org: TestOrg, key: string, options: Record<string, string | number>) {
  const query = new URLSearchParams({ media: key });
  for (const [k, v] of Object.entries(options)) query.set(k, String(v));
  const res = await fetch(`${api.url}/media/render?${query.toString()}`, { headers: org.auth });
  const bytes = Buffer.from(await res.arrayBuffer());
  const body = res.headers.get('content-type')?.startsWith('application/json')
    ? (JSON.parse(bytes.toString()) as Body<unknown>)
    : undefined;
  expectMatchesSpec('GET', '/media/render', res.status, body, res.headers);
  return { status: res.status, bytes, body };
}

async function usageOf(org: TestOrg): Promise<Usage> {
  const res = await fetch(`${api.url}/media/usage`, { headers: org.auth });
  const body = (await res.json()) as Body<Usage>;
  expectMatchesSpec('GET', '/media/usage', res.status, body, res.headers);
  return body.data;
}

/** The variants the source's record lists, as stored in MongoDB. */
async function recordedVariants(key: string) {
  const doc = await api.ctx.models.Media.findOne({ key }).lean();
  return (doc?.variants ?? []).map((v) => ({ key: v.key, bytes: v.bytes }));
}

/** Reconcile's usage check for one organization (no fix): the drift it finds. */
async function usageDrift(org: TestOrg) {
  const { media, usage, jobResults, events } = createRepositories(api.ctx.models);
  const logger = createLogger({ level: 'silent' });
  const deletion = new MediaDeletion({ media, usage, events, store: api.ctx.store, logger });
  const report = await new ReconcileService({
    store: api.ctx.store,
    media,
    usage,
    jobResults,
    deletion,
  }).run({ organization: org.organization, olderThanMs: 0, fix: false });
  return report.usageDrift;
}

it('never records more than RENDER_MAX_VARIANTS for renders at once: objects and record both', async () => {
  const org = await api.createOrg('vb-race');
  const source = await org.uploadRecord('Canon_40D.jpg', 'race.jpg');
  // Twelve distinct first renders, all past the API's check (no variant yet) and queued
  // before any worker runs: only the worker can stop them.
  const widths = Array.from({ length: 12 }, (_, i) => 10 + i);
  const answers = Promise.all(widths.map((w) => render(org, source.key, { w, format: 'png' })));
  await eventually(async () => {
    const counts = await api.ctx.queue.counts();
    const queued = Object.values(counts.image ?? {}).reduce((a, b) => a + b, 0);
    expect(queued).toBe(widths.length);
  });
  worker = await startWorker(api.env.env);
  const results = await answers;

  const served = results.filter((r) => r.status === 200);
  const refused = results.filter((r) => r.status !== 200);
  expect(served).toHaveLength(MAX);
  expect(refused).toHaveLength(widths.length - MAX);
  for (const r of refused) {
    expect([r.status, r.body?.error]).toEqual([400, 'VALIDATION_FAILED']);
    expect(r.body?.details?.[0]?.message).toContain(`RENDER_MAX_VARIANTS ${MAX}`);
    expect(r.body?.jobId).toMatch(/^image-/);
  }
  const recorded = await recordedVariants(source.key);
  expect(recorded).toHaveLength(MAX);
  // The refused renders removed what they wrote: the objects are exactly the recorded ones.
  await eventually(async () => {
    expect(await api.objectKeys(`.variants/${source.key}/`)).toEqual(
      recorded.map((v) => v.key).sort(),
    );
  }, 5_000);
  const variantBytes = recorded.reduce((n, v) => n + v.bytes, 0);
  expect(await usageOf(org)).toMatchObject({
    bytes: source.bytes,
    variants: MAX,
    variantBytes,
  });
  expect(await api.ctx.repositories.usage.counters(org.organization.id)).toEqual({
    bytes: source.bytes + variantBytes,
    files: 1,
    variantBytes,
    resultBytes: 0,
  });
  expect(await usageDrift(org)).toEqual([]);
  // A sixth still gets the API's own refusal, with no job.
  const sixth = await render(org, source.key, { w: 50, format: 'png' });
  expect([sixth.status, sixth.body?.error, sixth.body?.jobId]).toEqual([
    400,
    'VALIDATION_FAILED',
    undefined,
  ]);
}, 90_000);

it('counts a variant’s bytes against the quota: past it 413 and nothing stored; deletes give them back', async () => {
  worker ??= await startWorker(api.env.env);
  const org = await api.createOrg('vb-quota');
  const jpeg = fixture('orientation-landscape_6.jpg');
  const source = await org.uploadRecord(jpeg, 'quota.jpg');
  // Room for the source and a thumbnail, not for the source again as a PNG.
  const quota = source.bytes + 20_000;
  await api.ctx.organizations.setQuota(org.organization.id, quota);

  const thumb = await render(org, source.key, { w: 40, format: 'webp' });
  expect(thumb.status).toBe(200);
  const thumbBytes = thumb.bytes.length;
  expect(await usageOf(org)).toMatchObject({
    bytes: source.bytes,
    files: 1,
    variants: 1,
    variantBytes: thumbBytes,
    quota: { bytes: quota, remaining: quota - source.bytes - thumbBytes },
  });

  // A full-size PNG would pass the quota: refused by the worker before anything is written.
  const big = await render(org, source.key, { format: 'png' });
  expect([big.status, big.body?.error, big.body?.limit]).toEqual([413, 'QUOTA_EXCEEDED', quota]);
  expect(big.body?.jobId).toMatch(/^image-/);
  expect(await recordedVariants(source.key)).toHaveLength(1);
  await eventually(async () => {
    expect(await api.objectKeys(`.variants/${source.key}/`)).toHaveLength(1);
  }, 5_000);
  expect((await usageOf(org)).variantBytes).toBe(thumbBytes);

  // A variant the handoff would take (under RENDER_HANDOFF_MAX_BYTES), over what is left: its
  // reservation is refused beside its booking, which is taken back (no record, no object).
  await api.ctx.organizations.setQuota(org.organization.id, source.bytes + thumbBytes + 10);
  const over = await render(org, source.key, { w: 200, format: 'webp' });
  expect([over.status, over.body?.error]).toEqual([413, 'QUOTA_EXCEEDED']);
  expect(await recordedVariants(source.key)).toHaveLength(1);
  expect((await usageOf(org)).variantBytes).toBe(thumbBytes);
  expect(await api.objectKeys(`.variants/${source.key}/`)).toHaveLength(1);
  await api.ctx.organizations.setQuota(org.organization.id, quota);

  // The variants alone go: their bytes come back, the file stays.
  const removed = await fetch(`${api.url}/media/variants?media=${encodeURIComponent(source.key)}`, {
    method: 'DELETE',
    headers: org.auth,
  });
  const removedBody = (await removed.json()) as Body<unknown>;
  expectMatchesSpec('DELETE', '/media/variants', removed.status, removedBody, removed.headers);
  expect([removed.status, removedBody.data]).toEqual([
    200,
    { media: source.key, variants: 1, bytes: thumbBytes },
  ]);
  expect(await api.objectKeys(`.variants/${source.key}/`)).toEqual([]);
  expect(await usageOf(org)).toMatchObject({
    bytes: source.bytes,
    variants: 0,
    variantBytes: 0,
    quota: { remaining: quota - source.bytes },
  });

  // The quota reached: the API refuses a first render at once, with no job.
  await api.ctx.organizations.setQuota(org.organization.id, source.bytes);
  const full = await render(org, source.key, { w: 30, format: 'webp' });
  expect([full.status, full.body?.error, full.body?.jobId]).toEqual([
    413,
    'QUOTA_EXCEEDED',
    undefined,
  ]);

  // Deleting the source gives back its bytes and its variants'.
  await api.ctx.organizations.setQuota(org.organization.id, quota);
  expect((await render(org, source.key, { w: 30, format: 'webp' })).status).toBe(200);
  expect((await usageOf(org)).variants).toBe(1);
  expect(await usageDrift(org)).toEqual([]);
  const deleted = await fetch(`${api.url}/media/${source.id}`, {
    method: 'DELETE',
    headers: org.auth,
  });
  expect(deleted.status).toBe(200);
  expect(await api.ctx.repositories.usage.counters(org.organization.id)).toEqual({
    bytes: 0,
    files: 0,
    variantBytes: 0,
    resultBytes: 0,
  });
  expect(await usageOf(org)).toMatchObject({ bytes: 0, variants: 0, variantBytes: 0 });
}, 90_000);

it('reconcile lists a variant object its source’s record does not list', async () => {
  const org = await api.createOrg('vb-stray');
  const source = await org.uploadRecord('Canon_40D.jpg', 'stray.jpg');
  // What a render cut off between its object and its record would leave.
  const stray = `.variants/${source.key}/unrecorded.webp`;
  await api.ctx.store.put(stray, Buffer.from('stray'), { contentType: 'image/webp' });
  const { media, usage, events } = createRepositories(api.ctx.models);
  const logger = createLogger({ level: 'silent' });
  const deletion = new MediaDeletion({ media, usage, events, store: api.ctx.store, logger });
  const report = await new ReconcileService({ store: api.ctx.store, media, usage, deletion }).run({
    organization: org.organization,
    olderThanMs: 0,
    now: new Date(Date.now() + 60_000),
    fix: true,
    checkUsage: false,
  });
  expect(report.objectsWithoutRecord).toEqual([
    expect.objectContaining({ key: stray, variant: true }),
  ]);
  expect(await api.objectKeys(`.variants/${source.key}/`)).toEqual([]);
});
