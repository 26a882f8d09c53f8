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
 *  - The variant's size is worked out from the header first (`renderedSize`):
 *    a GIF or AVIF over its pixel bound is refused before any decoding, and
 *    the encoders' effort follows it (encoders.ts).
 */
import sharp, { type Sharp } from 'sharp';
import { outputOf, outputTooLarge } from '@shared/media/formats';
import { fixedRenderSize, type RenderOptions } from '@shared/media/render-options';
import type { ImageBounds } from './convert';
import { ENCODERS, FORMAT_MIME } from './encoders';
import { decodeHeicWithin, type HeicDecoder } from './heic-pool';
import { renderPdfPageWithin, type PdfRasterizer } from './pdf-pool';
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

export interface RenderResult {
  data: Buffer;
  mime: string;
  width: number;
  height: number;
  /** A PDF source's page count (read as its page was rendered). */
  pages?: number;
}

/**
 * The size sharp's resize gives a (oriented) source of `source` with these
 * options, never enlarged (`withoutEnlargement`): known before any pixel is
 * decoded, so a slow format's bound is checked from the header. Within a
 * pixel of sharp's own rounding (test/unit/render-size.test.ts).
 */
export function renderedSize(
  source: { width: number; height: number },
  o: Pick<RenderOptions, 'width' | 'height' | 'fit'>,
): { width: number; height: number } {
  const fixed = fixedRenderSize(o);
  if (fixed) return fixed;
  const { width: W, height: H } = source;
  const scaled = (s: number) => ({
    width: Math.max(1, Math.round(W * s)),
    height: Math.max(1, Math.round(H * s)),
  });
  if (o.width === null && o.height === null) return { width: W, height: H };
  if (o.height === null) return scaled(Math.min(1, o.width! / W));
  if (o.width === null) return scaled(Math.min(1, o.height / H));
  switch (o.fit) {
    case 'inside':
      return scaled(Math.min(1, o.width / W, o.height / H));
    case 'outside':
      return scaled(Math.min(1, Math.max(o.width / W, o.height / H)));
    case 'cover':
    case 'fill':
    case 'contain':
      // cover crops and fill stretches to the box, each side no larger than the source's.
      return { width: Math.min(o.width, W), height: Math.min(o.height, H) };
  }
}

/**
 * Renders a variant. Images over `maxInputPixels`, and GIF or AVIF variants
 * over their bound, are refused from the header; the work stops when the
 * job's time is up (`time`).
 */
export async function renderImage(
  input: Buffer,
  options: RenderOptions,
  bounds: ImageBounds,
  decoder: HeicDecoder,
  time: TimeLimit = {},
): Promise<RenderResult> {
  const { maxInputPixels } = bounds;
  const meta = await readHeader(input, maxInputPixels);
  const width = meta.width;
  const height = meta.pageHeight ?? meta.height;
  if (width * height > maxInputPixels) throw tooManyPixels(width, height, maxInputPixels);
  const heic = meta.format === 'heif' && meta.compression === 'hevc';
  const out = renderedSize(orientedSize(meta, heic), options);
  const tooLarge = outputTooLarge(options.format, out.width, out.height, bounds.maxOutputPixels);
  if (tooLarge) throw tooLarge;

  try {
    let image = heic
      ? sharp(await decodeHeicWithin(decoder, input, meta, time), decodeOptions(maxInputPixels))
      : sharp(input, { ...decodeOptions(maxInputPixels), autoOrient: true });
    image = resizeFor(image, options);
    if (options.format === 'jpeg' && meta.hasAlpha) {
      image = image.flatten({ background: '#ffffff' });
    }
    if (options.keepMetadata) image = image.keepMetadata();
    // Nothing more is started once the job's time is up (a long HEIC decode may have used it).
    time.signal?.throwIfAborted();
    const { data, info } = await withinTime(
      ENCODERS[options.format](image, options.quality ?? undefined, out.width * out.height),
      time,
    ).toBuffer({ resolveWithObject: true });
    return { data, mime: FORMAT_MIME[options.format], width: info.width, height: info.height };
  } catch (err) {
    throw timeoutError(err, time) ?? (await sharpError(err, input, maxInputPixels));
  }
}

/**
 * Renders a page of a PDF (`options.page`, 1-based) as a variant: the page
 * rasterized by PDFium on its threads at the scale the size asks for, its
 * bitmap within `maxPagePixels` (pdf-page.ts), then resized and encoded by
 * sharp as an image's render is. Stops when the job's time is up (the
 * rasterizing thread ended, sharp's timeout).
 */
export async function renderPdf(
  input: Buffer,
  options: RenderOptions,
  bounds: ImageBounds & { maxPagePixels: number },
  pdfs: PdfRasterizer,
  time: TimeLimit = {},
): Promise<RenderResult> {
  const request = {
    page: options.page ?? 1,
    target: { width: options.width, height: options.height, fit: options.fit },
    maxPixels: bounds.maxPagePixels,
  };
  const page = await renderPdfPageWithin(pdfs, input, request, time);
  const out = renderedSize(page, options);
  const tooLarge = outputTooLarge(options.format, out.width, out.height, bounds.maxOutputPixels);
  if (tooLarge) throw tooLarge;
  time.signal?.throwIfAborted();
  try {
    const raw = { width: page.width, height: page.height, channels: 4 as const };
    let image = sharp(page.rgba, { raw });
    image = resizeFor(image, options);
    // The page is opaque (rendered on white): no alpha channel in the variant.
    image = image.removeAlpha();
    const { data, info } = await withinTime(
      ENCODERS[options.format](image, options.quality ?? undefined, out.width * out.height),
      time,
    ).toBuffer({ resolveWithObject: true });
    return {
      data,
      mime: FORMAT_MIME[options.format],
      width: info.width,
      height: info.height,
      pages: page.pages,
    };
  } catch (err) {
    throw timeoutError(err, time) ?? err;
  }
}

/** The render's size and fit, never enlarging; letterboxing is white (transparent where the format has alpha). */
function resizeFor(image: Sharp, options: RenderOptions): Sharp {
  if (options.width === null && options.height === null) return image;
  const alpha = outputOf(options.format).alpha ? 0 : 1;
  return image.resize({
    width: options.width ?? undefined,
    height: options.height ?? undefined,
    fit: options.fit,
    withoutEnlargement: true,
    background: { r: 255, g: 255, b: 255, alpha },
  });
}
