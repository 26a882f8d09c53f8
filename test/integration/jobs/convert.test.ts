/**
 * POST /media/convert through the API, the queue and a worker, for every
 * readable corpus image: the output decodes, has the target format and the
 * oriented dimensions. (Every image to every format is covered at the adapter
 * level in test/unit/image-adapter.test.ts; here each image goes through the
 * whole path once, to a format that rotates through the list, and the phone
 * formats go to each web format.) A GIF or AVIF over its pixel bound is
 * refused (422 OUTPUT_TOO_LARGE): the 8.5 MP phone HEIC's turn is GIF.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import sharp from 'sharp';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { CORPUS, corpusFile, sha256 } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Media = { key: string; name: string; mimetype: string; bytes: number };
type Body<T> = { data: T; error?: string };

const FORMATS = ['jpeg', 'png', 'webp', 'avif', 'tiff', 'gif'] as const;
const UNREADABLE = new Set(['corrupted.jpg']);
const images = readdirSync(join(CORPUS, 'images')).filter((f) => !UNREADABLE.has(f));

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('convert');
  worker = await startWorker(api.env.env);
  org = await api.createOrg('conv');
});
afterAll(async () => {
  await worker.close();
  await api.close();
});

async function convert(key: string, format: string) {
  const res = await fetch(`${api.url}/media/convert`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ mediaKey: key, format }),
  });
  const body = (await res.json()) as Body<Media>;
  expectMatchesSpec('POST', '/media/convert', res.status, body, res.headers);
  return { status: res.status, body };
}

async function download(key: string): Promise<Buffer> {
  const res = await fetch(`${api.url}/media/download?media=${encodeURIComponent(key)}`, {
    headers: org.auth,
  });
  return Buffer.from(await res.arrayBuffer());
}

/** The dimensions the source shows when displayed (EXIF orientation 5-8 swaps them). */
async function orientedSize(bytes: Buffer): Promise<[number, number]> {
  const m = await sharp(bytes).metadata();
  return (m.orientation ?? 1) >= 5 ? [m.height, m.width] : [m.width, m.height];
}

const cases = images.map((file, i) => [file, FORMATS[i % FORMATS.length]!] as const);

describe('POST /media/convert', () => {
  it('records the converted bytes’ SHA-256 as the record’s checksum', async () => {
    const source = await org.uploadRecord(corpusFile('images/Canon_40D.jpg'), 'canon.jpg');
    const { status, body } = await convert(source.key, 'png');
    expect(status).toBe(201);
    const record = await api.ctx.models.Media.findOne({ key: body.data.key }).lean();
    expect(record?.checksum).toBe(sha256(await download(body.data.key)));
  });

  it.each(cases)(
    'converts %s to %s, oriented',
    async (file, format) => {
      const bytes = corpusFile(`images/${file}`);
      const source = await org.uploadRecord(bytes, file);
      const { status, body } = await convert(source.key, format);
      const [width, height] = await orientedSize(bytes);
      const bound = (api.env.config.limits.maxOutputPixels as Record<string, number>)[format];
      if (bound !== undefined && width * height > bound) {
        // A GIF or AVIF over its pixel bound (docs/renders.md, "Slow encoders").
        expect([status, body.error]).toEqual([422, 'OUTPUT_TOO_LARGE']);
        return;
      }
      expect(status).toBe(201);
      expect(body.data.name).toBe(source.name);
      expect(body.data.mimetype).toBe(format === 'avif' ? 'image/avif' : `image/${format}`);
      const out = await download(body.data.key);
      expect(out.length).toBe(body.data.bytes);
      const meta = await sharp(out).metadata();
      expect(meta.format).toBe(format === 'avif' ? 'heif' : format);
      if (!file.startsWith('heic-')) {
        expect([meta.width, meta.height]).toEqual(await orientedSize(bytes));
      } else {
        expect(meta.width).toBeGreaterThan(0);
      }
    },
    60_000,
  );

  it.each(['jpeg', 'png', 'webp'])(
    'decodes the phone HEIC and converts it to %s',
    async (format) => {
      const source = await org.uploadRecord(
        corpusFile('images/heic-IMG_5195.HEIC'),
        'IMG_5195.HEIC',
      );
      const { status, body } = await convert(source.key, format);
      expect(status).toBe(201);
      const meta = await sharp(await download(body.data.key)).metadata();
      expect(meta.format).toBe(format);
      expect(meta.width * meta.height).toBeGreaterThan(8_000_000);
    },
    60_000,
  );

  it('answers 422 for corrupted.jpg, 400 for an unknown format or quality', async () => {
    const broken = await org.uploadRecord(corpusFile('images/corrupted.jpg'), 'corrupted.jpg');
    const r422 = await convert(broken.key, 'png');
    expect([r422.status, r422.body.error]).toEqual([422, 'UNREADABLE_MEDIA']);
    const bad = await convert(broken.key, 'bmp');
    expect([bad.status, bad.body.error]).toEqual([400, 'VALIDATION_FAILED']);
    const res = await fetch(`${api.url}/media/convert`, {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKey: broken.key, format: 'jpg', quality: 101 }),
    });
    expect(res.status).toBe(400);
  });
});

describe('HEIC off the event loop', () => {
  /**
   * A HEIC is decoded off the worker's event loop. libheif-js
   * decodes in WebAssembly at about 0.1 s per megapixel; on the event loop that
   * held up lock renewals, the other job and /readyz for the whole decode. Here
   * API, worker and test share one event loop (the worker runs in the test
   * process), so any block would show in the loop's delay (bounded below) and in
   * /readyz's answers (counted: the probe asks every 25 ms).
   *
   * The target (under 50 ms) is measured by `npm run bench -- --only heic` side by side
   * with a decode on the event loop (docs/hardening/time-limits.md); this test's bound is
   * looser for shared CI machines (half the conversion's time), and still
   * well below what a decode on the event loop costs (most of the conversion).
   */
  it('converts an 8.5 MP HEIC while the event loop and /readyz keep answering', async () => {
    const heic = corpusFile('images/heic-IMG_5195.HEIC'); // 2,566 × 3,313
    const source = await org.uploadRecord(heic, 'IMG_5195.HEIC');
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
    // here, 76%); on a thread, what is left is the jest process's own pauses (its garbage
    // collections after many test files: up to ~180 ms seen in a full run) and, on a
    // loaded machine, scheduling (a /readyz at 0.34 of the conversion seen under load 12).
    // Half the conversion tells the two apart with room on both sides. (The worker runs in
    // this process: this is its event loop. /readyz's own time also waits on Redis, MongoDB
    // and the store, which a loaded machine slows whatever the loop does (816 ms once, with
    // the loop's longest pause at 159 ms): it is printed, and counted, not bounded.)
    expect(maxDelayMs).toBeLessThan(ms / 2);
  });
});
