/**
 * The one place sharp is tuned and its errors are read: process-wide settings
 * (`configureSharp`), the decode options every image gets, the header read
 * that refuses types the service does not accept, and the mapping of sharp's
 * errors to `AppError`s.
 *
 *  - The pixel limit is a 422, not a 413: the request that asks for the
 *    conversion is small and the stored file was within the upload limits; the
 *    image is of an accepted type that this service declines to decode.
 *  - `failOn: 'error'`: decoder errors and truncation fail (a clear 422), while
 *    decoder warnings that real camera files trigger (such as stray bytes
 *    before a JPEG marker) do not, as they would with sharp's default
 *    'warning'. Odd EXIF and unusual markers (the corpus' tests-42 and
 *    invalid-image01137) convert at every level.
 */
import sharp, { type Metadata, type Sharp } from 'sharp';
import { AppError, Errors } from '@shared/errors';
import { IMAGE_DECODERS } from '@shared/media/formats';
import { detectType } from '@shared/media/media-types';

/** sharp formats the service accepts, from the formats table (SVG, which sharp also reads, is not one). */
const ACCEPTED_FORMATS: ReadonlySet<string> = new Set(IMAGE_DECODERS);

let sharpConfigured = false;

/**
 * Process-wide sharp tuning; the worker calls it once at start (an adapter
 * calls it with the defaults if nobody has).
 *
 * - `sharp.cache(false)`: libvips' operation cache pays off when the same file
 *   is processed again; every job here brings new bytes, so the cache would
 *   only hold up to 50 MB of decoded images for nothing.
 * - `sharp.concurrency(1)` (libvips threads per image): parallelism comes from
 *   the jobs a worker runs at once (`WORKER_CONCURRENCY`) and from worker
 *   replicas, which operators scale; threads per image multiplied by jobs
 *   would oversubscribe the CPU, and on glibc without jemalloc every extra
 *   thread adds a malloc arena (sharp itself defaults to 1 there). One thread
 *   costs little (docs/performance.md, "Image adapter").
 */
export function configureSharp(options: { concurrency?: number } = {}): void {
  sharp.cache(false);
  sharp.concurrency(options.concurrency ?? 1);
  sharpConfigured = true;
}

/** Tunes sharp with the defaults unless `configureSharp` has run. */
export function ensureSharpConfigured(): void {
  if (!sharpConfigured) configureSharp();
}

/**
 * The job's time limit as image work sees it. sharp gets what is left as its
 * own `timeout` (libvips stops the pipeline: decoding, resizing, the JPEG,
 * PNG, TIFF and WebP encoders); HEIC decoding threads are ended when the
 * signal aborts. The GIF palette quantisation and the AVIF encoder do not
 * look at libvips' timeout once they start: they are bounded by pixels
 * instead (`ENCODER_PIXEL_BOUNDS`, encoders.ts).
 */
export interface TimeLimit {
  /** Aborted when the job's time is up; its reason is the job's error (422 PROCESSING_TIMEOUT). */
  signal?: AbortSignal | undefined;
  /** What was left of the job's time when the work started, in ms. */
  timeoutMs?: number | undefined;
}

/** The pipeline stopped by libvips past the time left (whole seconds, at least one). */
export function withinTime(image: Sharp, limit: TimeLimit): Sharp {
  if (limit.timeoutMs === undefined) return image;
  return image.timeout({ seconds: Math.max(1, Math.ceil(limit.timeoutMs / 1000)) });
}

/**
 * The 422 PROCESSING_TIMEOUT when the job's time is up (its signal's reason)
 * or `err` is sharp's own timeout; undefined for any other failure.
 */
export function timeoutError(err: unknown, limit: TimeLimit): AppError | undefined {
  const reason: unknown = limit.signal?.aborted ? limit.signal.reason : undefined;
  if (reason instanceof AppError) return reason;
  if (reason !== undefined || (limit.timeoutMs !== undefined && isSharpTimeout(err))) {
    return Errors.processingTimeout(limit.timeoutMs ?? 0);
  }
  return undefined;
}

/** libvips' "timeout: N% complete" (sharp's `timeout`), or an AbortSignal.timeout's reason. */
const isSharpTimeout = (err: unknown) =>
  err instanceof Error && (/^timeout: /i.test(err.message) || err.name === 'TimeoutError');

/** How every image is decoded for a conversion. */
export function decodeOptions(maxInputPixels: number) {
  return {
    limitInputPixels: maxInputPixels,
    failOn: 'error',
    // Decode top to bottom while encoding; sharp switches to random access
    // itself when an operation (the rotation of orientations 5-8) needs it.
    sequentialRead: true,
  } as const;
}

/**
 * sharp's header read, errors mapped (`maxInputPixels` only names the limit in
 * an error); the pixel limit is not applied to a header.
 */
export async function readHeader(input: Buffer, maxInputPixels: number): Promise<Metadata> {
  let meta: Metadata;
  try {
    meta = await sharp(input, { limitInputPixels: false, failOn: 'error' }).metadata();
  } catch (err) {
    throw await sharpError(err, input, maxInputPixels);
  }
  if (!ACCEPTED_FORMATS.has(meta.format)) {
    throw Errors.unsupportedType(`${meta.format.toUpperCase()} images are not accepted`);
  }
  return meta;
}

/**
 * The first page's dimensions as the output shows them: EXIF orientations
 * 5-8 (a quarter turn) swap them. Not for a HEIC, whose header already has
 * the transformed dimensions (heic.ts).
 */
export function orientedSize(meta: Metadata, heic: boolean): { width: number; height: number } {
  const width = meta.width;
  const height = meta.pageHeight ?? meta.height;
  return !heic && (meta.orientation ?? 1) >= 5
    ? { width: height, height: width }
    : { width, height };
}

/** The 422 for an image over the pixel limit, with its dimensions and the limit in `details`. */
export function tooManyPixels(width: number, height: number, limit: number): AppError {
  const n = (v: number) => v.toLocaleString('en-US');
  return Errors.unreadable(
    `The image has too many pixels to convert: ${width} × ${height} is ${n(width * height)} ` +
      `pixels, more than the limit of ${n(limit)}`,
    [{ message: 'too many pixels', width, height, limit }],
  );
}

/** Maps an error thrown by sharp (plain `Error`s with libvips' text) to an AppError. */
export async function sharpError(
  err: unknown,
  input: Buffer,
  maxInputPixels: number,
): Promise<AppError> {
  if (err instanceof AppError) return err;
  const text = err instanceof Error ? err.message : String(err);
  if (/exceeds pixel limit/i.test(text)) {
    const meta = await sharp(input, { limitInputPixels: false })
      .metadata()
      .catch(() => undefined);
    return tooManyPixels(meta?.width ?? 0, meta?.pageHeight ?? meta?.height ?? 0, maxInputPixels);
  }
  if (/unsupported image format|Input Buffer is empty/i.test(text)) {
    // sharp recognised no format. Bytes that start like an accepted image
    // are a damaged one (422); anything else is not an image (415).
    const type = await detectType(input.subarray(0, 4100));
    if (type?.kind === 'image') {
      return Errors.unreadable(
        `The ${type.ext.toUpperCase()} image cannot be read: its header is damaged or incomplete`,
        undefined,
        err,
      );
    }
    return Errors.unsupportedType(
      `${type ? `The content is a ${type.ext.toUpperCase()} file, not an image` : 'The content is not an image'}` +
        '; images are read as JPEG, PNG, WebP, GIF, AVIF, TIFF or HEIC',
    );
  }
  const reason = firstLine(text);
  return Errors.unreadable(
    `The image cannot be decoded: it is corrupt or truncated (${reason})`,
    [{ message: reason }],
    err,
  );
}

/** libvips' first message line, without sharp's and the loader's prefixes. */
const firstLine = (text: string) =>
  (text.split('\n')[0] ?? '')
    .replace(/^Input (buffer|file) has corrupt header: /, '')
    .replace(/^\w+: /, '')
    .trim() || 'unknown decoder error';
