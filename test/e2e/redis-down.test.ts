/**
 * End to end with the real processes: an API and a worker that reach Redis
 * through a TCP proxy the test cuts and restores. While Redis is away the job
 * endpoints answer 503 at once (a request already waiting for its job too,
 * long before JOB_WAIT_MS), uploads and downloads go on, /readyz names Redis;
 * once Redis is back, everything works again without restarting anything.
 */
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { redisUrl } from '../support/context';
import { fixture, form, sha256 } from '../support/files';
import { expectMatchesSpec } from '../support/openapi';
import { startApiProcess, startWorkerProcess, type ServiceProcess } from '../support/processes';
import { hostPortOf, startTcpProxy, type TcpProxy } from '../support/tcp-proxy';
import { eventually as pollUntil } from '../support/eventually';

type ErrorBody = {
  statusCode: number;
  error: string;
  message: string;
  dependency?: string;
  jobId?: string;
  requestId: string;
};
type Readiness = { status: string; checks: Record<string, { ok: boolean; error?: string }> };

/** Far above every bound asserted below: a request that waited for it would fail the test. */
const JOB_WAIT_MS = 60_000;
/** How fast a job endpoint must answer while Redis is down. */
const FAST_MS = 5_000;

let harness: TestApi; // in-process, to set up the organization and look behind the API
let org: TestOrg;
let proxy: TcpProxy;
let api: ServiceProcess;
let worker: ServiceProcess;
let image: { key: string };
let pdf: { key: string };

async function timed(path: string, init: RequestInit = {}) {
  const started = performance.now();
  const res = await fetch(`${api.url!}${path}`, {
    ...init,
    headers: { ...org.auth, ...(init.headers as Record<string, string> | undefined) },
    // A hung request fails the test instead of hanging it.
    signal: AbortSignal.timeout(JOB_WAIT_MS / 2),
  });
  const body = await res.json();
  return { res, body, ms: performance.now() - started };
}

const json = (body: unknown): RequestInit => ({
  method: 'POST',
  headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify(body),
});

async function readyz() {
  const res = await fetch(`${api.url!}/readyz`);
  return { status: res.status, body: (await res.json()) as Readiness };
}

const eventually = <T>(check: () => Promise<T>, timeoutMs = 30_000) =>
  pollUntil(check, timeoutMs, 250);

beforeAll(async () => {
  harness = await startApi('e2eredis');
  org = await harness.createOrg('redisdown');
  const { host, port } = hostPortOf(redisUrl());
  proxy = await startTcpProxy(host, port);
  const env = {
    ...harness.env.env,
    REDIS_URL: proxy.via(redisUrl()),
    JOB_WAIT_MS: String(JOB_WAIT_MS),
  };
  [api, worker] = await Promise.all([startApiProcess(env), startWorkerProcess(env)]);
  image = await org.uploadRecord('Canon_40D.jpg', 'canon.jpg', { via: api.url! });
  pdf = await org.uploadRecord('minimal-document.pdf', 'doc.pdf', { via: api.url! });
}, 120_000);

afterAll(async () => {
  await proxy.restore();
  for (const p of [worker, api]) await p?.kill('SIGTERM');
  await proxy.close();
  await harness.close();
}, 60_000);

it('Redis going away: job endpoints answer 503 at once, uploads and downloads go on, and all recovers', async () => {
  // A request already waiting for its job when Redis goes: the image queue is
  // paused (through the harness's own connection) so the job stays waiting.
  const images = harness.ctx.queue.queue('image');
  await images.pause();
  const inFlight = timed('/media/convert', json({ mediaKey: image.key, format: 'png' }));
  await eventually(async () => expect((await images.getJobCounts('waiting')).waiting).toBe(1));
  await proxy.cut();
  const cutAt = performance.now();

  const waited = await inFlight;
  const waitedFor = performance.now() - cutAt;
  expect(waited.res.status).toBe(503);
  expect(waitedFor).toBeLessThan(FAST_MS);
  expect(waited.body).toMatchObject({
    statusCode: 503,
    error: 'DEPENDENCY_UNAVAILABLE',
    dependency: 'Redis',
    jobId: expect.stringMatching(/^image-/) as string,
  });
  expectMatchesSpec('POST', '/media/convert', 503, waited.body, waited.res.headers);
  const inFlightJobId = (waited.body as ErrorBody).jobId!;

  // Every job endpoint answers 503 in the documented envelope, fast.
  const attempts = {
    metadata: await timed(`/media/metadata?mediaKey=${encodeURIComponent(image.key)}`),
    convert: await timed('/media/convert', json({ mediaKey: image.key, format: 'webp' })),
    merge: await timed('/media/merge-pdfs', {
      method: 'POST',
      body: form([
        ['mediaKeys', pdf.key],
        ['files', fixture('pdflatex-4-pages.pdf'), 'four.pdf'],
      ]),
    }),
    status: await timed(`/media/jobs/${encodeURIComponent(inFlightJobId)}`),
  };
  const spec = {
    metadata: ['GET', '/media/metadata'],
    convert: ['POST', '/media/convert'],
    merge: ['POST', '/media/merge-pdfs'],
    status: ['GET', '/media/jobs/{id}'],
  } as const;
  for (const [name, { res, body, ms }] of Object.entries(attempts)) {
    const [method, path] = spec[name as keyof typeof spec];
    expect({ name, status: res.status }).toEqual({ name, status: 503 });
    expect(ms).toBeLessThan(FAST_MS);
    expect(body).toMatchObject({
      statusCode: 503,
      error: 'DEPENDENCY_UNAVAILABLE',
      dependency: 'Redis',
    });
    expect(res.headers.get('retry-after')).toBeTruthy();
    expectMatchesSpec(method, path, 503, body, res.headers);
  }
  // The merge's uploaded input was stored under the temporary prefix before
  // the queue refused the job: it was removed.
  expect(await harness.objectKeys('redisdown/.tmp/')).toEqual([]);

  // Uploads and downloads need no queue.
  const bytes = fixture('xmp-BlueSquare.jpg');
  const stored = await org.uploadRecord(bytes, 'during.jpg', { via: api.url! });
  expect(stored.checksum).toBe(sha256(bytes));
  const download = await fetch(
    `${api.url!}/media/download?media=${encodeURIComponent(stored.key)}`,
    { headers: org.auth },
  );
  expect(download.status).toBe(200);
  expect(Buffer.from(await download.arrayBuffer()).equals(bytes)).toBe(true);

  // Readiness names Redis, and only Redis.
  const down = await readyz();
  expect(down.status).toBe(503);
  expect(down.body.checks.redis!.ok).toBe(false);
  expect(down.body.checks.mongodb!.ok).toBe(true);
  expect(down.body.checks.storage!.ok).toBe(true);

  // Redis comes back: nothing is restarted.
  await proxy.restore();
  await images.resume();
  const apiPid = api.child.pid;
  const workerPid = worker.child.pid;
  await eventually(async () => expect((await readyz()).status).toBe(200));

  const metadata = await eventually(async () => {
    const r = await timed(`/media/metadata?mediaKey=${encodeURIComponent(image.key)}`);
    expect(r.res.status).toBe(200);
    return r;
  });
  expect(metadata.body).toMatchObject({ statusCode: 200, data: { format: 'jpeg', width: 100 } });
  const converted = await timed('/media/convert', json({ mediaKey: image.key, format: 'webp' }));
  expect(converted.res.status).toBe(201);
  expect(converted.body).toMatchObject({ data: { mimetype: 'image/webp' } });
  const merged = await timed('/media/merge-pdfs', {
    method: 'POST',
    body: form([
      ['mediaKeys', pdf.key],
      ['files', fixture('pdflatex-4-pages.pdf'), 'four.pdf'],
    ]),
  });
  expect(merged.res.status).toBe(201);

  // The job that was waiting when Redis went away was kept: the worker did it
  // once the queue answered again, and its status URL has the result.
  const later = await eventually(async () => {
    const r = await timed(`/media/jobs/${encodeURIComponent(inFlightJobId)}`);
    expect(r.res.status).toBe(200);
    return r;
  });
  expect(later.body).toMatchObject({ data: { mimetype: 'image/png' } });

  expect([api.child.pid, worker.child.pid]).toEqual([apiPid, workerPid]);
  expect(api.child.exitCode).toBeNull();
  expect(worker.child.exitCode).toBeNull();
  // The merges' uploaded inputs are removed once each merge is recorded (off the answer's path).
  await eventually(async () => expect(await harness.objectKeys('redisdown/.tmp/')).toEqual([]));
}, 120_000);
