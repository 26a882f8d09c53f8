/**
 * The PDF rasterizing threads (worker/image/pdf-pool.ts, pdf-page.ts): a page
 * rendered off the caller's thread at the scale its size asks for and within
 * the pixel bound, a page past the last and a damaged PDF refused, and a
 * render stopped (its thread ended) when its signal aborts.
 */
import { PdfThreadPool } from '../../worker/image/pdf-pool';
import { pageScale, PDF_DEFAULT_SCALE } from '../../worker/image/pdf-page';
import { fixture } from '../support/files';

const BOOK = fixture('pdflatex-4-pages.pdf'); // 4 A4 pages: 595.28 × 841.89 pt
const A4 = { w: 595.276, h: 841.89 };

let pool: PdfThreadPool;
beforeEach(() => {
  pool = new PdfThreadPool(1);
});
afterEach(() => pool.close());

describe('pageScale', () => {
  const target = (width: number | null, height: number | null, fit = 'cover' as const) => ({
    width,
    height,
    fit,
  });
  it('meets the asked side, the box as the fit meets it, 144 dpi without a size', () => {
    expect(pageScale(A4.w, A4.h, target(400, null), 1e9) * A4.w).toBeCloseTo(400);
    expect(pageScale(A4.w, A4.h, target(null, 300), 1e9) * A4.h).toBeCloseTo(300);
    // cover: the larger ratio; inside: the smaller.
    expect(pageScale(A4.w, A4.h, target(300, 300), 1e9) * A4.w).toBeCloseTo(300);
    expect(pageScale(A4.w, A4.h, { ...target(300, 300), fit: 'inside' }, 1e9) * A4.h).toBeCloseTo(
      300,
    );
    expect(pageScale(A4.w, A4.h, target(null, null), 1e9)).toBe(PDF_DEFAULT_SCALE);
  });
  it('lowers the scale to keep the bitmap within the pixel bound, whatever the page declares', () => {
    // A page declaring 200 × 200 inches asked at 4000 px wide, bounded to 1 MP.
    const s = pageScale(14400, 14400, target(4000, null), 1_000_000);
    expect(14400 * s * 14400 * s).toBeLessThanOrEqual(1_000_000 + 1);
  });
});

it('renders a page at the asked width, and says how many pages there are', async () => {
  const page = await pool.render(BOOK, {
    page: 2,
    target: { width: 400, height: null, fit: 'cover' },
    maxPixels: 4096 * 4096,
  });
  expect([page.width, page.height, page.pages]).toEqual([400, 566, 4]);
  expect(page.rgba.byteLength).toBe(400 * 566 * 4);
  expect(pool.threadCount).toBe(1);
});

it('refuses a page past the last (400) and a damaged PDF (422), the thread kept', async () => {
  const ask = (input: Buffer, page: number) =>
    pool.render(input, { page, target: { width: 50, height: null, fit: 'cover' }, maxPixels: 1e6 });
  await expect(ask(BOOK, 5)).rejects.toMatchObject({ status: 400, code: 'VALIDATION_FAILED' });
  await expect(ask(BOOK.subarray(0, 9000), 1)).rejects.toMatchObject({
    status: 422,
    code: 'UNREADABLE_MEDIA',
  });
  await expect(ask(BOOK, 1)).resolves.toMatchObject({ width: 50 });
});

it('stops a render when its signal aborts, ending the thread; the next render gets a new one', async () => {
  const stop = new AbortController();
  const big = { page: 1, target: { width: 4096, height: null, fit: 'cover' as const } };
  await pool.render(BOOK, { ...big, target: { ...big.target, width: 10 }, maxPixels: 1e6 });
  const work = pool.render(BOOK, { ...big, maxPixels: 4096 * 8192 }, stop.signal);
  setTimeout(() => stop.abort(new Error('time is up')), 20);
  await expect(work).rejects.toThrow('time is up');
  // The thread was ended (the only way to stop PDFium), not left rendering.
  expect(pool.threadCount).toBe(0);
  await expect(
    pool.render(BOOK, {
      page: 1,
      target: { width: 20, height: null, fit: 'cover' },
      maxPixels: 1e6,
    }),
  ).resolves.toMatchObject({ width: 20 });
});
