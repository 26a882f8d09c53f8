/**
 * GET /media/render of PDF pages through the API, the queue and one worker
 * (PDFium on its threads): pages 1 and 2 of a 4-page PDF to 400 px WebP and
 * PNG, dimensions read back by decoding the answer; a page past the last
 * 400; an encrypted PDF (made with qpdf) 422 ENCRYPTED_PDF; another
 * organization's PDF 404; a signed URL of a page; the second request served
 * from the stored variant (no second job); the record's `pages` and the
 * corpus's damaged PDFs refused (422) or rendered, never a 5xx.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { CORPUS, corpusFile } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { bombBehindDamage } from '../../support/pdf-bombs';
import { startWorker, type TestWorker } from '../../support/worker';

type Body = { error?: string; details?: { field?: string; message: string }[] };

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;
let book: string;

beforeAll(async () => {
  api = await startApi('pdfrender', {
    env: { URL_SIGNING_KEYS: 'pdf-render-test-signing-key-0123456789abcdef' },
  });
  worker = await startWorker(api.env.env);
  org = await api.createOrg('pdfr');
  book = await org.upload(corpusFile('pdfs/pdflatex-4-pages.pdf'), 'book.pdf');
}, 60_000);
afterAll(async () => {
  await worker.close();
  await api.close();
});

async function get(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, { headers });
  const bytes = Buffer.from(await res.arrayBuffer());
  const body = res.headers.get('content-type')?.startsWith('application/json')
    ? (JSON.parse(bytes.toString()) as Body)
    : undefined;
  return { res, bytes, body };
}

async function render(key: string, options: Record<string, string | number>, who = org) {
  const query = new URLSearchParams({ media: key });
  for (const [k, v] of Object.entries(options)) query.set(k, String(v));
  const answer = await get(`${api.url}/media/render?${query.toString()}`, who.auth);
  expectMatchesSpec('GET', '/media/render', answer.res.status, answer.body, answer.res.headers);
  return answer;
}

async function renderJobs(sourceKey: string) {
  const jobs = await api.ctx.queue
    .queue('image')
    .getJobs(['completed', 'failed', 'active', 'waiting', 'delayed', 'prioritized']);
  return jobs.filter(
    (j) => j?.name === 'image.render' && (j.data as { key: string }).key === sourceKey,
  );
}

describe('GET /media/render of a PDF page', () => {
  it('renders pages 1 and 2 to 400 px WebP and PNG, and records the page count', async () => {
    const p1 = await render(book, { w: 400, format: 'webp' });
    expect(p1.res.status).toBe(200);
    expect(p1.res.headers.get('content-type')).toBe('image/webp');
    const m1 = await sharp(p1.bytes).metadata();
    // An A4 page (595.28 × 841.89 pt) 400 px wide.
    expect([m1.format, m1.width, m1.height]).toEqual(['webp', 400, 566]);

    const p2 = await render(book, { w: 400, format: 'png', page: 2 });
    expect(p2.res.status).toBe(200);
    const m2 = await sharp(p2.bytes).metadata();
    expect([m2.format, m2.width, m2.height]).toEqual(['png', 400, 566]);

    // Page 2 is not page 1: compare the pixels of both at the same format.
    const p2webp = await render(book, { w: 400, format: 'webp', page: 2 });
    const [a, b] = await Promise.all(
      [p1.bytes, p2webp.bytes].map((x) => sharp(x).raw().toBuffer()),
    );
    expect(a!.equals(b!)).toBe(false);
    // Mostly white paper with dark text.
    const stats = await sharp(p1.bytes).stats();
    expect(stats.channels[0]!.mean).toBeGreaterThan(200);
    expect(stats.channels[0]!.min).toBeLessThan(80);

    // A box: cover crops the page to it.
    const box = await render(book, { w: 300, h: 300, fit: 'cover', format: 'jpeg', page: 3 });
    const mb = await sharp(box.bytes).metadata();
    expect([box.res.status, mb.format, mb.width, mb.height]).toEqual([200, 'jpeg', 300, 300]);

    // The record carries the page count (an extra field).
    await eventually(async () => {
      const rec = await get(`${api.url}/media/record?media=${book}`, org.auth);
      expectMatchesSpec('GET', '/media/record', rec.res.status, rec.body, rec.res.headers);
      expect((rec.body as { data?: { pages?: number } } | undefined)?.data?.pages).toBe(4);
    });
  });

  it('serves the second request from the stored variant (one job), page 1 by default', async () => {
    const first = await render(book, { w: 120, format: 'webp' });
    expect(first.res.status).toBe(200);
    const jobs = (await renderJobs(book)).length;
    // No page is page 1: the same variant.
    const second = await render(book, { w: 120, format: 'webp', page: 1 });
    expect(second.res.status).toBe(200);
    expect(second.bytes.equals(first.bytes)).toBe(true);
    expect(second.res.headers.get('etag')).toBe(first.res.headers.get('etag'));
    expect(await renderJobs(book)).toHaveLength(jobs);
  });

  it('refuses a page past the last (400) and a page of an image (400), with nothing stored', async () => {
    const past = await render(book, { w: 400, format: 'webp', page: 5 });
    expect([past.res.status, past.body?.error]).toEqual([400, 'VALIDATION_FAILED']);
    expect(past.body?.details?.[0]).toMatchObject({ field: 'page' });
    expect(past.body?.details?.[0]?.message).toContain('4 pages');
    const zero = await render(book, { page: 0 });
    expect([zero.res.status, zero.body?.error]).toEqual([400, 'VALIDATION_FAILED']);
    const image = await org.upload('Canon_40D.jpg', 'photo.jpg');
    const onImage = await render(image, { w: 40, page: 2 });
    expect([onImage.res.status, onImage.body?.details?.[0]?.field]).toEqual([400, 'page']);
  });

  it('refuses an encrypted PDF with 422 ENCRYPTED_PDF', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pdf-render-'));
    try {
      const out = join(dir, 'locked.pdf');
      execFileSync('qpdf', [
        '--encrypt',
        'user-secret',
        'owner-secret',
        '256',
        '--',
        join(CORPUS, 'pdfs/minimal-document.pdf'),
        out,
      ]);
      const locked = await org.upload(readFileSync(out), 'locked.pdf');
      const answer = await render(locked, { w: 200, format: 'png' });
      expect([answer.res.status, answer.body?.error]).toEqual([422, 'ENCRYPTED_PDF']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('answers 404 for another organization’s PDF', async () => {
    const other = await api.createOrg('pdfr-other');
    const answer = await render(book, { w: 100 }, other);
    expect([answer.res.status, answer.body?.error]).toEqual([404, 'MEDIA_NOT_FOUND']);
  });

  it('renders a page through a signed URL, without a token', async () => {
    const signed = await fetch(`${api.url}/media/sign`, {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKey: book, render: { w: 200, format: 'png', page: 4 } }),
    });
    const body = (await signed.json()) as { data: { url: string } };
    expect(signed.status).toBe(200);
    expect(new URL(body.data.url).searchParams.get('page')).toBe('4');
    // Signed for PUBLIC_BASE_URL: sent to this API.
    const signedUrl = new URL(body.data.url);
    const answer = await get(`${api.url}${signedUrl.pathname}${signedUrl.search}`);
    expect(answer.res.status).toBe(200);
    expect(answer.res.headers.get('cache-control')).toMatch(/^public, /);
    const meta = await sharp(answer.bytes).metadata();
    expect([meta.format, meta.width, meta.height]).toEqual(['png', 200, 283]);
  });

  it('renders every corpus PDF or refuses it as the corpus README says, never a 5xx', async () => {
    // Refused: encrypted (422 ENCRYPTED_PDF) and cut short (unrecoverable, as
    // the corpus README says). The damaged cross-reference table PDFium does
    // not rebuild is repaired by qpdf first ("qpdf recovers it") and rendered.
    const refused: Record<string, string> = {
      'libreoffice-writer-password.pdf': 'ENCRYPTED_PDF',
      'truncated-pdflatex-4-pages.pdf': 'UNREADABLE_MEDIA',
    };
    const files = readdirSync(join(CORPUS, 'pdfs')).filter((f) => f.endsWith('.pdf'));
    expect(files.length).toBeGreaterThanOrEqual(13);
    for (const file of files) {
      const key = await org.upload(corpusFile(`pdfs/${file}`), file);
      const answer = await render(key, { w: 160, format: 'webp' });
      if (refused[file]) {
        expect([file, answer.res.status, answer.body?.error]).toEqual([file, 422, refused[file]]);
      } else {
        expect([file, answer.res.status]).toEqual([file, 200]);
        const meta = await sharp(answer.bytes).metadata();
        // 160 px wide, as tall as the page's proportions (portrait, or a rotated landscape page).
        expect([file, meta.format, meta.width]).toEqual([file, 'webp', 160]);
        expect(meta.height).toBeGreaterThan(100);
      }
    }
    // A decompression bomb behind damage (an object stream inflating to 256 MB).
    const bomb = await org.upload(bombBehindDamage(256 * 1024 * 1024), 'bomb.pdf');
    const started = Date.now();
    const answer = await render(bomb, { w: 160, format: 'webp' });
    expect([200, 422]).toContain(answer.res.status);
    expect(Date.now() - started).toBeLessThan(10_000);
  });
});

describe('GET /media/metadata of a PDF', () => {
  async function metadata(key: string) {
    const res = await fetch(`${api.url}/media/metadata?mediaKey=${encodeURIComponent(key)}`, {
      headers: org.auth,
    });
    const text = await res.text();
    expectMatchesSpec('GET', '/media/metadata', res.status, text, res.headers);
    return { status: res.status, body: JSON.parse(text) as { data: Record<string, unknown> } };
  }

  it('answers an image’s fields (page 1 at 72 dpi), pages, page sizes, producer and version, and keeps pages on the record', async () => {
    const rotated = await org.upload(corpusFile('pdfs/habibi-rotated.pdf'), 'rotated.pdf');
    const { status, body } = await metadata(book);
    expect(status).toBe(200);
    expect(body.data).toMatchObject({
      format: 'pdf',
      width: 595,
      height: 842,
      density: 72,
      pdfVersion: '1.5',
      encrypted: false,
      pages: 4,
      producer: 'pdfTeX-1.40.23',
      creator: 'TeX',
    });
    expect(body.data).not.toHaveProperty('title');
    expect(body.data.pageSizes).toEqual(Array(4).fill({ width: 595.28, height: 841.89 }));
    // A rotated page's size is as displayed.
    const turned = await metadata(rotated);
    expect(turned.body.data).toMatchObject({ width: 842, height: 595 });
    expect((turned.body.data.pageSizes as unknown[])[0]).toEqual({ width: 841.89, height: 595.28 });
    await eventually(async () => {
      const rec = await get(`${api.url}/media/record?media=${rotated}`, org.auth);
      expect((rec.body as { data?: { pages?: number } } | undefined)?.data?.pages).toBe(4);
    });
  });

  it('refuses a PDF that needs a password (422 ENCRYPTED_PDF) and a truncated one (422)', async () => {
    const locked = await org.upload(
      corpusFile('pdfs/libreoffice-writer-password.pdf'),
      'password.pdf',
    );
    const refused = await metadata(locked);
    expect([refused.status, (refused.body as { error?: string }).error]).toEqual([
      422,
      'ENCRYPTED_PDF',
    ]);
    const cut = await org.upload(corpusFile('pdfs/truncated-pdflatex-4-pages.pdf'), 'cut.pdf');
    expect((await metadata(cut)).status).toBe(422);
  });
});
