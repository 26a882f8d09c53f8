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
 * from encode times of noisy images, the worst case for every encoder; each
 * format's own (pixels per byte of a source, the output pixels from which an
 * encode is heavy, rate-limit units per megapixel) are in the formats table.
 */
import { formatOfMime, outputOf, type ConvertFormat } from './formats';
import type { RenderOptions } from './render-options';

const MP = 1_000_000;

/** Source pixels from which decoding alone is heavy. */
export const HEAVY_SOURCE_PIXELS = 24 * MP;

/** A merge's inputs from which it is heavy: their total bytes, or their count. */
export const HEAVY_MERGE = { bytes: 32 * 1024 * 1024, inputs: 20 } as const;

/** Estimated pixels of a source from its size and type. */
export function sourcePixels(source: { bytes: number; mimetype: string }): number {
  return source.bytes * (formatOfMime(source.mimetype)?.pixelsPerByte ?? 1);
}

/** Whether encoding `pixels` as `format` is heavy, or decoding the source is. */
function heavyImage(format: ConvertFormat, outputPixels: number, source: number): boolean {
  return outputPixels >= outputOf(format).heavyPixels || source >= HEAVY_SOURCE_PIXELS;
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
  const extra = Math.floor((pixels / MP) * outputOf(options.format).unitsPerMegapixel);
  return Math.min(MAX_RENDER_UNITS, 1 + extra);
}
