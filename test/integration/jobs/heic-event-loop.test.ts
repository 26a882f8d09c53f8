/**
 * Issue 15, point 4: a HEIC is decoded off the worker's event loop. libheif-js
 * decodes in WebAssembly at about 0.1 s per megapixel; on the event loop that
 * held up lock renewals, the other job and /readyz for the whole decode. Here
 * API, worker and test share one event loop (the worker runs in the test
 * process), so any block would show in the loop's delay and in /readyz.
 *
 * The target (under 50 ms) is measured by `npm run bench -- heic` side by side
 * with a decode on the event loop (docs/hardening.md); this test's bound is
 * looser for shared CI machines (a third of the conversion's time), and still
 * well below what a decode on the event loop costs (most of the conversion).
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import sharp from 'sharp';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { corpusFile, form } from '../../support/files';
import { startWorker, type TestWorker } from '../../support/worker';

type Media = { key: string; bytes: number };

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('heic-loop');
  worker = await startWorker(api.env.env);
  org = await api.createOrg('heic');
});
afterAll(async () => {
  await worker.close();
  await api.close();
});

async function upload(bytes: Buffer, name: string): Promise<Media> {
  const res = await fetch(`${api.url}/media/upload`, {
    method: 'POST',
    headers: org.auth,
    body: form([['file', bytes, name]]),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { data: Media }).data;
}

it('converts an 8.5 MP HEIC while the event loop and /readyz keep answering', async () => {
  const heic = corpusFile('images/heic-IMG_5195.HEIC'); // 2,566 × 3,313
  const source = await upload(heic, 'IMG_5195.HEIC');
  const { width, height } = await sharp(heic).metadata();

  // /readyz asked every 25 ms while the job runs: the slowest answer is kept.
  let slowestReadyz = 0;
  let readyzAnswers = 0;
  let converting = true;
  const probe = (async () => {
    while (converting) {
      const started = performance.now();
      const res = await fetch(`${worker.opsUrl}/readyz`);
      await res.arrayBuffer();
      expect(res.status).toBe(200);
      slowestReadyz = Math.max(slowestReadyz, performance.now() - started);
      readyzAnswers++;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  })();

  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  const started = performance.now();
  const res = await fetch(`${api.url}/media/convert`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ mediaKey: source.key, format: 'jpeg' }),
  });
  const ms = performance.now() - started;
  delay.disable();
  converting = false;
  await probe;

  const body = (await res.json()) as { data: Media };
  expect(res.status).toBe(201);
  const out = await fetch(`${api.url}/media/download?media=${body.data.key}`, {
    headers: org.auth,
  });
  const meta = await sharp(Buffer.from(await out.arrayBuffer())).metadata();
  expect([meta.format, meta.width, meta.height]).toEqual(['jpeg', width, height]);

  const maxDelayMs = delay.max / 1e6;
  process.stdout.write(
    `HEIC ${width} × ${height} converted in ${Math.round(ms)} ms; event loop max delay ` +
      `${maxDelayMs.toFixed(1)} ms; ${readyzAnswers} /readyz answers, slowest ` +
      `${slowestReadyz.toFixed(1)} ms\n`,
  );
  expect(ms).toBeGreaterThan(300); // the decode is real work, long enough to see a block
  expect(readyzAnswers).toBeGreaterThanOrEqual(5);
  // On the event loop, the decode held it for most of the conversion (629 of 830 ms
  // here); on a thread, what is left is the jest process's own pauses (its garbage
  // collections after many test files: up to ~180 ms seen in a full run).
  expect(maxDelayMs).toBeLessThan(ms / 3);
  expect(slowestReadyz).toBeLessThan(ms / 3);
});
