/**
 * End to end with the real API process, whose object storage sits behind a
 * TCP proxy the test cuts and restores. (The in-process variants, 503 and no
 * record, and MongoDB failing after the object was written, are in
 * test/integration/api/partial-failures.test.ts.) Here: an upload streaming
 * when storage goes and new uploads answer 503 and record nothing; /readyz
 * names storage; once storage is back, uploads and downloads work again
 * without a restart; the multipart upload the outage left open (its abort
 * could not reach storage either) is found and removed by `reconcile`.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { s3Endpoint } from '../support/context';
import { fixture, form } from '../support/files';
import { expectMatchesSpec } from '../support/openapi';
import { startApiProcess, type ServiceProcess } from '../support/processes';
import { hostPortOf, startTcpProxy, type TcpProxy } from '../support/tcp-proxy';
import { eventually as pollUntil } from '../support/eventually';

const MB = 1024 * 1024;
const run = promisify(execFile);
const root = join(__dirname, '..', '..');

let harness: TestApi; // in-process, with direct storage: sets up and looks behind the API
let org: TestOrg;
let proxy: TcpProxy;
let api: ServiceProcess;

const eventually = <T>(check: () => Promise<T>, timeoutMs = 20_000) => pollUntil(check, timeoutMs);

async function upload(bytes: Buffer, name: string) {
  const started = performance.now();
  const res = await fetch(`${api.url!}/media/upload`, {
    method: 'POST',
    headers: org.auth,
    body: form([['file', bytes, name]]),
    signal: AbortSignal.timeout(30_000),
  });
  const body = (await res.json()) as { data: { key: string }; error?: string };
  return { res, body, ms: performance.now() - started };
}

/** An upload of `total` bytes whose first `first` bytes go at once, the rest when `release()` is called. */
function heldUpload(total: number, first: number) {
  const boundary = `----test${randomBytes(8).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="cut.jpg"\r\nContent-Type: image/jpeg\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const bytes = Buffer.concat([fixture('Canon_40D.jpg'), randomBytes(total)]).subarray(0, total);
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const chunks = async function* () {
    yield head;
    yield bytes.subarray(0, first);
    await held;
    for (let at = first; at < total; at += MB) yield bytes.subarray(at, Math.min(total, at + MB));
    yield tail;
  };
  const iterator = chunks();
  const response = fetch(`${api.url!}/media/upload`, {
    method: 'POST',
    headers: {
      ...org.auth,
      'Content-Type': `multipart/form-data; boundary=${boundary}`,
      'Content-Length': String(head.length + total + tail.length),
    },
    body: new ReadableStream<Uint8Array>({
      async pull(controller) {
        const next = await iterator.next();
        if (next.done) controller.close();
        else controller.enqueue(next.value);
      },
    }),
    duplex: 'half',
  });
  response.catch(() => undefined);
  return { response, release };
}

beforeAll(async () => {
  // S3_SINGLE_PUT_MAX=0: an upload past one part is a multipart upload at once (one is held
  // open while storage goes away).
  harness = await startApi('e2es3down', { env: { S3_SINGLE_PUT_MAX: '0' } });
  org = await harness.createOrg('s3down');
  const endpoint = s3Endpoint().endpoint;
  const { host, port } = hostPortOf(endpoint);
  proxy = await startTcpProxy(host, port);
  api = await startApiProcess({ ...harness.env.env, S3_ENDPOINT: proxy.via(endpoint) });
}, 120_000);

afterAll(async () => {
  await proxy.restore();
  await api?.kill('SIGTERM');
  await proxy.close();
  await harness.close();
}, 60_000);

it('storage going away: uploads answer 503 and record nothing; back, they work without a restart', async () => {
  const before = fixture('Canon_40D.jpg');
  const kept = await upload(before, 'before.jpg');
  expect(kept.res.status).toBe(201);
  const pid = api.child.pid;

  // An upload streaming (a multipart upload open in the bucket) when storage goes.
  const inFlight = heldUpload(20 * MB, 10 * MB);
  await eventually(async () =>
    expect(await harness.ctx.store.listIncompleteUploads('s3down/')).toHaveLength(1),
  );
  // Its multipart upload was started by now (reconcile below needs it a second old).
  const multipartSeenAt = Date.now();
  await proxy.cut();
  inFlight.release();
  const cut = await inFlight.response;
  expect(cut.status).toBe(503);
  expect(await cut.json()).toMatchObject({
    error: 'DEPENDENCY_UNAVAILABLE',
    dependency: 'storage',
  });

  // New uploads: 503 in the documented envelope, quickly.
  for (const name of ['during.jpg', 'again.jpg']) {
    const { res, body, ms } = await upload(fixture('xmp-BlueSquare.jpg'), name);
    expect(res.status).toBe(503);
    expect(ms).toBeLessThan(5_000);
    expect(body).toMatchObject({ error: 'DEPENDENCY_UNAVAILABLE', dependency: 'storage' });
    expect(res.headers.get('retry-after')).toBeTruthy();
    expectMatchesSpec('POST', '/media/upload', 503, body, res.headers);
  }
  const ready = await fetch(`${api.url!}/readyz`);
  expect(ready.status).toBe(503);
  expect(
    ((await ready.json()) as { checks: Record<string, { ok: boolean }> }).checks.storage!.ok,
  ).toBe(false);
  // Nothing was recorded but the upload made before.
  const records = await harness.ctx.models.Media.find({ organizationId: org.organization.id })
    .lean()
    .exec();
  expect(records.map((r) => r.key)).toEqual([kept.body.data.key]);

  // Storage comes back: the same process takes uploads again.
  await proxy.restore();
  await eventually(async () => expect((await fetch(`${api.url!}/readyz`)).status).toBe(200));
  const after = fixture('xmp-BlueSquare.jpg');
  const stored = await upload(after, 'after.jpg');
  expect(stored.res.status).toBe(201);
  const download = await fetch(
    `${api.url!}/media/download?media=${encodeURIComponent(stored.body.data.key)}`,
    { headers: org.auth },
  );
  expect(download.status).toBe(200);
  expect(Buffer.from(await download.arrayBuffer()).equals(after)).toBe(true);
  expect(api.child.pid).toBe(pid);
  expect(api.child.exitCode).toBeNull();

  // The cut-off upload could not be aborted while storage was away: its open
  // multipart upload is what `reconcile` is for.
  expect(await harness.ctx.store.listIncompleteUploads('s3down/')).toHaveLength(1);
  // Storage times have one-second granularity: a second and a margin after the multipart
  // upload began (what the steps since took counts toward it).
  await sleep(Math.max(0, multipartSeenAt + 1_100 - Date.now()));
  const { stdout } = await run(
    'npm',
    ['run', '--silent', 'cli', '--', 'reconcile', '--org', 's3down', '--older-than', '0', '--fix'],
    { cwd: root, env: { ...process.env, ...harness.env.env, LOG_LEVEL: 'warn' } },
  );
  const report = JSON.parse(stdout) as {
    incompleteUploads: { key: string }[];
    objectsWithoutRecord: unknown[];
    recordsWithoutObject: unknown[];
  };
  expect(report.incompleteUploads).toHaveLength(1);
  expect(report.objectsWithoutRecord).toEqual([]);
  expect(report.recordsWithoutObject).toEqual([]);
  expect(await harness.ctx.store.listIncompleteUploads('s3down/')).toEqual([]);
  expect((await harness.objectKeys('s3down/')).sort()).toEqual(
    [kept.body.data.key, stored.body.data.key].sort(),
  );
}, 90_000);
