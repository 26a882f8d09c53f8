/**
 * Conversion: decode within the pixel limit, orient, encode (the encoders and
 * their bounds: encoders.ts), within the job's time limit.
 *
 *  - Output is auto-oriented (EXIF orientation applied), converted to sRGB
 *    and stripped of metadata (sharp's default), so it looks like the source
 *    in any viewer; its dimensions are the oriented ones. JPEG output of an
 *    image with alpha is flattened onto white rather than black.
 *  - Only the first page/frame of a multi-page TIFF or animated GIF/WebP is
 *    converted.
 *  - HEIC (HEVC-coded HEIF) is decoded by heic.ts first; AVIF (AV1-coded
 *    HEIF) is decoded by sharp itself.
 */
import sharp from 'sharp';
import { Errors } from '@shared/errors';
import {
  CONVERT_FORMATS,
  outputTooLarge,
  type ConvertFormat,
  type OutputPixelLimits,
} from '@shared/media/formats';
import { ENCODERS, FORMAT_EXT, FORMAT_MIME } from './encoders';
import { decodeHeicWithin, type HeicDecoder } from './heic-pool';
import {
  decodeOptions,
  orientedSize,
  readHeader,
  sharpError,
  timeoutError,
  tooManyPixels,
  withinTime,
  type TimeLimit,
} from './sharp';

export interface ConvertResult {
  data: Buffer;
  /** The target format, the output's (oriented) dimensions and its size in bytes. */
  info: { format: ConvertFormat; width: number; height: number; size: number };
  mime: string;
  ext: string;
}

/** The pixel bounds a conversion or a render is held to. */
export interface ImageBounds {
  /** Largest width × height decoded (sharp `limitInputPixels`). */
  maxInputPixels: number;
  /** Largest GIF and AVIF encoded (encoders.ts). */
  maxOutputPixels: OutputPixelLimits;
}

/**
 * Converts to `target`, auto-oriented; see `ENCODERS` for what `quality` does.
 * Images over `maxInputPixels`, and GIF or AVIF outputs over their bound, are
 * refused from the header; the work stops when the job's time is up (`time`).
 */
export async function convertImage(
  input: Buffer,
  target: ConvertFormat,
  options: { quality?: number | undefined },
  bounds: ImageBounds,
  heic: HeicDecoder,
  time: TimeLimit = {},
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
  const { maxInputPixels } = bounds;

  const meta = await readHeader(input, maxInputPixels);
  const width = meta.width;
  const height = meta.pageHeight ?? meta.height;
  if (width * height > maxInputPixels) throw tooManyPixels(width, height, maxInputPixels);
  const heicCoded = meta.format === 'heif' && meta.compression === 'hevc';
  // The output has the source's (oriented) dimensions.
  const out = orientedSize(meta, heicCoded);
  const tooLarge = outputTooLarge(target, out.width, out.height, bounds.maxOutputPixels);
  if (tooLarge) throw tooLarge;

  try {
    let image = heicCoded
      ? sharp(await decodeHeicWithin(heic, input, meta, time), decodeOptions(maxInputPixels))
      : sharp(input, { ...decodeOptions(maxInputPixels), autoOrient: true });
    if (target === 'jpeg' && meta.hasAlpha) image = image.flatten({ background: '#ffffff' });
    // Nothing more is started once the job's time is up (a long HEIC decode may have used it).
    time.signal?.throwIfAborted();
    const { data, info } = await withinTime(
      encode(image, quality, out.width * out.height),
      time,
    ).toBuffer({ resolveWithObject: true });
    return {
      data,
      // sharp names AVIF output "heif"; the target's own name is clearer.
      info: { format: target, width: info.width, height: info.height, size: info.size },
      mime: FORMAT_MIME[target],
      ext: FORMAT_EXT[target],
    };
  } catch (err) {
    throw timeoutError(err, time) ?? (await sharpError(err, input, maxInputPixels));
  }
}
