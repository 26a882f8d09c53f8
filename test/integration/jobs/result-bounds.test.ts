/**
 * Job results too large for Redis (metadata of an image carrying a large
 * XMP block) are bounded where the worker writes them, counted in the
 * organization's usage while stored, and removed once read or once expired,
 * by the workers' sweep, without waiting for reconcile. Through the API, the
 * queue and a real worker, with an 8 s RESULT_TTL_MS (the bounds with one of a
 * minute: a result must not expire while the test reads it back).
 *
 * Before: a 1 KB PNG with a 1 MB XMP stored 2.4 MB under `<org>/.results/`
 * per `Prefer: respond-async` request (12.2 MB for a 5 MB XMP), in no usage
 * figure and under no bound, until `reconcile` removed it; a request that
 * answered 504 left its result the same way.
 */
import sharp from 'sharp';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

const MiB = 1024 * 1024;
const TTL_MS = 8_000;
/** The bounds test's: longer than any of its steps may take on a loaded machine. */
const LONG_TTL_MS = 60_000;
/** A result's bound and an organization's: one 2.4 MB result fits, a second does not. */
const RESULT_MAX = 4 * MiB;
const PER_ORG_MAX = 4 * MiB;

type Body<T> = { data: T; error?: string; jobId?: string; limit?: number };
type Metadata = { format?: string; xmp?: { type: string; data: number[] } };

/** The API the helpers below talk to (the bounds test switches it to its own). */
let api: TestApi;
let worker: TestWorker;

const settings = (ttlMs: number) => ({
  RESULT_TTL_MS: String(ttlMs),
  RESULT_MAX_BYTES: String(RESULT_MAX),
  RESULTS_MAX_BYTES_PER_ORG: String(PER_ORG_MAX),
  // Long enough for any synchronous answer here, on a loaded machine too (a 1 MB XMP
  // read took over 5 s beside other test files); the 504 test asks a replica of its own
  // with a short one, and no worker.
  JOB_WAIT_MS: '15000',
});

beforeAll(async () => {
  api = await startApi('result-bounds', { env: settings(TTL_MS) });
  worker = await startWorker(api.env.env);
}, 60_000);
afterAll(async () => {
  await worker.close();
  await api.close();
});

/** A tiny PNG carrying an XMP block of `mb` MiB (its metadata's stored form is ~2.4 × that). */
async function xmpPng(mb: number): Promise<Buffer> {
  const xmp = `<x:xmpmeta xmlns:x="adobe:ns:meta/"><!--${'a'.repeat(mb * MiB)}--></x:xmpmeta>`;
  return sharp({ create: { width: 8, height: 8, channels: 3, background: '#f00' } })
    .png()
    .withXmp(xmp)
    .toBuffer();
}

async function metadata(
  org: TestOrg,
  key: string,
  headers: Record<string, string> = {},
  via: TestApi = api,
) {
  const res = await fetch(`${via.url}/media/metadata?mediaKey=${encodeURIComponent(key)}`, {
    headers: { ...org.auth, ...headers },
  });
  const body = (await res.json()) as Body<Metadata & { jobId?: string }>;
  expectMatchesSpec('GET', '/media/metadata', res.status, body, res.headers);
  return { status: res.status, body, headers: res.headers };
}

async function status(org: TestOrg, jobId: string) {
  const res = await fetch(`${api.url}/media/jobs/${jobId}`, { headers: org.auth });
  const body = (await res.json()) as Body<Metadata & { state?: string }>;
  expectMatchesSpec('GET', '/media/jobs/{id}', res.status, body, res.headers);
  return { status: res.status, body };
}

async function resultBytesOf(org: TestOrg): Promise<number> {
  const res = await fetch(`${api.url}/media/usage`, { headers: org.auth });
  return ((await res.json()) as Body<{ resultBytes: number }>).data.resultBytes;
}

/** Nothing of the organization's results is left: objects, entries, the counter. */
async function expectNoResults(org: TestOrg, timeoutMs: number): Promise<void> {
  await eventually(async () => {
    expect(await api.objectKeys(`${org.organization.slug}/.results/`)).toEqual([]);
    expect(
      await api.ctx.models.JobResult.countDocuments({ organizationId: org.organization.id }),
    ).toBe(0);
    expect(await resultBytesOf(org)).toBe(0);
    expect((await api.ctx.repositories.usage.counters(org.organization.id)).resultBytes).toBe(0);
  }, timeoutMs);
}

/** Bound of a wait for the sweep: the TTL, a sweep interval (half of it), and slack. */
const EXPIRY_WAIT_MS = TTL_MS * 2 + 10_000;

it('removes a result once read, and an unread one once expired; usage shows it meanwhile', async () => {
  const org = await api.createOrg('rb-expiry');
  const png = await xmpPng(1);
  const expected = (await sharp(png).metadata()).xmp!;
  const key = await org.upload(png, 'xmp.png');

  // Read by the waiting request: gone at once.
  const sync = await metadata(org, key);
  expect(sync.status).toBe(200);
  expect(Buffer.from(sync.body.data.xmp!.data).equals(expected)).toBe(true);
  await expectNoResults(org, 2_000);

  // Never read: stored, counted in usage, then removed past its expiry.
  const queued = await metadata(org, key, { Prefer: 'respond-async' });
  expect(queued.status).toBe(202);
  const jobId = queued.body.data.jobId!;
  const stored = await eventually(async () => {
    const [object] = await api.objectKeys(`${org.organization.slug}/.results/`);
    expect(object).toBe(`${org.organization.slug}/.results/${jobId}.json`);
    return (await api.ctx.store.stat(object!))!.size;
  });
  expect(stored).toBeGreaterThan(2 * MiB);
  expect(await resultBytesOf(org)).toBe(stored);
  await expectNoResults(org, EXPIRY_WAIT_MS);
  // The job is still kept (an hour), its result is not.
  const late = await status(org, jobId);
  expect([late.status, late.body.error]).toEqual([404, 'JOB_NOT_FOUND']);
}, 60_000);

it('refuses a result over RESULT_MAX_BYTES (413), and one past the organization’s bound until the waiting one is read (429)', async () => {
  const shortLived = api;
  api = await startApi('result-bounds-long', { env: settings(LONG_TTL_MS) });
  const longWorker = await startWorker(api.env.env);
  try {
    await boundsTest();
  } finally {
    await longWorker.close();
    await api.close();
    api = shortLived;
  }
}, 120_000);

async function boundsTest() {
  const org = await api.createOrg('rb-bounds');
  const huge = await org.upload(await xmpPng(2), 'huge.png');
  const tooLarge = await metadata(org, huge);
  expect([tooLarge.status, tooLarge.body.error, tooLarge.body.limit]).toEqual([
    413,
    'PAYLOAD_TOO_LARGE',
    RESULT_MAX,
  ]);
  expect(tooLarge.body.jobId).toMatch(/^image-/);
  await expectNoResults(org, 2_000);

  const key = await org.upload(await xmpPng(1), 'xmp.png');
  const first = await metadata(org, key, { Prefer: 'respond-async' });
  expect(first.status).toBe(202);
  const firstJob = first.body.data.jobId!;
  // Stored, and waiting unread (its status URL is not asked yet).
  await eventually(async () => {
    expect(await api.objectKeys(`${org.organization.slug}/.results/`)).toEqual([
      `${org.organization.slug}/.results/${firstJob}.json`,
    ]);
  });
  // A second would pass the organization's bound: refused, nothing kept.
  const second = await metadata(org, key);
  expect([second.status, second.body.error, second.body.limit]).toEqual([
    429,
    'TOO_MANY_RESULTS',
    PER_ORG_MAX,
  ]);
  expect(second.body.jobId).toMatch(/^image-/);
  const retryAfter = Number(second.headers.get('retry-after'));
  expect(retryAfter).toBeGreaterThanOrEqual(1);
  expect(retryAfter).toBeLessThanOrEqual(LONG_TTL_MS / 1000);
  expect(await api.objectKeys(`${org.organization.slug}/.results/`)).toHaveLength(1);
  // Another organization is not affected.
  const other = await api.createOrg('rb-other');
  const otherKey = await other.upload(await xmpPng(1), 'other.png');
  expect((await metadata(other, otherKey)).status).toBe(200);

  // Read through its status URL, the first is removed and frees its room at once.
  const read = await status(org, firstJob);
  expect([read.status, read.body.data.format]).toEqual([200, 'png']);
  await expectNoResults(org, 2_000);
  const third = await metadata(org, key);
  expect(third.status).toBe(200);
  await expectNoResults(org, 2_000);
  await expectNoResults(other, 2_000);
}

it('leaves nothing past expiry of a request that answered 504', async () => {
  const org = await api.createOrg('rb-timeout');
  const key = await org.upload(await xmpPng(1), 'xmp.png');
  // No worker: the request waits JOB_WAIT_MS, then 504 with the job id; the job stays queued.
  // Asked of another replica of the API (the same database, queues and bucket) whose
  // JOB_WAIT_MS is one second: with no worker nothing can answer in time, so the file's
  // 15 s (for the synchronous answers above) would only be waited out.
  await worker.close();
  const shortWait = await startApi('result-bounds-504', {
    store: api.ctx.store,
    env: {
      ...settings(TTL_MS),
      JOB_WAIT_MS: '1000',
      MONGODB_URI: api.env.env.MONGODB_URI,
      QUEUE_PREFIX: api.env.queuePrefix,
      S3_BUCKET: api.env.bucket,
    },
  });
  let timedOut: Awaited<ReturnType<typeof metadata>>;
  try {
    timedOut = await metadata(org, key, {}, shortWait);
  } finally {
    await shortWait.close();
  }
  expect([timedOut.status, timedOut.body.error]).toEqual([504, 'JOB_TIMEOUT']);
  const jobId = timedOut.body.jobId!;
  worker = await startWorker(api.env.env);
  // The job runs and stores its result for a reader who never comes.
  await eventually(async () => {
    expect(await api.objectKeys(`${org.organization.slug}/.results/`)).toEqual([
      `${org.organization.slug}/.results/${jobId}.json`,
    ]);
  });
  await expectNoResults(org, EXPIRY_WAIT_MS);
}, 60_000);
