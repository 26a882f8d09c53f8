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

/**
 * What `GET /media/metadata` answers of a PDF: the fields an image's metadata
 * has, as libvips reports a PDF (page 1 at 72 dpi: its size in points, sRGB,
 * 8 bits), so a client of the image metadata reads it unchanged, plus the
 * PDF's own (page sizes, version, encryption, document information), each
 * present when the PDF has it.
 */
export interface PdfInfo {
  format: 'pdf';
  mediaType: 'application/pdf';
  /** Bytes of the file. */
  size: number;
  /** Page 1, in points (pixels at 72 dpi), as displayed. */
  width: number;
  height: number;
  space: 'srgb';
  channels: 3;
  depth: 'uchar';
  density: 72;
  isProgressive: false;
  hasProfile: false;
  hasAlpha: false;
  pages: number;
  /** Each page's size in points (1/72 in), after its /Rotate; at most `PDF_INFO_MAX_PAGE_SIZES`. */
  pageSizes: { width: number; height: number }[];
  /** A security handler is present (permissions only: one that needs a password is a 422). */
  encrypted: boolean;
  /** From the header (`%PDF-1.7`), or PDFium's reading of it. */
  pdfVersion?: string;
  title?: string;
  author?: string;
  subject?: string;
  keywords?: string;
  creator?: string;
  producer?: string;
  creationDate?: string;
  modDate?: string;
}

/** Page sizes listed at most (a PDF of more pages lists its first ones). */
export const PDF_INFO_MAX_PAGE_SIZES = 10_000;

const INFO_TAGS = [
  ['title', 'Title'],
  ['author', 'Author'],
  ['subject', 'Subject'],
  ['keywords', 'Keywords'],
  ['creator', 'Creator'],
  ['producer', 'Producer'],
  ['creationDate', 'CreationDate'],
  ['modDate', 'ModDate'],
] as const;

/** The functions of PDFium's module read here (exported by the wasm, not typed by the wrapper). */
interface PdfiumModule {
  HEAPU8: Uint8Array;
  wasmExports: { malloc(n: number): number; free(p: number): void };
  _FPDF_GetMetaText(doc: number, tag: number, buffer: number, length: number): number;
  _FPDF_GetFileVersion(doc: number, version: number): number;
  _FPDF_GetSecurityHandlerRevision(doc: number): number;
  _FPDF_GetPageSizeByIndexF(doc: number, index: number, size: number): number;
}

/** The header's version (`%PDF-x.y` within the first 1 KiB), or null. */
function headerVersion(input: Uint8Array): string | null {
  const head = Buffer.from(input.buffer, input.byteOffset, Math.min(1024, input.byteLength));
  return /%PDF-(\d\.\d)/.exec(head.toString('latin1'))?.[1] ?? null;
}

/** Reads a PDF's info (see `PdfInfo`): 422 ENCRYPTED_PDF when it needs a password, 422 UNREADABLE_MEDIA when PDFium cannot read it. */
export async function readPdfInfo(input: Uint8Array): Promise<PdfInfo> {
  const lib = await pdfium();
  let doc: Awaited<ReturnType<PDFiumLibrary['loadDocument']>>;
  try {
    doc = await lib.loadDocument(input);
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    if (/password|security/i.test(message)) {
      throw Errors.encryptedPdf('The PDF is encrypted or password-protected: it cannot be read', [
        { field: 'mediaKey', message: 'encrypted' },
      ]);
    }
    throw Errors.unreadable(`The PDF cannot be read: ${message}`, [{ message }]);
  }
  const m = (lib as unknown as { module: PdfiumModule }).module;
  const handle = (doc as unknown as { documentIdx: number }).documentIdx;
  const scratch = m.wasmExports.malloc(64 * 1024);
  try {
    const view = () => new DataView(m.HEAPU8.buffer);
    let version = headerVersion(input);
    if (version === null && m._FPDF_GetFileVersion(handle, scratch)) {
      const v = view().getInt32(scratch, true);
      if (v >= 10 && v < 100) version = `${Math.floor(v / 10)}.${v % 10}`;
    }
    const pages = doc.getPageCount();
    if (pages < 1) throw Errors.unreadable('The PDF has no pages', [{ message: 'no pages' }]);
    const pageSizes: PdfInfo['pageSizes'] = [];
    const round = (x: number) => Math.round(x * 100) / 100;
    for (let i = 0; i < Math.min(pages, PDF_INFO_MAX_PAGE_SIZES); i++) {
      const ok = m._FPDF_GetPageSizeByIndexF(handle, i, scratch);
      pageSizes.push(
        ok
          ? {
              width: round(view().getFloat32(scratch, true)),
              height: round(view().getFloat32(scratch + 4, true)),
            }
          : { width: 0, height: 0 },
      );
    }
    const first = pageSizes[0]!;
    const info: PdfInfo = {
      format: 'pdf',
      mediaType: 'application/pdf',
      size: input.byteLength,
      width: Math.max(1, Math.round(first.width)),
      height: Math.max(1, Math.round(first.height)),
      space: 'srgb',
      channels: 3,
      depth: 'uchar',
      density: 72,
      isProgressive: false,
      hasProfile: false,
      hasAlpha: false,
      pages,
      pageSizes,
      encrypted: m._FPDF_GetSecurityHandlerRevision(handle) !== -1,
      ...(version === null ? {} : { pdfVersion: version }),
    };
    for (const [field, tag] of INFO_TAGS) {
      const tagBytes = Buffer.from(`${tag}\0`, 'latin1');
      m.HEAPU8.set(tagBytes, scratch);
      const buffer = scratch + 64;
      const room = 64 * 1024 - 64;
      const length = m._FPDF_GetMetaText(handle, scratch, buffer, room);
      // UTF-16LE with a terminator: 2 bytes means empty; longer than the room is cut.
      if (length > 2) {
        const bytes = m.HEAPU8.slice(buffer, buffer + Math.min(length, room) - 2);
        const text = new TextDecoder('utf-16le').decode(bytes);
        if (text !== '') info[field] = text;
      }
    }
    return info;
  } finally {
    m.wasmExports.free(scratch);
    doc.destroy();
  }
}
