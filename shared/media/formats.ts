/**
 * The image formats a conversion can produce: the one list the API validates
 * against, the job payload is typed from, and the worker's encoders cover.
 * Clients may write `jpg` for `jpeg`. Also which of them are bounded by
 * output pixels, and by which setting.
 */
import { Errors, type AppError } from '../errors';

/** The conversion targets, by the name the job payload carries. */
export const CONVERT_FORMATS = ['jpeg', 'png', 'webp', 'avif', 'tiff', 'gif'] as const;

export type ConvertFormat = (typeof CONVERT_FORMATS)[number];

const [JPEG, ...OTHER_FORMATS] = CONVERT_FORMATS;

/** Every name a client may give (lower case), `jpg` beside `jpeg`, in the order messages list them. */
export const CONVERT_FORMAT_NAMES = [JPEG, 'jpg', ...OTHER_FORMATS] as const;

/**
 * The formats whose encoders are bounded by output pixels: GIF (palette
 * quantisation) and AVIF (AV1) are the slow ones, and libvips cannot stop
 * either once it has started (docs/renders.md, "Slow encoders").
 */
export const PIXEL_BOUNDED_FORMATS = ['gif', 'avif'] as const;

export type PixelBoundedFormat = (typeof PIXEL_BOUNDED_FORMATS)[number];

/** The most output pixels (width × height) each bounded format is encoded to; config `limits.maxOutputPixels`. */
export type OutputPixelLimits = Record<PixelBoundedFormat, number>;

/** The setting that sets each bound (named in refusals). */
export const OUTPUT_PIXEL_SETTINGS: Readonly<Record<PixelBoundedFormat, string>> = {
  gif: 'MAX_GIF_OUTPUT_PIXELS',
  avif: 'MAX_AVIF_OUTPUT_PIXELS',
};

export const isPixelBounded = (format: ConvertFormat): format is PixelBoundedFormat =>
  (PIXEL_BOUNDED_FORMATS as readonly string[]).includes(format);

/**
 * The refusal of an output of `width` × `height` over its format's bound
 * (422 OUTPUT_TOO_LARGE from a job, which knows the size from the source's
 * header), or undefined when within it or the format has none.
 */
export function outputTooLarge(
  format: ConvertFormat,
  width: number,
  height: number,
  limits: OutputPixelLimits,
): AppError | undefined {
  if (!isPixelBounded(format) || width * height <= limits[format]) return undefined;
  return Errors.outputTooLarge(
    format.toUpperCase(),
    width,
    height,
    limits[format],
    OUTPUT_PIXEL_SETTINGS[format],
  );
}
