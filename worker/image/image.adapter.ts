/**
 * The image adapter as the worker uses it: reads metadata and converts images
 * with sharp, HEIC decoded with libheif-js. It knows nothing of HTTP or queues
 * and reports every failure as an `AppError`:
 *
 *  - 415 UNSUPPORTED_MEDIA_TYPE: the bytes are not an image type the service
 *    accepts (a PDF, text, SVG, an empty buffer).
 *  - 422 UNREADABLE_MEDIA: an accepted type that cannot be read: damaged header,
 *    corrupt or truncated pixel data, undecodable HEIC, or more pixels than
 *    `maxInputPixels` (refused from the header, before any pixel is decoded).
 *  - 422 OUTPUT_TOO_LARGE: a GIF or AVIF output over its pixel bound
 *    (`maxOutputPixels`, refused from the header: encoders.ts).
 *  - 422 PROCESSING_TIMEOUT: the job's time ran out (`TimeLimit`, sharp.ts).
 *  - 400 VALIDATION_FAILED: an unknown target format or a quality outside 1-100.
 *
 * Its parts: metadata (metadata.ts), conversion and the encoders (convert.ts),
 * renders: resized variants (render.ts), of images and of PDF pages (PDFium
 * on threads: pdf-page.ts, pdf-pool.ts),
 * HEIC decoding (heic.ts, on threads: heic-pool.ts) and the TIFF it hands sharp (tiff.ts), and sharp's
 * tuning and error mapping (sharp.ts).
 */
import type { ConvertFormat, OutputPixelLimits } from '@shared/media/formats';
import type { RenderOptions } from '@shared/media/render-options';
import { convertImage, type ConvertResult, type ImageBounds } from './convert';
import { HeicThreadPool } from './heic-pool';
import { readMetadata, type ImageMetadata } from './metadata';
import type { PdfInfo } from './pdf-page';
import { PdfThreadPool, readPdfInfoWithin } from './pdf-pool';
import { renderImage, renderPdf, type RenderResult } from './render';
import { ensureSharpConfigured, type TimeLimit } from './sharp';
import { thumbhashOf } from './thumbhash';
import { isAppError } from '@shared/errors';
import { repairForReading } from '../pdf/pdf.adapter';

export type { ConvertResult } from './convert';
export { FORMAT_EXT, FORMAT_MIME } from './encoders';
export type { ImageMetadata } from './metadata';
export type { RenderResult } from './render';
export type { PdfInfo } from './pdf-page';
export { configureSharp, type TimeLimit } from './sharp';

export interface ImageAdapterOptions {
  /** Largest width × height decoded (sharp `limitInputPixels`); config `limits.maxInputPixels`. */
  maxInputPixels: number;
  /** Largest GIF and AVIF encoded (width × height); config `limits.maxOutputPixels`; default unbounded. */
  maxOutputPixels?: OutputPixelLimits;
  /** HEICs decoded at once, each on its own thread (the image queue's concurrency); default 1. */
  heicThreads?: number;
  /** Most pixels of a PDF page's bitmap (RENDER_MAX_WIDTH × RENDER_MAX_HEIGHT); default 4096 × 4096. */
  maxPagePixels?: number;
}

export class ImageAdapter {
  private readonly maxInputPixels: number;
  private readonly bounds: ImageBounds;
  private readonly heic: HeicThreadPool;
  private readonly pdfs: PdfThreadPool;
  private readonly maxPagePixels: number;

  constructor(options: ImageAdapterOptions) {
    if (!Number.isInteger(options.maxInputPixels) || options.maxInputPixels < 1) {
      throw new TypeError('maxInputPixels must be a positive integer');
    }
    this.maxInputPixels = options.maxInputPixels;
    this.bounds = {
      maxInputPixels: options.maxInputPixels,
      maxOutputPixels: options.maxOutputPixels ?? { gif: Infinity, avif: Infinity },
    };
    this.heic = new HeicThreadPool(options.heicThreads ?? 1);
    // One rasterizing thread per image job that can run at once, as for HEIC.
    this.pdfs = new PdfThreadPool(options.heicThreads ?? 1);
    this.maxPagePixels = options.maxPagePixels ?? 4096 * 4096;
    ensureSharpConfigured();
  }

  /** HEIC decoding threads running (started on the first HEIC decoded, not for metadata). */
  get heicThreads(): number {
    return this.heic.threadCount;
  }

  /** HEIC decodes that ran to their end (a value or an error), not the ones stopped. */
  get heicDecodesAnswered(): number {
    return this.heic.decodesAnswered;
  }

  /** PDF rasterizing threads running (started on the first PDF page rendered). */
  get pdfThreads(): number {
    return this.pdfs.threadCount;
  }

  /** Ends the HEIC decoding and PDF rasterizing threads (work after this fails). */
  async close(): Promise<void> {
    await Promise.all([this.heic.close(), this.pdfs.close()]);
  }

  /** What sharp reads from the image's header (no pixels are decoded). */
  readMetadata(input: Buffer): Promise<ImageMetadata> {
    return readMetadata(input, this.maxInputPixels);
  }

  /** A PDF's information (pages, sizes, title...; pdf-page.ts), read on the PDF threads. */
  readPdfInfo(input: Buffer, time: TimeLimit = {}): Promise<PdfInfo> {
    return readRepaired(input, time, (i, t) => readPdfInfoWithin(this.pdfs, i, t));
  }

  /**
   * Converts to `target`, auto-oriented; see `ENCODERS` in encoders.ts for
   * what `quality` does. Stops when the job's time is up (`signal`,
   * `timeoutMs`: see `TimeLimit`).
   */
  convert(
    input: Buffer,
    target: ConvertFormat,
    options: { quality?: number | undefined } & TimeLimit = {},
  ): Promise<ConvertResult> {
    const { signal, timeoutMs, ...rest } = options;
    return convertImage(input, target, rest, this.bounds, this.heic, { signal, timeoutMs });
  }

  /** Resizes and encodes a variant (GET /media/render); see render.ts. Stops as `convert` does. */
  render(input: Buffer, options: RenderOptions, time: TimeLimit = {}): Promise<RenderResult> {
    if (options.page !== undefined) {
      const bounds = { ...this.bounds, maxPagePixels: this.maxPagePixels };
      return readRepaired(input, time, (i, t) => renderPdf(i, options, bounds, this.pdfs, t));
    }
    return renderImage(input, options, this.bounds, this.heic, time);
  }

  /** The image's placeholder (ThumbHash, base64) from a render within 100 × 100; see thumbhash.ts. */
  thumbhash(input: Buffer, time: TimeLimit = {}): Promise<string> {
    return thumbhashOf(input, (i, o, t) => this.render(i, o, t), time);
  }
}

/** The most of a job's time a qpdf repair before a PDF's read may take. */
export const PDF_REPAIR_TIMEOUT_MS = 15_000;
/** Time a read after a repair needs at least; with less left, no repair is tried. */
const MIN_READ_AFTER_REPAIR_MS = 1_000;

/**
 * `read` of a PDF; when PDFium refuses it as unreadable (a damaged
 * cross-reference table, a lost page tree), once more on the file a merge's
 * repair makes of it (worker/pdf/open.ts, `repairForReading`: pdf-lib, qpdf
 * after the bomb check, the page tree rebuilt), within what is left of the
 * job's time. A file qpdf cannot
 * repair, or that is still unreadable after, keeps its refusal (422): never
 * a 5xx, never past the job's time.
 */
async function readRepaired<T>(
  input: Buffer,
  time: TimeLimit,
  read: (input: Buffer, time: TimeLimit) => Promise<T>,
): Promise<T> {
  const started = Date.now();
  try {
    return await read(input, time);
  } catch (err) {
    if (!isAppError(err) || err.code !== 'UNREADABLE_MEDIA' || time.signal?.aborted) throw err;
    const left = () =>
      time.timeoutMs === undefined
        ? PDF_REPAIR_TIMEOUT_MS
        : time.timeoutMs - (Date.now() - started);
    if (left() < 2 * MIN_READ_AFTER_REPAIR_MS) throw err;
    const repaired = await repairForReading(input, {
      timeoutMs: Math.min(PDF_REPAIR_TIMEOUT_MS, left() - MIN_READ_AFTER_REPAIR_MS),
    });
    if (!repaired || time.signal?.aborted) throw err;
    return read(repaired, {
      ...time,
      ...(time.timeoutMs === undefined ? {} : { timeoutMs: left() }),
    });
  }
}
