/**
 * A PDF's page count from its upload, through the real API, worker, Redis,
 * S3 and MongoDB: the upload's answer does not wait for it; within seconds
 * (the `pdf-pages` listener on `media.created`) `GET /media/record` and `GET
 * /media` show `pages`, as PDFium counts them; an image gets none; a PDF the
 * reader refuses (encrypted) gets none and stops nothing: the next PDF is
 * counted.
 */
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { corpusFile, fixture, form } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Json = Record<string, unknown>;

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('pdfpages');
  worker = await startWorker(api.env.env);
  org = await api.createOrg();
});
afterAll(async () => {
  await worker.close();
  await api.close();
});

async function upload(bytes: Buffer, name: string): Promise<{ id: number; key: string }> {
  const res = await fetch(`${api.url}/media/upload`, {
    method: 'POST',
    headers: org.auth,
    body: form([['file', bytes, name]]),
  });
  expect(res.status).toBe(201);
  const body = (await res.json()) as { data: { id: number; key: string } & Json };
  // The upload's answer does not wait for the count.
  expect(body.data.pages).toBeUndefined();
  return body.data;
}

async function recordOf(key: string): Promise<Json> {
  const res = await fetch(`${api.url}/media/record?media=${key}`, { headers: org.auth });
  const body = (await res.json()) as { data: Json };
  expect(res.status).toBe(200);
  expectMatchesSpec('GET', '/media/record', res.status, body, res.headers);
  return body.data;
}

/** The record's page count once the worker has set it (bounded wait). */
const pagesOf = (key: string) =>
  eventually(async () => {
    const { pages } = await recordOf(key);
    expect(typeof pages).toBe('number');
    return pages as number;
  }, 30_000);

it('a new PDF carries its page count within seconds, in the record and the list', async () => {
  const four = await upload(fixture('pdflatex-4-pages.pdf'), 'four.pdf');
  const one = await upload(fixture('minimal-document.pdf'), 'one.pdf');
  expect(await pagesOf(four.key)).toBe(4);
  expect(await pagesOf(one.key)).toBe(1);
  const res = await fetch(`${api.url}/media?type=pdf`, { headers: org.auth });
  const list = (await res.json()) as { data: { media: Json[] } };
  expect(res.status).toBe(200);
  const pages = new Map(list.data.media.map((m) => [m.key, m.pages]));
  expect(pages.get(four.key)).toBe(4);
  expect(pages.get(one.key)).toBe(1);
});

it('an image gets no count; an encrypted PDF gets none and the next PDF is counted', async () => {
  const image = await upload(fixture('Canon_40D.jpg'), 'photo.jpg');
  const locked = await upload(corpusFile('pdfs/libreoffice-writer-password.pdf'), 'locked.pdf');
  const after = await upload(fixture('pdflatex-4-pages.pdf'), 'after.pdf');
  expect(await pagesOf(after.key)).toBe(4);
  // Both were handled by then or soon after; neither ever gets a count.
  await eventually(async () => {
    const jobs = await api.ctx.queue.counts();
    const waiting = Object.values(jobs)
      .flatMap((s) => [s.waiting ?? 0, s.active ?? 0, s.delayed ?? 0, s.prioritized ?? 0])
      .reduce((a, b) => a + b, 0);
    expect(waiting).toBe(0);
  }, 30_000);
  expect((await recordOf(image.key)).pages).toBeUndefined();
  expect((await recordOf(locked.key)).pages).toBeUndefined();
});
