/**
 * A merge's total size, with a real worker process: the
 * worker used to read every input (up to 50 of `MAX_FILE_SIZE` each) before
 * the total was checked, so a few small requests naming large stored PDFs
 * could take all its memory. Now the API refuses a total over
 * `MAX_MERGE_BYTES` (stored inputs by their records, uploaded ones as they
 * stream) with 413 before any job is queued, leaving nothing behind; and the
 * worker checks the stored sizes before reading, for a job that got past the
 * API. The worker's peak RSS during the attack is printed and bounded.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorkerProcess, type ServiceProcess } from '../../support/processes';

type Body = {
  statusCode: number;
  error?: string;
  limit?: number;
  jobId?: string;
  data?: { key?: string };
};

const MB = 1024 * 1024;
const LIMIT = 32 * MB;
/** Five distinct stored PDFs of 12 MB: 60 MB named by each request, over the 32 MB limit. */
const INPUTS = 5;
const INPUT_BYTES = 12 * MB;
/** What a refused merge may add to the worker's peak RSS (it reads none of its inputs). */
const MAX_GROWTH_MB = 24;

let api: TestApi;
let worker: ServiceProcess;
let org: TestOrg;
let other: TestOrg;
const keys: string[] = [];
const figures: string[] = [];

/** A valid small PDF followed by `bytes` of random padding after %%EOF (distinct each call). */
function largePdf(bytes: number): Buffer {
  return Buffer.concat([fixture('minimal-document.pdf'), Buffer.from('\n%'), randomBytes(bytes)]);
}

beforeAll(async () => {
  const env = { RATE_LIMIT_MAX: '0', MAX_MERGE_BYTES: String(LIMIT) };
  api = await startApi('merge-total', { env });
  org = await api.createOrg('merge-total');
  other = await api.createOrg('merge-total-other');
  worker = await startWorkerProcess({ ...api.env.env, ...env, WORKER_CONCURRENCY: '3' });
  for (let i = 0; i < INPUTS; i++)
    keys.push(await org.upload(largePdf(INPUT_BYTES), `big-${i}.pdf`));
  // The worker reads each new PDF once for its page count (a listener on media.created): let
  // it finish first, so the figures below are the attack's own.
  await eventually(async () => {
    const counted = await api.ctx.models.Media.countDocuments({
      key: { $in: keys },
      pages: { $gte: 1 },
    });
    expect(counted).toBe(INPUTS);
  }, 90_000);
  // Warm the worker (pdf-lib, the queue connections) so the figures are the attack's own.
  const warm = await merge(other, [], [[fixture('minimal-document.pdf'), 'warm.pdf']]);
  expect(warm.status).toBe(201);
}, 120_000);

afterAll(async () => {
  process.stdout.write(`\n${figures.join('\n')}\n`);
  if (process.env.MERGE_TOTAL_FIGURES_FILE) {
    writeFileSync(process.env.MERGE_TOTAL_FIGURES_FILE, `${figures.join('\n')}\n`);
  }
  await worker?.kill('SIGTERM');
  await api?.close();
}, 30_000);

function rssMb(field: 'VmHWM' | 'VmRSS'): number {
  const status = readFileSync(`/proc/${worker.child.pid}/status`, 'utf8');
  return Math.round(Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1]) / 1024);
}

/** The worker's RSS before `call` and its peak during it (VmHWM reset first), printed. */
async function peakDuring<T>(
  what: string,
  call: () => Promise<T>,
): Promise<{ result: T; growthMb: number }> {
  writeFileSync(`/proc/${worker.child.pid}/clear_refs`, '5'); // VmHWM := VmRSS
  const before = rssMb('VmRSS');
  const result = await call();
  const peak = rssMb('VmHWM');
  figures.push(`${what}: worker RSS ${before} MB before, peak ${peak} MB (+${peak - before} MB)`);
  expect(worker.child.exitCode).toBeNull();
  return { result, growthMb: peak - before };
}

async function merge(who: TestOrg, mediaKeys: string[], files: [Buffer, string][] = []) {
  const fd = new FormData();
  for (const key of mediaKeys) fd.append('mediaKeys', key);
  for (const [bytes, name] of files) fd.append('files', new Blob([bytes]), name);
  const res = await fetch(`${api.url}/media/merge-pdfs`, {
    method: 'POST',
    headers: who.auth,
    body: fd,
  });
  const body = (await res.json()) as Body;
  expectMatchesSpec('POST', '/media/merge-pdfs', res.status, body, res.headers);
  return { status: res.status, body };
}

async function expectNothingQueuedOrLeft() {
  // The PDF queue: no merge was queued. (The maintenance queue carries the domain
  // events' deliveries of the uploads, at the dispatcher's own pace.)
  for (const queue of api.ctx.queues.filter((q) => q.name === 'pdf')) {
    const counts = await queue.getJobCounts(
      'waiting',
      'active',
      'delayed',
      'prioritized',
      'failed',
    );
    expect(Object.values(counts).every((n) => n === 0)).toBe(true);
  }
  await api.expectNoObjects(`${org.organization.slug}/.tmp/`);
  expect(await api.ctx.store.listIncompleteUploads('')).toEqual([]);
  expect(await api.ctx.models.Media.countDocuments({ organizationId: org.organization.id })).toBe(
    INPUTS,
  );
}

it('refuses merges of stored PDFs over MAX_MERGE_BYTES with 413 before queueing; the worker reads nothing', async () => {
  const { result, growthMb } = await peakDuring(
    `3 concurrent merges, each naming ${INPUTS} stored PDFs of ${INPUT_BYTES / MB} MB (limit ${LIMIT / MB} MB)`,
    () => Promise.all([0, 1, 2].map(() => merge(org, keys))),
  );
  for (const { status, body } of result) {
    expect(status).toBe(413);
    expect(body.error).toBe('PAYLOAD_TOO_LARGE');
    expect(body.limit).toBe(LIMIT);
    expect(body.jobId).toBeUndefined(); // no job was made
  }
  expect(growthMb).toBeLessThan(MAX_GROWTH_MB);
  await expectNothingQueuedOrLeft();
  // Another tenant is served meanwhile.
  expect((await merge(other, [], [[fixture('minimal-document.pdf'), 'a.pdf']])).status).toBe(201);
}, 120_000);

it('refuses uploaded parts over the total as they stream; the parts already stored are removed', async () => {
  const files: [Buffer, string][] = [0, 1, 2].map((i) => [largePdf(INPUT_BYTES), `part-${i}.pdf`]);
  const { status, body } = await merge(org, [], files);
  expect(status).toBe(413);
  expect(body.error).toBe('PAYLOAD_TOO_LARGE');
  await expectNothingQueuedOrLeft();
}, 120_000);

it('counts stored and uploaded inputs together', async () => {
  const { status, body } = await merge(org, keys.slice(0, 2), [
    [largePdf(INPUT_BYTES), 'third.pdf'],
  ]);
  expect(status).toBe(413);
  expect(body.limit).toBe(LIMIT);
  await expectNothingQueuedOrLeft();
}, 120_000);

it('the worker checks the stored sizes before reading (a job that got past the API)', async () => {
  // Queued directly, as an API with a larger limit (or an older one) would have queued it.
  const { result, growthMb } = await peakDuring(
    'one job queued past the API, 60 MB of inputs',
    () =>
      api.ctx.jobs
        .run(
          'pdf.merge',
          {
            organizationId: org.organization.id,
            requestId: 'merge-total-direct',
            origin: { ipAddress: '127.0.0.1', userAgent: 'test' },
            tokenId: org.tokenId,
            inputs: keys.map((key, i) => ({ key, name: `big-${i}.pdf` })),
            folderId: null,
            temporaryKeys: [],
          },
          { async: false, rootFolderId: org.organization.rootFolderId },
        )
        .then(
          () => undefined,
          (err: unknown) => err,
        ),
  );
  expect(result).toMatchObject({ status: 413, code: 'PAYLOAD_TOO_LARGE' });
  expect(growthMb).toBeLessThan(MAX_GROWTH_MB);
  expect(await api.ctx.models.Media.countDocuments({ organizationId: org.organization.id })).toBe(
    INPUTS,
  );
}, 120_000);
