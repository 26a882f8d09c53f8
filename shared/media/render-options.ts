/**
 * Renders (GET /media/render): the normalized options a render asks for
 * (what a client may write, and how it is read, is render-params.ts), the
 * canonical hash that names a variant, and where the variant is stored. The API and the worker both derive a variant's key from
 * here, so they always agree on it.
 *
 * A variant of the source `<key>` is the object `.variants/<key>/<hash>.<ext>`
 * (`.variants/` cannot be an organization slug nor a merged PDF's
 * `merged_<ms>.pdf`, so it never collides with a media key), where `<hash>`
 * is a hash of the normalized options: two requests that ask for the same
 * pixels name the same variant, whatever order or spelling they used.
 */
import { createHash } from 'node:crypto';
import { CONVERT_FORMATS, MEDIA_FORMATS, outputOf, type ConvertFormat } from './formats';

export const RENDER_FITS = ['cover', 'contain', 'inside', 'outside', 'fill'] as const;
export type RenderFit = (typeof RENDER_FITS)[number];

/** A format as a client may ask for it: a convert format, or `auto` (from the Accept header). */
export type RenderFormat = ConvertFormat | 'auto';

/** Where every variant is stored: `<prefix><source key>/<hash>.<ext>`. */
export const VARIANTS_PREFIX = '.variants/';

/**
 * Encoder qualities used when none is asked (the formats table's, which the
 * encoders use too); asking for them names the same variant.
 */
export const DEFAULT_QUALITY: Readonly<Partial<Record<ConvertFormat, number>>> = Object.fromEntries(
  CONVERT_FORMATS.flatMap((f) => {
    const quality = outputOf(f).quality;
    return quality === null ? [] : [[f, quality]];
  }),
);

/** What a render asks for, normalized: the job payload and the variant's hash are made from it. */
export interface RenderOptions {
  width: number | null;
  height: number | null;
  /** How both dimensions are met (sharp's `fit`); `cover` when fewer than two are given (all fits agree then). */
  fit: RenderFit;
  format: ConvertFormat;
  /** Encoder quality 1-100; null for the format's default (and for formats without one: png, tiff, gif). */
  quality: number | null;
  /** Keep EXIF/XMP/IPTC/ICC (GPS included); stripped by default. */
  keepMetadata: boolean;
  /** The page of a PDF source, 1-based (always set for a PDF, absent for an image). */
  page?: number;
}

/** An allowed size (RENDER_SIZES entry `<w>x<h>`, either side may be empty). */
export interface RenderSize {
  width: number | null;
  height: number | null;
}

export function normalizeRenderOptions(input: {
  width: number | null;
  height: number | null;
  fit: RenderFit;
  format: ConvertFormat;
  quality: number | null;
  keepMetadata: boolean;
  page?: number | undefined;
}): RenderOptions {
  const bothSides = input.width !== null && input.height !== null;
  const ownsQuality = Object.hasOwn(DEFAULT_QUALITY, input.format);
  const quality =
    ownsQuality && input.quality !== DEFAULT_QUALITY[input.format] ? input.quality : null;
  return {
    width: input.width,
    height: input.height,
    fit: bothSides ? input.fit : 'cover',
    format: input.format,
    quality,
    keepMetadata: input.keepMetadata,
    ...(input.page !== undefined ? { page: input.page } : {}),
  };
}

/**
 * The output's size when the options alone decide it: `contain` with both
 * sides pads to the box whatever the source (never enlarged, but padded), so
 * the API can hold it to a format's pixel bound before any job; otherwise
 * null (the size follows the source's, known to the worker only).
 */
export function fixedRenderSize(
  o: Pick<RenderOptions, 'width' | 'height' | 'fit'>,
): { width: number; height: number } | null {
  return o.fit === 'contain' && o.width !== null && o.height !== null
    ? { width: o.width, height: o.height }
    : null;
}

/**
 * The options' canonical text (versioned: a change of meaning gets new
 * hashes). A PDF page's number comes last, so an image's text (no page) is
 * what it was before pages existed.
 */
export function canonicalRenderOptions(o: RenderOptions): string {
  const page = o.page === undefined ? [] : [`p=${o.page}`];
  return [
    'v1',
    `w=${o.width ?? ''}`,
    `h=${o.height ?? ''}`,
    `fit=${o.fit}`,
    `f=${o.format}`,
    `q=${o.quality ?? ''}`,
    `m=${o.keepMetadata ? 'keep' : 'strip'}`,
    ...page,
  ].join(';');
}

/** The variant's id: a hash of the canonical options (22 base64url characters, 132 bits). */
export function variantId(o: RenderOptions): string {
  return createHash('sha256').update(canonicalRenderOptions(o)).digest('base64url').slice(0, 22);
}

/** Where every variant of `sourceKey` is stored (deleting the source lists and removes them). */
export function variantPrefix(sourceKey: string): string {
  return `${VARIANTS_PREFIX}${sourceKey}/`;
}

export function variantKey(sourceKey: string, o: RenderOptions): string {
  return `${variantPrefix(sourceKey)}${variantId(o)}.${MEDIA_FORMATS[o.format].ext}`;
}

/** The source key a variant key belongs to, or null when `key` is not a variant's. */
export function sourceOfVariantKey(key: string): string | null {
  if (!key.startsWith(VARIANTS_PREFIX)) return null;
  const slash = key.lastIndexOf('/');
  const source = key.slice(VARIANTS_PREFIX.length, slash);
  return slash > VARIANTS_PREFIX.length && source ? source : null;
}

/**
 * The format `auto` stands for, from the Accept header: AVIF when the client
 * names it, else WebP, else JPEG (every browser shows it). Only explicit types
 * count (a wildcard says nothing of what the client can decode); `q=0` refuses.
 */
export function negotiateFormat(
  accept: string | undefined,
  /** Leave AVIF out (its pixel bound refuses this render). */
  options: { avif?: boolean } = {},
): ConvertFormat {
  const accepted = new Set<string>();
  for (const part of (accept ?? '').split(',')) {
    const [type, ...params] = part.split(';').map((s) => s.trim().toLowerCase());
    const q = params.find((p) => p.startsWith('q='));
    if (type && !(q !== undefined && Number(q.slice(2)) === 0)) accepted.add(type);
  }
  if (accepted.has('image/avif') && options.avif !== false) return 'avif';
  if (accepted.has('image/webp')) return 'webp';
  return 'jpeg';
}

/** Parses RENDER_SIZES (`200x200,400x,x300`); throws a message naming the bad entry. */
export function parseRenderSizes(raw: string): RenderSize[] {
  const sizes: RenderSize[] = [];
  for (const entry of raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const m = /^(\d*)x(\d*)$/i.exec(entry);
    const side = (v: string | undefined) => (v ? Number(v) : null);
    const size = m ? { width: side(m[1]), height: side(m[2]) } : null;
    const valid = (v: number | null) => v === null || (Number.isInteger(v) && v >= 1);
    if (
      !size ||
      (size.width === null && size.height === null) ||
      !valid(size.width) ||
      !valid(size.height)
    ) {
      throw new Error(`"${entry}" is not a size: write <width>x<height>, either side may be empty`);
    }
    sizes.push(size);
  }
  return sizes;
}
