/**
 * The encoders: each output format's settings, the effort that drops as the
 * output grows, and the pixel bounds of the two slow encoders (GIF's palette
 * quantisation, AVIF's AV1 encoder), which libvips cannot stop once they have
 * started: bounding their pixels bounds what a job past its time limit still
 * costs. The figures (default quality, effort tiers, which formats are
 * bounded and by which setting) are the formats table's
 * (shared/media/formats.ts, with `outputTooLarge`, the refusal past a
 * bound); measured times per format, size and effort: docs/renders.md, "Slow
 * encoders" (bench/slow-encoders.ts).
 */
import type { Sharp } from 'sharp';
import {
  CONVERT_FORMATS,
  effortFor,
  MEDIA_FORMATS,
  type ConvertFormat,
  type EffortTier,
  type TieredFormat,
} from '@shared/media/formats';

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

/**
 * Encoder settings by output pixels (the formats table's `effort`): the
 * first tier whose `upTo` the output is within. A large output gets the
 * settings that keep its encode to about a second of one core at the pixel
 * bounds, on the machine of the measurements (docs/renders.md, "Slow
 * encoders"; noise and a photo, the worse of the two):
 *
 * - webp (effort 0-6, sharp's default 4): 4 up to 4 MP, then 2 (about half
 *   the time, files within 5 % of effort 4). libvips stops WebP at the time
 *   limit anyway.
 * - avif (effort 0-9): 2 up to 2 MP (0.25 s per MP of a photo, 0.4 of
 *   noise), then 0 (0.05-0.08 s per MP; files within 4 % of effort 2).
 * - gif (libimagequant's effort 1-10, sharp's default 7, with full
 *   dithering): 7 up to 0.25 MP (0.4 s), then 1 (a third of the time: a
 *   12 MP photo 3.2 s instead of 7.5 s, a slightly coarser palette).
 */
export const ENCODER_TIERS: Readonly<Record<TieredFormat, readonly EffortTier[]>> = {
  webp: MEDIA_FORMATS.webp.output.effort,
  avif: MEDIA_FORMATS.avif.output.effort,
  gif: MEDIA_FORMATS.gif.output.effort,
};

/** The settings `format` is encoded with at `pixels` output pixels. */
export const tierFor = (format: TieredFormat, pixels: number): EffortTier =>
  effortFor(format, pixels);

/** The table's quality of a lossy format when none is asked. */
const quality = (format: 'jpeg' | 'webp' | 'avif', asked: number | undefined) =>
  asked ?? MEDIA_FORMATS[format].output.quality;

/**
 * Encoder settings per target format, for an output of `pixels` pixels; the
 * default quality and the effort are the formats table's. `quality` (1-100)
 * is the encoder's own scale where the format is lossy, and ignored where it
 * would change nothing or silently make the output lossy (png, tiff, gif:
 * the table gives them no quality).
 *
 * - jpeg: quality 80 by default, 4:2:0 chroma up to quality 90 (sharp's
 *   defaults, without mozjpeg's slower trellis settings).
 * - png: zlib level 6, lossless; quality ignored (sharp would otherwise
 *   quantise to a palette, a lossy PNG nobody asked for).
 * - webp: quality 80, effort by pixels (`ENCODER_TIERS`).
 * - avif: quality 50 (about JPEG 80 visually), 4:2:0 chroma, effort by
 *   pixels: sharp's defaults (effort 4, 4:4:4) took ten times as long as
 *   effort 2 for slightly smaller files. Phone and camera JPEGs are 4:2:0
 *   already, so 4:4:4 only spends time and bytes.
 * - tiff: lossless LZW with horizontal prediction (the most widely readable
 *   TIFF compression); quality ignored. sharp's default would be JPEG-in-TIFF,
 *   lossy and poorly supported by older readers.
 * - gif: libimagequant palette with full dithering, effort by pixels;
 *   quality ignored.
 */
export const ENCODERS: Record<
  ConvertFormat,
  (image: Sharp, quality: number | undefined, pixels: number) => Sharp
> = {
  jpeg: (image, asked) => image.jpeg({ quality: quality('jpeg', asked) }),
  png: (image) => image.png({ compressionLevel: 6 }),
  webp: (image, asked, pixels) =>
    image.webp({ quality: quality('webp', asked), effort: tierFor('webp', pixels).effort }),
  avif: (image, asked, pixels) =>
    image.avif({
      quality: quality('avif', asked),
      effort: tierFor('avif', pixels).effort,
      chromaSubsampling: '4:2:0',
    }),
  tiff: (image) => image.tiff({ compression: 'lzw', predictor: 'horizontal' }),
  gif: (image, _quality, pixels) => image.gif({ effort: tierFor('gif', pixels).effort }),
};
