/**
 * Image placeholders, through the real API, worker, Redis, S3 and MongoDB:
 * a new image record gets its `thumbhash` after the upload's answer (the
 * listener on `media.created`), shown by `GET /media/record` and `GET
 * /media`; it decodes (the `thumbhash` package) to the image's aspect ratio;
 * a PDF gets none; the operator's `thumbhash:backfill` fills a record
 * without one.
 */
import sharp from 'sharp';
import { thumbHashToRGBA } from 'thumbhash';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { runCli } from '../../support/cli';
import { eventually } from '../../support/eventually';
import { fixture, form } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Json = Record<string, unknown>;

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('thumbhash');
  worker = await startWorker(api.env.env);
  org = await api.createOrg();
});
afterAll(async () => {
  await worker.close();
  await api.close();
});

/** A PNG of `width` × `height`: a gradient, so that the hash has something to say. */
async function png(width: number, height: number): Promise<Buffer> {
  const raw = Buffer.alloc(width * height * 3);
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++)
      raw.set([(x * 255) / width, (y * 255) / height, 128], (y * width + x) * 3);
  return sharp(raw, { raw: { width, height, channels: 3 } })
    .png()
    .toBuffer();
}

async function upload(bytes: Buffer, name: string): Promise<{ id: number; key: string }> {
  const res = await fetch(`${api.url}/media/upload`, {
    method: 'POST',
    headers: org.auth,
    body: form([['file', bytes, name]]),
  });
  expect(res.status).toBe(201);
  const body = (await res.json()) as { data: { id: number; key: string } & Json };
  // The upload's answer does not wait for the placeholder.
  expect(body.data.thumbhash).toBeUndefined();
  return body.data;
}

async function recordOf(key: string): Promise<Json> {
  const res = await fetch(`${api.url}/media/record?media=${key}`, { headers: org.auth });
  const body = (await res.json()) as { data: Json };
  expect(res.status).toBe(200);
  expectMatchesSpec('GET', '/media/record', res.status, body, res.headers);
  return body.data;
}

/** The record's placeholder once the worker has set it (bounded wait). */
const thumbhashOf = (key: string) =>
  eventually(async () => {
    const { thumbhash } = await recordOf(key);
    expect(typeof thumbhash).toBe('string');
    return thumbhash as string;
  });

const aspectOf = (hash: string) => {
  const { w, h } = thumbHashToRGBA(Buffer.from(hash, 'base64'));
  return w / h;
};

it('a new image gets a thumbhash that decodes to its aspect ratio; a PDF gets none', async () => {
  const pdf = await upload(fixture('minimal-document.pdf'), 'doc.pdf');
  const wide = await upload(await png(300, 100), 'wide.png');
  const tall = await upload(await png(60, 180), 'tall.png');
  const photo = await upload(fixture('Canon_40D.jpg'), 'photo.jpg');

  const [wideHash, tallHash, photoHash] = await Promise.all(
    [wide, tall, photo].map((m) => thumbhashOf(m.key)),
  );
  expect(Buffer.from(wideHash!, 'base64').length).toBeLessThan(40);
  // ThumbHash keeps the aspect ratio to within its few bits (3:1 decodes to 32 × 9).
  const near = (hash: string, ratio: number) =>
    expect(Math.abs(Math.log(aspectOf(hash) / ratio))).toBeLessThan(0.2);
  near(wideHash!, 3);
  near(tallHash!, 1 / 3);
  const meta = await sharp(fixture('Canon_40D.jpg')).metadata();
  near(photoHash!, meta.width / meta.height);

  // Lists show it too.
  const list = await fetch(`${api.url}/media?limit=10`, { headers: org.auth });
  const listed = (await list.json()) as { data: { items?: Json[]; media?: Json[] } & Json };
  expectMatchesSpec('GET', '/media', list.status, listed, list.headers);
  const items = JSON.stringify(listed.data);
  expect(items).toContain(wideHash);

  // The PDF's event was dispatched to the listener (before the images' were): no placeholder.
  await eventually(async () => {
    const event = await api.ctx.models.Event.findOne({ _id: `media.created:${pdf.id}` }).lean();
    expect(event?.dispatchedAt).toBeTruthy();
  });
  expect((await recordOf(pdf.key)).thumbhash).toBeUndefined();
});

it('thumbhash:backfill fills an image record without one', async () => {
  const image = await upload(await png(200, 100), 'old.png');
  const hash = await thumbhashOf(image.key);
  // A record from before the listener: no placeholder.
  await api.ctx.models.Media.updateOne({ id: image.id }, { $unset: { thumbhash: 1 } });
  expect((await recordOf(image.key)).thumbhash).toBeUndefined();

  const run = await runCli(api.env.env, 'thumbhash:backfill', '--org', org.organization.slug);
  expect(run).toMatchObject({ code: 0 });
  expect(JSON.parse(run.stdout)).toEqual({ filled: 1, failed: [] });
  expect((await recordOf(image.key)).thumbhash).toBe(hash);

  // Nothing left to do: a second run fills nothing.
  const again = await runCli(api.env.env, 'thumbhash:backfill', '--org', org.organization.slug);
  expect(JSON.parse(again.stdout)).toEqual({ filled: 0, failed: [] });
});
