/**
 * GET /media/metadata through the queue: for every corpus image, the answer
 * equals what sharp reads from the same bytes, field by field, buffers
 * byte-equal; the key may come from the query, a multipart body or a JSON body.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { CORPUS, corpusFile, form } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Body<T> = { statusCode: number; data: T; error?: string };
type Metadata = Record<string, unknown>;

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('metadata');
  worker = await startWorker(api.env.env);
  org = await api.createOrg('meta');
});
afterAll(async () => {
  await worker.close();
  await api.close();
});

async function metadataOf(key: string): Promise<{ status: number; body: Body<Metadata> }> {
  const res = await fetch(`${api.url}/media/metadata?mediaKey=${encodeURIComponent(key)}`, {
    headers: org.auth,
  });
  const body = (await res.json()) as Body<Metadata>;
  expectMatchesSpec('GET', '/media/metadata', res.status, body, res.headers);
  return { status: res.status, body };
}

/** The JSON form of a sharp value (Buffers as { type: 'Buffer', data }). */
const asJson = (v: unknown): unknown => JSON.parse(JSON.stringify(v)) as unknown;

const images = readdirSync(join(CORPUS, 'images')).filter((f) => !f.endsWith('.md'));

describe('GET /media/metadata', () => {
  it.each(images)('reports what sharp reads from %s', async (file) => {
    const bytes = corpusFile(`images/${file}`);
    const key = await org.upload(bytes, file);
    const { status, body } = await metadataOf(key);
    expect(status).toBe(200);
    const expected = (await sharp(bytes).metadata()) as unknown as Record<string, unknown>;
    const got = body.data;
    for (const field of [
      'format',
      'width',
      'height',
      'space',
      'channels',
      'depth',
      'hasAlpha',
      'hasProfile',
    ]) {
      expect({ field, value: got[field] }).toEqual({ field, value: asJson(expected[field]) });
    }
    for (const field of Object.keys(got)) {
      if (field === 'size') {
        expect(got.size).toBe(bytes.length);
        continue;
      }
      expect({ field, value: got[field] }).toEqual({ field, value: asJson(expected[field]) });
    }
    for (const buffer of ['exif', 'iptc', 'xmp'] as const) {
      if (expected[buffer]) {
        expect(got[buffer]).toEqual({ type: 'Buffer', data: [...(expected[buffer] as Buffer)] });
      } else {
        expect(got[buffer]).toBeUndefined();
      }
    }
  });

  it('shows exif where the corpus says so, and orientation', async () => {
    const canon = await metadataOf(await org.upload(corpusFile('images/Canon_40D.jpg'), 'c.jpg'));
    expect(canon.body.data.exif).toMatchObject({ type: 'Buffer' });
    expect(canon.body.data.hasProfile).toBe(true);
    const olympus = await metadataOf(
      await org.upload(corpusFile('images/exif-org-olympus-d320l.jpg'), 'o.jpg'),
    );
    expect(olympus.body.data.exif).toBeUndefined();
    const six = await metadataOf(
      await org.upload(corpusFile('images/orientation-landscape_6.jpg'), 'six.jpg'),
    );
    expect(six.body.data.orientation).toBe(6);
    const xmp = await metadataOf(
      await org.upload(corpusFile('images/xmp-BlueSquare.jpg'), 'x.jpg'),
    );
    expect(xmp.body.data.xmp).toMatchObject({ type: 'Buffer' });
  });

  it('takes mediaKey from a multipart or JSON body too', async () => {
    const key = await org.upload('Canon_40D.jpg', 'body.jpg');
    const multipart = await fetch(`${api.url}/media/metadata`, {
      headers: org.auth,
      body: form([['mediaKey', key]]),
      method: 'GET',
    }).catch(() => undefined);
    // fetch refuses a body on GET; send it with node:http instead.
    expect(multipart).toBeUndefined();
    const { request } = await import('node:http');
    const send = (contentType: string, payload: Buffer) =>
      new Promise<{ status: number; body: Body<Metadata> }>((resolve, reject) => {
        const req = request(`${api.url}/media/metadata`, {
          method: 'GET',
          headers: { ...org.auth, 'Content-Type': contentType, 'Content-Length': payload.length },
        });
        req.on('response', (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve({
              status: res.statusCode!,
              body: JSON.parse(Buffer.concat(chunks).toString()) as Body<Metadata>,
            }),
          );
        });
        req.on('error', reject);
        req.end(payload);
      });
    const boundary = 'XyZ';
    const viaForm = await send(
      `multipart/form-data; boundary=${boundary}`,
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="mediaKey"\r\n\r\n${key}\r\n--${boundary}--\r\n`,
      ),
    );
    expect(viaForm.status).toBe(200);
    expect(viaForm.body.data.width).toBe(100);
    const viaJson = await send('application/json', Buffer.from(JSON.stringify({ mediaKey: key })));
    expect(viaJson.status).toBe(200);
    expect(viaJson.body.data.height).toBe(68);
  });

  it('answers a PDF’s information, 404 for an unknown key, 400 without a key', async () => {
    // PDFs in full: test/integration/jobs/pdf-render.test.ts.
    const pdf = await org.upload('minimal-document.pdf', 'doc.pdf');
    const ofPdf = await metadataOf(pdf);
    expect([ofPdf.status, ofPdf.body.data.format]).toEqual([200, 'pdf']);
    const r404 = await metadataOf('meta/nothing.jpg');
    expect([r404.status, r404.body.error]).toEqual([404, 'MEDIA_NOT_FOUND']);
    const res = await fetch(`${api.url}/media/metadata`, { headers: org.auth });
    expect(res.status).toBe(400);
  });
});
