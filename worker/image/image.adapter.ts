/**
 * Image adapter: reads metadata and converts images with sharp, and decodes
 * HEIC (HEVC-coded HEIF) with libheif compiled to WebAssembly, because sharp's
 * prebuilt libvips reads a HEIC's header but has no HEVC decoder. It is the one
 * place that tunes sharp (cache, concurrency, pixel limit, `failOn`, encoder
 * settings); it knows nothing of HTTP or queues and reports every failure as an
 * `AppError`:
 *
 *  - 415 UNSUPPORTED_MEDIA_TYPE: the bytes are not an image type the service
 *    accepts (a PDF, text, SVG, an empty buffer).
 *  - 422 UNREADABLE_MEDIA: an accepted type that cannot be read: damaged header,
 *    corrupt or truncated pixel data, undecodable HEIC, or more pixels than
 *    `maxInputPixels` (refused from the header, before any pixel is decoded).
 *  - 400 VALIDATION_FAILED: an unknown target format or a quality outside 1-100.
 *
 * Decisions, and why:
 *
 *  - Metadata is sharp's own `metadata()` of the same bytes, every field it
 *    reports (see `ImageMetadata`). It reads headers only, so it is answered whatever
 *    the pixel count: reporting the dimensions of an image too large to convert
 *    is cheap and tells the client why a conversion is refused. The ICC profile
 *    is included as `icc` when present, like `exif`/`iptc`/`xmp`: it is a raw
 *    block the image carries, `hasProfile` alone does not say which profile
 *    (sRGB or Display P3), and its size is bounded by the file's.
 *  - The pixel limit is a 422, not a 413: the request that asks for the
 *    conversion is small and the stored file was within the upload limits; the
 *    image is of an accepted type that this service declines to decode.
 *  - `failOn: 'error'`: decoder errors and truncation fail (a clear 422), while
 *    decoder warnings that real camera files trigger (such as stray bytes
 *    before a JPEG marker) do not, as they would with sharp's default
 *    'warning'. Odd EXIF and unusual markers (the corpus' tests-42 and
 *    invalid-image01137) convert at every level.
 *  - Output is auto-oriented (EXIF orientation applied), converted to sRGB
 *    and stripped of metadata (sharp's default), so it looks like the source
 *    in any viewer; its dimensions are the oriented ones. JPEG output of an
 *    image with alpha is flattened onto white rather than black.
 *  - Only the first page/frame of a multi-page TIFF or animated GIF/WebP is
 *    converted.
 *  - Encoder settings: see `ENCODERS`.
 *
 * HEIC: the header is read by sharp (dimensions, metadata, pixel limit), then
 * the primary image is decoded by libheif-js (libheif 1.23 + libde265 compiled
 * to WebAssembly, LGPL-3.0, shipped inside the npm package: no native build,
 * no download at run time). libheif applies the HEIF `irot`/`imir`/`clap`
 * transforms while decoding, and the dimensions sharp reports are already the
 * transformed ones, so the output has the header's dimensions and looks like
 * the source; the EXIF orientation inside a HEIC is not applied again (HEIF
 * readers must ignore it, and libvips drops it from the metadata). The decoded
 * pixels are wrapped in an uncompressed in-memory TIFF carrying the HEIC's ICC
 * profile, so sharp converts them to sRGB as it does for any profiled input
 * (iPhone photos are Display P3; handing sharp bare raw pixels would lose
 * that). A HEIC whose top-level boxes run past the end of the buffer is refused
 * as truncated (libheif would otherwise decode it without an error). AVIF
 * (AV1-coded HEIF) is decoded by sharp itself.
 *
 * Memory: the WebAssembly decoder is loaded on the first HEIC only (~40 ms,
 * about 20 MB of code and a 16 MB heap). Decoding needs the compressed input,
 * the YCbCr planes and the RGB(A) result inside its heap (about 40 MB for an
 * 8.5-megapixel photo), and a WebAssembly heap never shrinks, so the decoder is
 * dropped (and reloaded on the next HEIC) once its heap exceeds
 * `HEIF_HEAP_RESET_BYTES`. Decoding runs on the calling thread (about 0.8 s for
 * 8.5 megapixels); sharp's work runs on libuv's thread pool.
 */
import { createRequire } from 'node:module';
import sharp, { type Metadata, type Sharp } from 'sharp';
import { AppError, Errors } from '@shared/errors';
import { CONVERT_FORMATS, type ConvertFormat } from '@shared/media/formats';
import { detectType } from '@shared/media/media-types';

export interface ImageAdapterOptions {
  /** Largest width × height decoded (sharp `limitInputPixels`); config `limits.maxInputPixels`. */
  maxInputPixels: number;
}

export const FORMAT_MIME: Readonly<Record<ConvertFormat, string>> = {
  jpeg: 'image/jpeg',
  png: 'image/png',
  webp: 'image/webp',
  avif: 'image/avif',
  tiff: 'image/tiff',
  gif: 'image/gif',
};

/** Extension used in keys; `jpg` as for uploads (see `KNOWN_TYPES`). */
export const FORMAT_EXT: Readonly<Record<ConvertFormat, string>> = {
  jpeg: 'jpg',
  png: 'png',
  webp: 'webp',
  avif: 'avif',
  tiff: 'tiff',
  gif: 'gif',
};

/**
 * What `GET /media/metadata` returns: everything sharp's `metadata()` reports,
 * with sharp's values, and `size` the input's byte count. Buffers (`exif`,
 * `iptc`, `xmp`, `icc`, `tifftagPhotoshop`) stay Buffers here; their JSON form
 * is the interface's `{ "type": "Buffer", "data": [...] }`. `width` and
 * `height` are as stored: an `orientation` of 5-8 means a viewer shows them
 * swapped. A type alias, not an interface, so it is a `Record<string, unknown>`.
 */
export type ImageMetadata = Omit<Metadata, 'size'> & {
  /** Bytes of the input. */
  size: number;
};

export interface ConvertResult {
  data: Buffer;
  /** The target format, the output's (oriented) dimensions and its size in bytes. */
  info: { format: ConvertFormat; width: number; height: number; size: number };
  mime: string;
  ext: string;
}

/**
 * Encoder settings per target format. `quality` (1-100) is the encoder's own
 * scale where the format is lossy, and ignored where it would change nothing
 * or silently make the output lossy (png, tiff, gif).
 *
 * - jpeg: quality 80 by default, 4:2:0 chroma up to quality 90 (sharp's
 *   defaults, without mozjpeg's slower trellis settings: ~0.15 s for 12 MP).
 * - png: zlib level 6, lossless; quality ignored (sharp would otherwise
 *   quantise to a palette, a lossy PNG nobody asked for).
 * - webp: quality 80, effort 4 (sharp's defaults; about 1 s for 12 MP).
 * - avif: quality 50 (about JPEG 80 visually), effort 2 and 4:2:0 chroma. At
 *   sharp's defaults (effort 4, 4:4:4) a 12 MP photo took ~30 s on two cores;
 *   effort 2 with 4:2:0 takes 2-4 s for files 1-5% larger than effort 4. Phone
 *   and camera JPEGs are 4:2:0 already, so 4:4:4 only spends time and bytes.
 * - tiff: lossless LZW with horizontal prediction (the most widely readable
 *   TIFF compression); quality ignored. sharp's default would be JPEG-in-TIFF,
 *   lossy and poorly supported by older readers.
 * - gif: sharp's defaults (libimagequant palette, effort 7, full dithering):
 *   the best-looking palette, at 8-12 s for a 12 MP photo; quality ignored.
 */
const ENCODERS: Record<ConvertFormat, (image: Sharp, quality: number | undefined) => Sharp> = {
  jpeg: (image, quality) => image.jpeg({ quality: quality ?? 80 }),
  png: (image) => image.png({ compressionLevel: 6 }),
  webp: (image, quality) => image.webp({ quality: quality ?? 80, effort: 4 }),
  avif: (image, quality) =>
    image.avif({ quality: quality ?? 50, effort: 2, chromaSubsampling: '4:2:0' }),
  tiff: (image) => image.tiff({ compression: 'lzw', predictor: 'horizontal' }),
  gif: (image) => image.gif(),
};

/** sharp formats the service accepts (SVG, which sharp also reads, is not one). */
const ACCEPTED_FORMATS: ReadonlySet<string> = new Set([
  'jpeg',
  'png',
  'webp',
  'gif',
  'tiff',
  'heif',
]);

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
 *   costs little: AVIF at effort 2 goes from ~1-2.7 s to ~2-2.9 s for 8-12 MP.
 */
export function configureSharp(options: { concurrency?: number } = {}): void {
  sharp.cache(false);
  sharp.concurrency(options.concurrency ?? 1);
  sharpConfigured = true;
}

export class ImageAdapter {
  private readonly maxInputPixels: number;

  constructor(options: ImageAdapterOptions) {
    if (!Number.isInteger(options.maxInputPixels) || options.maxInputPixels < 1) {
      throw new TypeError('maxInputPixels must be a positive integer');
    }
    this.maxInputPixels = options.maxInputPixels;
    if (!sharpConfigured) configureSharp();
  }

  /** What sharp reads from the image's header (no pixels are decoded). */
  async readMetadata(input: Buffer): Promise<ImageMetadata> {
    const meta = await this.header(input);
    return { ...meta, size: input.length };
  }

  /** Converts to `target`, auto-oriented; see `ENCODERS` for what `quality` does. */
  async convert(
    input: Buffer,
    target: ConvertFormat,
    options: { quality?: number } = {},
  ): Promise<ConvertResult> {
    const encode = Object.hasOwn(ENCODERS, target) ? ENCODERS[target] : undefined;
    if (!encode) {
      throw Errors.validation([
        { field: 'format', message: `format must be one of ${CONVERT_FORMATS.join(', ')}` },
      ]);
    }
    const { quality } = options;
    if (quality !== undefined && !(Number.isInteger(quality) && quality >= 1 && quality <= 100)) {
      throw Errors.validation([
        { field: 'quality', message: 'quality must be an integer from 1 to 100' },
      ]);
    }

    const meta = await this.header(input);
    const width = meta.width;
    const height = meta.pageHeight ?? meta.height;
    if (width * height > this.maxInputPixels) throw this.tooManyPixels(width, height);

    let image =
      meta.format === 'heif' && meta.compression === 'hevc'
        ? sharp(decodeHeic(input, meta), this.decodeOptions())
        : sharp(input, { ...this.decodeOptions(), autoOrient: true });
    if (target === 'jpeg' && meta.hasAlpha) image = image.flatten({ background: '#ffffff' });
    try {
      const { data, info } = await encode(image, quality).toBuffer({ resolveWithObject: true });
      return {
        data,
        // sharp names AVIF output "heif"; the target's own name is clearer.
        info: { format: target, width: info.width, height: info.height, size: info.size },
        mime: FORMAT_MIME[target],
        ext: FORMAT_EXT[target],
      };
    } catch (err) {
      throw await this.sharpError(err, input);
    }
  }

  private decodeOptions() {
    return {
      limitInputPixels: this.maxInputPixels,
      failOn: 'error',
      // Decode top to bottom while encoding; sharp switches to random access
      // itself when an operation (the rotation of orientations 5-8) needs it.
      sequentialRead: true,
    } as const;
  }

  /** sharp's header read, errors mapped; the pixel limit is not applied to a header. */
  private async header(input: Buffer): Promise<Metadata> {
    let meta: Metadata;
    try {
      meta = await sharp(input, { limitInputPixels: false, failOn: 'error' }).metadata();
    } catch (err) {
      throw await this.sharpError(err, input);
    }
    if (!ACCEPTED_FORMATS.has(meta.format)) {
      throw Errors.unsupportedType(`${meta.format.toUpperCase()} images are not accepted`);
    }
    return meta;
  }

  private tooManyPixels(width: number, height: number): AppError {
    const n = (v: number) => v.toLocaleString('en-US');
    return Errors.unreadable(
      `The image has too many pixels to convert: ${width} × ${height} is ${n(width * height)} ` +
        `pixels, more than the limit of ${n(this.maxInputPixels)}`,
      [{ message: 'too many pixels', width, height, limit: this.maxInputPixels }],
    );
  }

  /** Maps an error thrown by sharp (plain `Error`s with libvips' text) to an AppError. */
  private async sharpError(err: unknown, input: Buffer): Promise<AppError> {
    if (err instanceof AppError) return err;
    const text = err instanceof Error ? err.message : String(err);
    if (/exceeds pixel limit/i.test(text)) {
      const meta = await sharp(input, { limitInputPixels: false })
        .metadata()
        .catch(() => undefined);
      return this.tooManyPixels(meta?.width ?? 0, meta?.pageHeight ?? meta?.height ?? 0);
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
}

/** libvips' first message line, without sharp's and the loader's prefixes. */
const firstLine = (text: string) =>
  (text.split('\n')[0] ?? '')
    .replace(/^Input (buffer|file) has corrupt header: /, '')
    .replace(/^\w+: /, '')
    .trim() || 'unknown decoder error';

// ---------------------------------------------------------------------------
// HEIC decoding (libheif-js, WebAssembly)

/** Drop the decoder (its heap never shrinks) once its heap has grown past this. */
export const HEIF_HEAP_RESET_BYTES = 256 * 1024 * 1024;

/** Rows per strip of the in-memory TIFF: strips of about 1 MB keep libtiff's buffers small. */
const TIFF_STRIP_BYTES = 1024 * 1024;

/** embind enum value */
interface HeifEnum {
  value: number;
}
interface HeifError {
  code: HeifEnum;
  subcode?: HeifEnum;
  message?: string;
}
/** Opaque handles (embind objects wrapping libheif pointers). */
type HeifContext = object;
type HeifHandle = object;
interface HeifDecoded {
  image: object;
  width: number;
  height: number;
  channels: { id: HeifEnum; width: number; height: number; stride: number; data: Uint8Array }[];
}
/** The part of libheif-js's embind API used here (the package ships no types for it). */
interface LibHeif {
  HEAPU8: Uint8Array;
  heif_context_alloc(): HeifContext;
  heif_context_free(context: HeifContext): void;
  heif_context_read_from_memory(context: HeifContext, data: Uint8Array): HeifError;
  heif_js_context_get_primary_image_handle(context: HeifContext): HeifHandle | HeifError;
  heif_image_handle_has_alpha_channel(handle: HeifHandle): number;
  heif_image_handle_is_premultiplied_alpha(handle: HeifHandle): number;
  heif_image_handle_release(handle: HeifHandle): void;
  heif_js_decode_image2(
    handle: HeifHandle,
    colorspace: HeifEnum,
    chroma: HeifEnum,
  ): HeifDecoded | HeifError;
  heif_image_release(image: object): void;
  heif_colorspace: { heif_colorspace_RGB: HeifEnum };
  heif_chroma: { heif_chroma_interleaved_RGB: HeifEnum; heif_chroma_interleaved_RGBA: HeifEnum };
  heif_channel: { heif_channel_interleaved: HeifEnum };
}

let libheif: LibHeif | undefined;

/** Instantiates the decoder on first use (the factory, so a dropped instance can be freed). */
function loadLibHeif(): LibHeif {
  if (!libheif) {
    // The bundle embeds the .wasm (the package's `libheif-js/wasm` entry reads it
    // relative to the working directory, which breaks outside the package).
    const load = createRequire(__filename);
    const factory = load('libheif-js/libheif-wasm/libheif-bundle.js') as () => LibHeif;
    libheif = factory();
  }
  return libheif;
}

/** True once a HEIC has been decoded in this process and the decoder was kept. */
export const heifDecoderLoaded = (): boolean => libheif !== undefined;

const isHeifError = (v: unknown): v is HeifError =>
  typeof v === 'object' && v !== null && 'code' in v && typeof v.code === 'object';

/** Decoded HEIC pixels, interleaved RGB or RGBA, rows packed. */
export interface HeifPixels {
  width: number;
  height: number;
  channels: 3 | 4;
  premultiplied: boolean;
  data: Buffer;
}

/**
 * Decodes a HEIC's primary image (transforms applied) into `target`, which
 * `allocate` provides once the size is known. Exported for tests.
 * @internal
 */
export function decodeHeicPixels(
  input: Buffer,
  allocate: (width: number, height: number, channels: 3 | 4, premultiplied: boolean) => Buffer = (
    w,
    h,
    c,
  ) => Buffer.allocUnsafe(w * h * c),
): HeifPixels {
  if (isobmffTruncated(input)) {
    throw Errors.unreadable('The HEIC image cannot be decoded: the file is truncated');
  }
  const lib = loadLibHeif();
  let context: HeifContext | undefined;
  let handle: HeifHandle | undefined;
  let decoded: HeifDecoded | undefined;
  let healthy = true;
  const failed = (what: string, e?: HeifError, cause?: unknown) =>
    Errors.unreadable(
      `The HEIC image cannot be decoded: ${what}`,
      [{ message: e?.message ?? what }],
      cause,
    );
  try {
    context = lib.heif_context_alloc();
    const read = lib.heif_context_read_from_memory(context, input);
    if (read.code.value !== 0) throw failed('its structure is damaged', read);
    const primary = lib.heif_js_context_get_primary_image_handle(context);
    if (isHeifError(primary)) throw failed('it has no readable primary image', primary);
    handle = primary;
    const alpha = lib.heif_image_handle_has_alpha_channel(handle) !== 0;
    const premultiplied = alpha && lib.heif_image_handle_is_premultiplied_alpha(handle) !== 0;
    const channels = alpha ? 4 : 3;
    const result = lib.heif_js_decode_image2(
      handle,
      lib.heif_colorspace.heif_colorspace_RGB,
      alpha
        ? lib.heif_chroma.heif_chroma_interleaved_RGBA
        : lib.heif_chroma.heif_chroma_interleaved_RGB,
    );
    if (isHeifError(result) || !Array.isArray(result.channels)) {
      throw failed('its pixel data is damaged', isHeifError(result) ? result : undefined);
    }
    decoded = result;
    const plane = decoded.channels.find(
      (c) => c.id.value === lib.heif_channel.heif_channel_interleaved.value,
    );
    if (!plane) throw failed('the decoder returned no pixels');
    const { width, height, stride } = plane;
    const rowBytes = width * channels;
    // The plane is a view into the WebAssembly heap: copy it out, row by row
    // (rows are padded to the decoder's alignment), before it is released.
    const data = allocate(width, height, channels, premultiplied);
    for (let y = 0; y < height; y++) {
      data.set(plane.data.subarray(y * stride, y * stride + rowBytes), y * rowBytes);
    }
    return { width, height, channels, premultiplied, data };
  } catch (err) {
    if (err instanceof AppError) throw err;
    // A WebAssembly trap or abort (out of memory, a decoder bug) leaves the
    // instance unusable: drop it, and report the input as undecodable.
    healthy = false;
    throw failed('the decoder failed', undefined, err);
  } finally {
    try {
      if (decoded) lib.heif_image_release(decoded.image);
      if (handle) lib.heif_image_handle_release(handle);
      if (context) lib.heif_context_free(context);
    } catch {
      healthy = false;
    }
    if (!healthy || lib.HEAPU8.buffer.byteLength > HEIF_HEAP_RESET_BYTES) libheif = undefined;
  }
}

/** The HEIC decoded into an uncompressed TIFF that carries its ICC profile, for sharp. */
function decodeHeic(input: Buffer, meta: Metadata): Buffer {
  let tiff: { buffer: Buffer; pixelOffset: number } | undefined;
  decodeHeicPixels(input, (width, height, channels, premultiplied) => {
    tiff = tiffContainer(width, height, channels, meta.icc, premultiplied);
    return tiff.buffer.subarray(tiff.pixelOffset);
  });
  if (!tiff) throw Errors.unreadable('The HEIC image cannot be decoded');
  return tiff.buffer;
}

/**
 * True when the top-level ISO-BMFF boxes (ftyp, meta, mdat...) run past the
 * end of the buffer: the file was cut short.
 */
export function isobmffTruncated(data: Buffer): boolean {
  let offset = 0;
  while (offset + 8 <= data.length) {
    let size = data.readUInt32BE(offset);
    if (size === 0) return false; // the last box, to the end of the file
    if (size === 1) {
      if (offset + 16 > data.length) return true;
      size = Number(data.readBigUInt64BE(offset + 8));
    }
    if (size < 8) return true;
    offset += size;
  }
  return offset > data.length;
}

/**
 * An uncompressed, little-endian, chunky RGB(A) TIFF with room for the pixels
 * at `pixelOffset`, and the ICC profile (tag 34675) when given. Exported for
 * tests.
 * @internal
 */
export function tiffContainer(
  width: number,
  height: number,
  channels: 3 | 4,
  icc: Buffer | undefined,
  premultiplied: boolean,
): { buffer: Buffer; pixelOffset: number } {
  const rowBytes = width * channels;
  const rowsPerStrip = Math.max(1, Math.min(height, Math.floor(TIFF_STRIP_BYTES / rowBytes)));
  const strips = Math.ceil(height / rowsPerStrip);
  const SHORT = 3;
  const LONG = 4;
  const UNDEFINED = 7;
  type Entry = [tag: number, type: number, count: number, value: number];

  // Layout: header, IFD, out-of-line values, pixels (each on an even offset).
  const entryCount = 11 + (channels === 4 ? 1 : 0) + (icc ? 1 : 0);
  const ifdOffset = 8;
  let cursor = ifdOffset + 2 + entryCount * 12 + 4;
  const reserve = (bytes: number) => {
    const at = cursor;
    cursor += bytes + (bytes % 2);
    return at;
  };
  const bitsOffset = reserve(channels * 2);
  const stripOffsetsOffset = strips > 1 ? reserve(strips * 4) : 0;
  const stripCountsOffset = strips > 1 ? reserve(strips * 4) : 0;
  const iccOffset = icc ? reserve(icc.length) : 0;
  const pixelOffset = cursor;
  const total = pixelOffset + rowBytes * height;
  if (total > 0xffff_ffff) {
    throw Errors.unreadable('The HEIC image is too large to convert');
  }

  const buffer = Buffer.allocUnsafe(total);
  buffer.fill(0, 0, pixelOffset);
  buffer.write('II', 0, 'latin1');
  buffer.writeUInt16LE(42, 2);
  buffer.writeUInt32LE(ifdOffset, 4);

  const entries: Entry[] = [
    [256, LONG, 1, width],
    [257, LONG, 1, height],
    [258, SHORT, channels, bitsOffset], // BitsPerSample: 8 per channel
    [259, SHORT, 1, 1], // Compression: none
    [262, SHORT, 1, 2], // PhotometricInterpretation: RGB
    [273, LONG, strips, strips > 1 ? stripOffsetsOffset : pixelOffset],
    [277, SHORT, 1, channels],
    [278, LONG, 1, rowsPerStrip],
    [279, LONG, strips, strips > 1 ? stripCountsOffset : rowBytes * height],
    [284, SHORT, 1, 1], // PlanarConfiguration: chunky
  ];
  if (channels === 4) entries.push([338, SHORT, 1, premultiplied ? 1 : 2]); // ExtraSamples: alpha
  entries.push([296, SHORT, 1, 1]); // ResolutionUnit: none (sharp reads no density)
  if (icc) entries.push([34675, UNDEFINED, icc.length, iccOffset]);
  entries.sort((a, b) => a[0] - b[0]);

  buffer.writeUInt16LE(entries.length, ifdOffset);
  entries.forEach(([tag, type, count, value], i) => {
    const at = ifdOffset + 2 + i * 12;
    buffer.writeUInt16LE(tag, at);
    buffer.writeUInt16LE(type, at + 2);
    buffer.writeUInt32LE(count, at + 4);
    if (type === SHORT && count === 1) buffer.writeUInt16LE(value, at + 8);
    else buffer.writeUInt32LE(value, at + 8);
  });
  buffer.writeUInt32LE(0, ifdOffset + 2 + entries.length * 12); // no next IFD

  for (let c = 0; c < channels; c++) buffer.writeUInt16LE(8, bitsOffset + c * 2);
  if (strips > 1) {
    for (let s = 0; s < strips; s++) {
      const rows = Math.min(rowsPerStrip, height - s * rowsPerStrip);
      buffer.writeUInt32LE(pixelOffset + s * rowsPerStrip * rowBytes, stripOffsetsOffset + s * 4);
      buffer.writeUInt32LE(rows * rowBytes, stripCountsOffset + s * 4);
    }
  }
  if (icc) icc.copy(buffer, iccOffset);
  return { buffer, pixelOffset };
}
