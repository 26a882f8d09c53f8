/**
 * Renders (GET /media/render): resize to the asked size and fit, encode to
 * the asked format, as a variant of the source.
 *
 *  - The resize follows the input directly, so libvips shrinks on load (JPEG
 *    by a power of two in the decoder, WebP by scaling): a thumbnail of a
 *    12 MP JPEG decodes about 1/8 of its pixels. `autoOrient` (the decode
 *    option, not a `rotate()` before the resize) keeps that: sharp computes
 *    the shrink from the oriented dimensions and rotates the small image.
 *  - Never enlarged (`withoutEnlargement`): asking for more pixels than the
 *    source has gives the source's size.
 *  - `contain` pads with transparency (white where the format has no alpha).
 *  - Metadata (EXIF with GPS, XMP, IPTC) is stripped unless kept on request;
 *    kept EXIF has its orientation reset, since the pixels are oriented.
 */
import sharp from 'sharp';
import { outputOf } from '@shared/media/formats';
import type { RenderOptions } from '@shared/media/render-options';
import { ENCODERS, FORMAT_MIME } from './convert';
import { decodeHeicWithin, type HeicDecoder } from './heic-pool';
import { decodeOptions, readHeader, sharpError, tooManyPixels } from './sharp';

export interface RenderResult {
  data: Buffer;
  mime: string;
  width: number;
  height: number;
}

export async function renderImage(
  input: Buffer,
  options: RenderOptions,
  maxInputPixels: number,
  decoder: HeicDecoder,
): Promise<RenderResult> {
  const meta = await readHeader(input, maxInputPixels);
  const width = meta.width;
  const height = meta.pageHeight ?? meta.height;
  if (width * height > maxInputPixels) throw tooManyPixels(width, height, maxInputPixels);

  const heic = meta.format === 'heif' && meta.compression === 'hevc';
  let image = heic
    ? sharp(await decodeHeicWithin(decoder, input, meta, undefined), decodeOptions(maxInputPixels))
    : sharp(input, { ...decodeOptions(maxInputPixels), autoOrient: true });
  if (options.width !== null || options.height !== null) {
    const alpha = outputOf(options.format).alpha ? 0 : 1;
    image = image.resize({
      width: options.width ?? undefined,
      height: options.height ?? undefined,
      fit: options.fit,
      withoutEnlargement: true,
      background: { r: 255, g: 255, b: 255, alpha },
    });
  }
  if (options.format === 'jpeg' && meta.hasAlpha) image = image.flatten({ background: '#ffffff' });
  if (options.keepMetadata) image = image.keepMetadata();
  try {
    const { data, info } = await ENCODERS[options.format](
      image,
      options.quality ?? undefined,
    ).toBuffer({ resolveWithObject: true });
    return { data, mime: FORMAT_MIME[options.format], width: info.width, height: info.height };
  } catch (err) {
    throw await sharpError(err, input, maxInputPixels);
  }
}
