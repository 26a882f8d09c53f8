/**
 * HEIC decoding: sharp's prebuilt libvips reads a HEIC's header but has no
 * HEVC decoder, so the primary image is decoded by libheif-js (libheif +
 * libde265 compiled to WebAssembly, LGPL-3.0, shipped inside the npm package:
 * no native build, no download at run time), then handed to sharp.
 *
 *  - libheif applies the HEIF `irot`/`imir`/`clap` transforms while decoding,
 *    and the dimensions sharp reports are already the transformed ones, so
 *    the output has the header's dimensions and looks like the source; the
 *    EXIF orientation inside a HEIC is not applied again (HEIF readers must
 *    ignore it, and libvips drops it from the metadata).
 *  - The decoded pixels are wrapped in an uncompressed in-memory TIFF carrying
 *    the HEIC's ICC profile (tiff.ts), so sharp converts them to sRGB as it
 *    does for any profiled input (iPhone photos are Display P3; handing sharp
 *    bare raw pixels would lose that).
 *  - A HEIC whose top-level boxes run past the end of the buffer is refused as
 *    truncated (libheif would otherwise decode it without an error).
 *  - The decoder is loaded on the first HEIC only. A WebAssembly heap never
 *    shrinks, so the decoder is dropped (and reloaded on the next HEIC) once
 *    its heap exceeds `HEIF_HEAP_RESET_BYTES`. Decoding blocks the thread it
 *    runs on, so the worker runs it on threads of its own (heic-pool.ts,
 *    heic-thread.ts), each with its own decoder. Load time, memory and decode
 *    speed: docs/performance.md, "Image adapter".
 */
import { createRequire } from 'node:module';
import { AppError, Errors } from '@shared/errors';
import { tiffContainer } from './tiff';

/** Drop the decoder (its heap never shrinks) once its heap has grown past this. */
export const HEIF_HEAP_RESET_BYTES = 256 * 1024 * 1024;

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

/**
 * The HEIC decoded into an uncompressed TIFF that carries its ICC profile, for
 * sharp. Blocks the calling thread: the worker calls it through the decoding
 * threads (heic-pool.ts), never on its event loop.
 */
export function decodeHeic(input: Buffer, icc: Buffer | undefined): Buffer {
  let tiff: { buffer: Buffer; pixelOffset: number } | undefined;
  decodeHeicPixels(input, (width, height, channels, premultiplied) => {
    tiff = tiffContainer(width, height, channels, icc, premultiplied);
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
