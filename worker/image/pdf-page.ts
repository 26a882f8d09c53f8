/**
 * One page of a PDF as pixels, with PDFium (`@hyzyla/pdfium`: PDFium compiled
 * to WebAssembly, Apache-2.0/BSD-3 inside an MIT wrapper; no system package,
 * no native build). It runs on the PDF rasterizing threads (pdf-pool.ts,
 * pdf-thread.ts), never on the worker's event loop.
 *
 *  - The page is rasterized at the scale its render needs (a page is vector:
 *    it has no pixel size of its own): the asked width, height or box met
 *    as the fit meets it; without a size, at `PDF_DEFAULT_SCALE` pixels per
 *    point (144 dpi). Then sharp resizes and encodes it as any image.
 *  - The bitmap is bounded: the scale is lowered so that the page has at
 *    most `maxPixels` pixels (RENDER_MAX_WIDTH × RENDER_MAX_HEIGHT), whatever
 *    size the page declares.
 *  - Failures are AppErrors: 422 ENCRYPTED_PDF (a password is needed),
 *    400 VALIDATION_FAILED (a page past the last), 422 UNREADABLE_MEDIA
 *    (not a PDF PDFium can read).
 */
import { PDFiumLibrary } from '@hyzyla/pdfium';
import { Errors } from '@shared/errors';
import type { RenderOptions } from '@shared/media/render-options';

/** Pixels per point of a page rendered without a size (2: 144 dpi). */
export const PDF_DEFAULT_SCALE = 2;

/** What a page render is asked for. */
export interface PdfPageRequest {
  /** 1-based. */
  page: number;
  target: Pick<RenderOptions, 'width' | 'height' | 'fit'>;
  /** Most pixels of the page's bitmap. */
  maxPixels: number;
}

/** The page's RGBA pixels, and the document's page count. */
export interface PdfPagePixels {
  rgba: Uint8Array;
  width: number;
  height: number;
  pages: number;
}

/**
 * The scale (pixels per point) that meets `target` for a page of `w` × `h`
 * points, lowered to keep the bitmap within `maxPixels`.
 */
export function pageScale(
  w: number,
  h: number,
  target: PdfPageRequest['target'],
  maxPixels: number,
): number {
  const { width: tw, height: th } = target;
  let scale: number;
  if (tw === null && th === null) scale = PDF_DEFAULT_SCALE;
  else if (th === null) scale = tw! / w;
  else if (tw === null) scale = th / h;
  else if (target.fit === 'inside' || target.fit === 'contain') scale = Math.min(tw / w, th / h);
  else scale = Math.max(tw / w, th / h);
  const bound = Math.sqrt(maxPixels / (w * h));
  return Math.min(scale, bound);
}

let library: Promise<PDFiumLibrary> | undefined;

/** The library of this thread (loaded on the first page: about 0.1 s). */
function pdfium(): Promise<PDFiumLibrary> {
  library ??= PDFiumLibrary.init();
  return library;
}

/** Bytes of the library's WebAssembly memory (it never shrinks). */
export async function pdfiumHeapBytes(): Promise<number> {
  if (!library) return 0;
  const lib = (await library) as unknown as { module?: { HEAPU8?: Uint8Array } };
  return lib.module?.HEAPU8?.length ?? 0;
}

/** Renders one page (see the file's header). */
export async function renderPdfPage(
  input: Uint8Array,
  request: PdfPageRequest,
): Promise<PdfPagePixels> {
  const lib = await pdfium();
  let doc: Awaited<ReturnType<PDFiumLibrary['loadDocument']>>;
  try {
    doc = await lib.loadDocument(input);
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    if (/password|security/i.test(message)) {
      throw Errors.encryptedPdf(
        'The PDF is encrypted or password-protected: its pages cannot be rendered',
        [{ field: 'media', message: 'encrypted' }],
      );
    }
    throw Errors.unreadable(`The PDF cannot be read: ${message}`, [{ message }]);
  }
  try {
    const pages = doc.getPageCount();
    if (pages < 1) throw Errors.unreadable('The PDF has no pages', [{ message: 'no pages' }]);
    if (request.page > pages) {
      throw Errors.validation([
        {
          field: 'page',
          message: `page ${request.page} is past the last page of this PDF (${pages} page${pages === 1 ? '' : 's'})`,
        },
      ]);
    }
    const page = doc.getPage(request.page - 1);
    const { originalWidth: w, originalHeight: h } = page.getOriginalSize();
    if (!(w > 0 && h > 0) || !Number.isFinite(w * h)) {
      throw Errors.unreadable('The PDF page has no size', [{ field: 'page', message: 'no size' }]);
    }
    const scale = pageScale(w, h, request.target, request.maxPixels);
    const width = Math.max(1, Math.round(w * scale));
    const height = Math.max(1, Math.round(h * scale));
    const out = await page.render({ width, height, render: 'bitmap', colorSpace: 'BGRA' });
    return { rgba: out.data, width: out.width, height: out.height, pages };
  } finally {
    doc.destroy();
  }
}
