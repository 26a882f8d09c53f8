/**
 * Conversion: the encoders and their settings per target format, and the
 * conversion itself (decode within the pixel limit, orient, encode).
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
import sharp, { type Sharp } from 'sharp';
import { Errors } from '@shared/errors';
import {
  CONVERT_FORMATS,
  MEDIA_FORMATS,
  outputOf,
  type ConvertFormat,
} from '@shared/media/formats';
import { decodeHeicWithin, type HeicDecoder } from './heic-pool';
import { decodeOptions, readHeader, sharpError, tooManyPixels } from './sharp';

const byFormat = <T>(value: (format: ConvertFormat) => T) =>
  Object.fromEntries(CONVERT_FORMATS.map((f) => [f, value(f)])) as Record<ConvertFormat, T>;

/** The output's type, from the formats table. */
export const FORMAT_MIME: Readonly<Record<ConvertFormat, string>> = byFormat(
  (f) => MEDIA_FORMATS[f].mime,
);

/** Extension used in keys, from the formats table (`jpg`, as for uploads). */
export const FORMAT_EXT: Readonly<Record<ConvertFormat, string>> = byFormat(
  (f) => MEDIA_FORMATS[f].ext,
);

export interface ConvertResult {
  data: Buffer;
  /** The target format, the output's (oriented) dimensions and its size in bytes. */
  info: { format: ConvertFormat; width: number; height: number; size: number };
  mime: string;
  ext: string;
}

/**
 * Encoder settings per target format; the default quality and effort are the
 * formats table's (`MEDIA_FORMATS[format].output`). `quality` (1-100) is the
 * encoder's own scale where the format is lossy, and ignored where it would
 * change nothing or silently make the output lossy (png, tiff, gif: the
 * table gives them no quality).
 *
 * - jpeg: quality 80 by default, 4:2:0 chroma up to quality 90 (sharp's
 *   defaults, without mozjpeg's slower trellis settings).
 * - png: zlib level 6, lossless; quality ignored (sharp would otherwise
 *   quantise to a palette, a lossy PNG nobody asked for).
 * - webp: quality 80, effort 4 (sharp's defaults).
 * - avif: quality 50 (about JPEG 80 visually), effort 2 and 4:2:0 chroma:
 *   sharp's defaults (effort 4, 4:4:4) took many times longer for slightly
 *   smaller files (docs/performance.md). Phone and camera JPEGs are 4:2:0
 *   already, so 4:4:4 only spends time and bytes.
 * - tiff: lossless LZW with horizontal prediction (the most widely readable
 *   TIFF compression); quality ignored. sharp's default would be JPEG-in-TIFF,
 *   lossy and poorly supported by older readers.
 * - gif: sharp's defaults (libimagequant palette, effort 7, full dithering):
 *   the best-looking palette, and the slowest format; quality ignored.
 */
const lossy = (format: 'jpeg' | 'webp' | 'avif', quality: number | undefined) =>
  quality ?? outputOf(format).quality!;
const effort = (format: 'webp' | 'avif' | 'gif') => outputOf(format).effort!;

export const ENCODERS: Record<ConvertFormat, (image: Sharp, quality: number | undefined) => Sharp> =
  {
    jpeg: (image, quality) => image.jpeg({ quality: lossy('jpeg', quality) }),
    png: (image) => image.png({ compressionLevel: 6 }),
    webp: (image, quality) =>
      image.webp({ quality: lossy('webp', quality), effort: effort('webp') }),
    avif: (image, quality) =>
      image.avif({
        quality: lossy('avif', quality),
        effort: effort('avif'),
        chromaSubsampling: '4:2:0',
      }),
    tiff: (image) => image.tiff({ compression: 'lzw', predictor: 'horizontal' }),
    gif: (image) => image.gif({ effort: effort('gif') }),
  };

/**
 * Converts to `target`, auto-oriented; see `ENCODERS` for what `quality` does.
 * Images over `maxInputPixels` are refused from their header.
 */
export async function convertImage(
  input: Buffer,
  target: ConvertFormat,
  options: { quality?: number; timeoutMs?: number },
  maxInputPixels: number,
  heic: HeicDecoder,
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

  const meta = await readHeader(input, maxInputPixels);
  const width = meta.width;
  const height = meta.pageHeight ?? meta.height;
  if (width * height > maxInputPixels) throw tooManyPixels(width, height, maxInputPixels);

  let image =
    meta.format === 'heif' && meta.compression === 'hevc'
      ? sharp(
          await decodeHeicWithin(heic, input, meta, options.timeoutMs),
          decodeOptions(maxInputPixels),
        )
      : sharp(input, { ...decodeOptions(maxInputPixels), autoOrient: true });
  if (target === 'jpeg' && meta.hasAlpha) image = image.flatten({ background: '#ffffff' });
  try {
    // libvips stops the pipeline past the job's remaining time (whole seconds, at least one).
    if (options.timeoutMs !== undefined) {
      image = image.timeout({ seconds: Math.max(1, Math.ceil(options.timeoutMs / 1000)) });
    }
    const { data, info } = await encode(image, quality).toBuffer({ resolveWithObject: true });
    return {
      data,
      // sharp names AVIF output "heif"; the target's own name is clearer.
      info: { format: target, width: info.width, height: info.height, size: info.size },
      mime: FORMAT_MIME[target],
      ext: FORMAT_EXT[target],
    };
  } catch (err) {
    if (options.timeoutMs !== undefined && /timeout/i.test((err as Error).message)) {
      throw Errors.processingTimeout(options.timeoutMs);
    }
    throw await sharpError(err, input, maxInputPixels);
  }
}
