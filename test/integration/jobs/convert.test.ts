/**
 * POST /media/convert through the API, the queue and a worker, for every
 * readable corpus image: the output decodes, has the target format and the
 * oriented dimensions. (Every image to every format is covered at the adapter
 * level in test/unit/image-adapter.test.ts; here each image goes through the
 * whole path once, to a format that rotates through the list, and the phone
 * formats go to each web format.)
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { CORPUS, corpusFile, form } from '../../support/files';
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

async function upload(bytes: Buffer, name: string): Promise<Media> {
  const res = await fetch(`${api.url}/media/upload`, {
    method: 'POST',
    headers: org.auth,
    body: form([['file', bytes, name]]),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as Body<Media>).data;
}

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
  it.each(cases)(
    'converts %s to %s, oriented',
    async (file, format) => {
      const bytes = corpusFile(`images/${file}`);
      const source = await upload(bytes, file);
      const { status, body } = await convert(source.key, format);
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
      const source = await upload(corpusFile('images/heic-IMG_5195.HEIC'), 'IMG_5195.HEIC');
      const { status, body } = await convert(source.key, format);
      expect(status).toBe(201);
      const meta = await sharp(await download(body.data.key)).metadata();
      expect(meta.format).toBe(format);
      expect(meta.width * meta.height).toBeGreaterThan(8_000_000);
    },
    60_000,
  );

  it('answers 422 for corrupted.jpg, 400 for an unknown format or quality', async () => {
    const broken = await upload(corpusFile('images/corrupted.jpg'), 'corrupted.jpg');
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
