/**
 * How much work a job will be, estimated before it is queued from what the
 * API knows: the source's size and type, the output's format and requested
 * dimensions. A *heavy* job may hold a worker slot for seconds: the fair gate
 * (shared/queue/fair-gate.ts) caps how many of one organization's heavy jobs
 * run at once, so slots stay free for other organizations' work.
 *
 * The estimate errs towards heavy: a light job taken for heavy only waits
 * for its organization's other heavy jobs; a heavy job taken for light can
 * hold a slot others needed. Its figures (docs/jobs.md, "Fair queues") come
 * from encode times of noisy images, the worst case for every encoder.
 */
import type { ConvertFormat } from './formats';
import type { RenderOptions } from './render-options';

const MP = 1_000_000;

/**
 * Pixels a source of this type holds per byte, at most for ordinary images:
 * compressed photos (JPEG, WebP, AVIF, HEIC) about 1-3, lossless ones fewer.
 * A noisy photo holds fewer pixels per byte but costs more per pixel to
 * decode, so bytes × this tracks decode work either way.
 */
const PIXELS_PER_BYTE: Readonly<Record<string, number>> = {
  'image/jpeg': 2,
  'image/webp': 3,
  'image/avif': 4,
  'image/heic': 4,
  'image/heif': 4,
  'image/png': 1,
  'image/gif': 2,
  'image/tiff': 0.5,
};

/** Output pixels from which an encode is heavy, per format (seconds of work at sharp's defaults). */
export const HEAVY_OUTPUT_PIXELS: Readonly<Record<ConvertFormat, number>> = {
  gif: 0.25 * MP,
  avif: 0.25 * MP,
  webp: 4 * MP,
  png: 4 * MP,
  tiff: 8 * MP,
  jpeg: 16 * MP,
};

/** Source pixels from which decoding alone is heavy. */
export const HEAVY_SOURCE_PIXELS = 24 * MP;

/** A merge's inputs from which it is heavy: their total bytes, or their count. */
export const HEAVY_MERGE = { bytes: 32 * 1024 * 1024, inputs: 20 } as const;

/** Estimated pixels of a source from its size and type. */
export function sourcePixels(source: { bytes: number; mimetype: string }): number {
  return source.bytes * (PIXELS_PER_BYTE[source.mimetype] ?? 1);
}

/** Whether encoding `pixels` as `format` is heavy, or decoding the source is. */
function heavyImage(format: ConvertFormat, outputPixels: number, source: number): boolean {
  return outputPixels >= HEAVY_OUTPUT_PIXELS[format] || source >= HEAVY_SOURCE_PIXELS;
}

/**
 * The pixels a render asks for: both sides given, their product; one side,
 * its square (no render is enlarged, so the source bounds it too); none, the
 * source's.
 */
export function renderPixels(
  options: Pick<RenderOptions, 'width' | 'height'>,
  source: { bytes: number; mimetype: string },
): number {
  const { width, height } = options;
  const asked =
    width !== null && height !== null
      ? width * height
      : width !== null || height !== null
        ? (width ?? height!) ** 2
        : Infinity;
  return Math.min(asked, sourcePixels(source));
}

export function renderIsHeavy(
  options: Pick<RenderOptions, 'width' | 'height' | 'format'>,
  source: { bytes: number; mimetype: string },
): boolean {
  return heavyImage(options.format, renderPixels(options, source), sourcePixels(source));
}

export function convertIsHeavy(
  format: ConvertFormat,
  source: { bytes: number; mimetype: string },
): boolean {
  const pixels = sourcePixels(source);
  return heavyImage(format, pixels, pixels);
}

export function mergeIsHeavy(inputs: readonly { bytes: number }[]): boolean {
  const bytes = inputs.reduce((n, i) => n + i.bytes, 0);
  return bytes >= HEAVY_MERGE.bytes || inputs.length >= HEAVY_MERGE.inputs;
}

/** Output megapixels a render's rate-limit cost counts per unit, by format (slow encoders count more). */
const UNITS_PER_MEGAPIXEL: Readonly<Record<ConvertFormat, number>> = {
  gif: 4,
  avif: 4,
  webp: 1,
  png: 1,
  tiff: 1,
  jpeg: 0.5,
};

/** The most a render costs (as much as a merge). */
export const MAX_RENDER_UNITS = 50;

/**
 * A render's rate-limit cost (docs/api.md, "Rate limits"): 1, plus one unit
 * per megapixel it asks for (four for GIF and AVIF, half for JPEG), rounded
 * down, at most MAX_RENDER_UNITS. The pixels are those of the query: `w × h`,
 * one side squared, or `maxPixels` (the render maxima) when it names no size.
 * A thumbnail costs 1; a 1600 px GIF 11; a full-size AVIF 50.
 */
export function renderUnits(
  options: Pick<RenderOptions, 'width' | 'height' | 'format'>,
  maxPixels: number,
): number {
  const { width, height } = options;
  const pixels =
    width !== null && height !== null
      ? width * height
      : width !== null || height !== null
        ? Math.min((width ?? height!) ** 2, maxPixels)
        : maxPixels;
  const extra = Math.floor((pixels / MP) * UNITS_PER_MEGAPIXEL[options.format]);
  return Math.min(MAX_RENDER_UNITS, 1 + extra);
}
