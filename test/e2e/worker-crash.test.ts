/**
 * End to end with the real processes: an API and two workers. One worker is
 * killed with SIGKILL while it converts the largest corpus image to GIF (its
 * pixel bound raised: about 3 s of one core at effort 1), then a second
 * worker starts; the job is taken over by it once the lock expires, the request still
 * succeeds (or, past the wait limit, the status URL shows success later), and
 * exactly one record and one object come out of it.
 */
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { eventually } from '../support/eventually';
import { corpusFile } from '../support/files';
import { startApiProcess, startWorkerProcess, type ServiceProcess } from '../support/processes';

type Body<T> = { statusCode: number; data: T; error?: string; jobId?: string };

let harness: TestApi; // in-process, only to set up the organization and look behind the API
let org: TestOrg;
let api: ServiceProcess;
const workers: ServiceProcess[] = [];

beforeAll(async () => {
  harness = await startApi('e2ecrash');
  org = await harness.createOrg('crash');
  const env = {
    ...harness.env.env,
    JOB_WAIT_MS: '60000',
    JOB_LOCK_MS: '4000',
    WORKER_CONCURRENCY: '1',
    // A GIF of the 12 MP photo is refused by default (2048 × 2048): here it is the slow job.
    MAX_GIF_OUTPUT_PIXELS: '100000000',
  };
  // Side by side; each is kept as it comes up, so that afterAll stops it whatever the other did.
  await Promise.all([
    startApiProcess(env).then((p) => (api = p)),
    startWorkerProcess(env).then((p) => workers.push(p)),
  ]);
}, 120_000);
afterAll(async () => {
  for (const p of [...workers, api]) await p?.kill('SIGTERM');
  await harness.close();
}, 60_000);

it('a worker killed mid-job: the job completes once, elsewhere', async () => {
  const bytes = corpusFile('images/tests-42_IndexError.jpg');
  const source = await org.uploadRecord(bytes, 'largest.jpg', { via: api.url! });

  const convert = fetch(`${api.url!}/media/convert`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ mediaKey: source.key, format: 'gif' }),
  });
  // The only worker takes the job; once it is at work, it dies, and a second worker starts
  // (its start-up runs while the dead worker's lock runs out, not before the kill).
  const [first] = workers;
  await first!.waitForLog(/"job":"image.convert"|"msg":"taking jobs"/);
  await eventually(
    async () => expect((await harness.ctx.queue.counts()).image.active ?? 0).toBeGreaterThan(0),
    5_000,
    50,
  );
  await first!.kill('SIGKILL');
  workers.push(
    await startWorkerProcess({
      ...harness.env.env,
      JOB_LOCK_MS: '4000',
      WORKER_CONCURRENCY: '1',
      MAX_GIF_OUTPUT_PIXELS: '100000000',
    }),
  );

  const res = await convert;
  const body = (await res.json()) as Body<{ id: number; key: string; mimetype: string }>;
  expect(res.status).toBe(201);
  expect(body.data.mimetype).toBe('image/gif');

  // Exactly one record and one object came of the job.
  const results = await harness.ctx.models.Media.find({
    organizationId: org.organization.id,
    mimetype: 'image/gif',
  }).lean();
  expect(results).toHaveLength(1);
  expect(results[0]!.jobId).toMatch(/^image-/);
  const gifObjects = (await harness.objectKeys('crash/')).filter((k) => k.endsWith('.gif'));
  expect(gifObjects).toEqual([results[0]!.key]);
  // The second worker is the one that finished it: the first died mid-job.
  const convertedBy = (w: ServiceProcess) =>
    w.logs.some((l) => l.includes('"msg":"job completed"') && l.includes('image.convert'));
  expect(convertedBy(first!)).toBe(false);
  expect(convertedBy(workers[1]!)).toBe(true);
}, 120_000);

it('a worker sent SIGTERM mid-job finishes the job, then exits cleanly', async () => {
  const worker = workers[workers.length - 1]!;
  const source = await org.uploadRecord(corpusFile('images/hdr-iphone_hdr_YES.jpg'), 'phone.jpg', {
    via: api.url!,
  });
  const convert = fetch(`${api.url!}/media/convert`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ mediaKey: source.key, format: 'gif' }),
  });
  await eventually(
    async () => expect((await harness.ctx.queue.counts()).image.active ?? 0).toBeGreaterThan(0),
    5_000,
    25,
  );
  const exitCode = worker.kill('SIGTERM');
  const res = await convert;
  expect(res.status).toBe(201);
  expect(await exitCode).toBe(0);
  expect(
    worker.logs.some((l) => l.includes('"msg":"job completed"') && l.includes('image.convert')),
  ).toBe(true);
  expect(worker.logs.some((l) => l.includes('"msg":"shutdown complete"'))).toBe(true);
}, 120_000);
