/**
 * Renders (GET /media/render): the options a client may ask for, their
 * normalized form, the canonical hash that names a variant, and where the
 * variant is stored. The API and the worker both derive a variant's key from
 * here, so they always agree on it.
 *
 * A variant of the source `<key>` is the object `.variants/<key>/<hash>.<ext>`
 * (`.variants/` cannot be an organization slug nor a merged PDF's
 * `merged_<ms>.pdf`, so it never collides with a media key), where `<hash>`
 * is a hash of the normalized options: two requests that ask for the same
 * pixels name the same variant, whatever order or spelling they used.
 */
import { createHash } from 'node:crypto';
import { CONVERT_FORMATS, type ConvertFormat } from './formats';

export const RENDER_FITS = ['cover', 'contain', 'inside', 'outside', 'fill'] as const;
export type RenderFit = (typeof RENDER_FITS)[number];

/** A format as a client may ask for it: a convert format, or `auto` (from the Accept header). */
export type RenderFormat = ConvertFormat | 'auto';

/** Where every variant is stored: `<prefix><source key>/<hash>.<ext>`. */
export const VARIANTS_PREFIX = '.variants/';

/** Encoder qualities used when none is asked (see worker/image/convert.ts); asking for them names the same variant. */
export const DEFAULT_QUALITY: Readonly<Partial<Record<ConvertFormat, number>>> = {
  jpeg: 80,
  webp: 80,
  avif: 50,
};

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
}

/** A named set of options from configuration (RENDER_PRESETS), such as a thumbnail. */
export interface RenderPreset {
  width?: number | undefined;
  height?: number | undefined;
  fit?: RenderFit | undefined;
  format?: RenderFormat | undefined;
  quality?: number | undefined;
  keepMetadata?: boolean | undefined;
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

/** The options' canonical text (versioned: a change of meaning gets new hashes). */
export function canonicalRenderOptions(o: RenderOptions): string {
  return [
    'v1',
    `w=${o.width ?? ''}`,
    `h=${o.height ?? ''}`,
    `fit=${o.fit}`,
    `f=${o.format}`,
    `q=${o.quality ?? ''}`,
    `m=${o.keepMetadata ? 'keep' : 'strip'}`,
  ].join(';');
}

/** The variant's id: a hash of the canonical options (22 base64url characters, 132 bits). */
export function variantId(o: RenderOptions): string {
  return createHash('sha256').update(canonicalRenderOptions(o)).digest('base64url').slice(0, 22);
}

const EXT: Readonly<Record<ConvertFormat, string>> = {
  jpeg: 'jpg',
  png: 'png',
  webp: 'webp',
  avif: 'avif',
  tiff: 'tiff',
  gif: 'gif',
};

/** Where every variant of `sourceKey` is stored (deleting the source lists and removes them). */
export function variantPrefix(sourceKey: string): string {
  return `${VARIANTS_PREFIX}${sourceKey}/`;
}

export function variantKey(sourceKey: string, o: RenderOptions): string {
  return `${variantPrefix(sourceKey)}${variantId(o)}.${EXT[o.format]}`;
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

/** Parses RENDER_PRESETS (a JSON object: name → {w, h, fit, format, q, metadata}); throws a message. */
export function parseRenderPresets(raw: string): Record<string, RenderPreset> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new Error('must be a JSON object of presets, such as {"thumbnail":{"w":200,"h":200}}');
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new Error('must be a JSON object of presets');
  }
  const presets: Record<string, RenderPreset> = {};
  for (const [name, value] of Object.entries(parsed as Record<string, unknown>)) {
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(name)) {
      throw new Error(`preset name "${name}": letters, digits, _ and - only`);
    }
    const v = (value ?? {}) as Record<string, unknown>;
    const fail = (what: string) => {
      throw new Error(`preset "${name}": ${what}`);
    };
    const known = ['w', 'h', 'fit', 'format', 'q', 'metadata'];
    const unknown = Object.keys(v).filter((k) => !known.includes(k));
    if (typeof value !== 'object' || unknown.length) {
      fail(`unknown field(s) ${unknown.join(', ')} (known: ${known.join(', ')})`);
    }
    const dim = (k: 'w' | 'h') => {
      const d = v[k];
      if (d === undefined) return undefined;
      if (typeof d !== 'number' || !Number.isInteger(d) || d < 1)
        fail(`${k} must be a positive integer`);
      return d as number;
    };
    const fit = v.fit;
    if (fit !== undefined && !(RENDER_FITS as readonly unknown[]).includes(fit)) {
      fail(`fit must be one of ${RENDER_FITS.join(', ')}`);
    }
    const format = v.format;
    if (
      format !== undefined &&
      format !== 'auto' &&
      !(CONVERT_FORMATS as readonly unknown[]).includes(format)
    ) {
      fail(`format must be auto or one of ${CONVERT_FORMATS.join(', ')}`);
    }
    const q = v.q;
    if (q !== undefined && !(typeof q === 'number' && Number.isInteger(q) && q >= 1 && q <= 100)) {
      fail('q must be an integer from 1 to 100');
    }
    if (v.metadata !== undefined && v.metadata !== 'keep' && v.metadata !== 'strip') {
      fail('metadata must be keep or strip');
    }
    presets[name] = {
      width: dim('w'),
      height: dim('h'),
      fit: fit as RenderFit | undefined,
      format: format as RenderFormat | undefined,
      quality: q as number | undefined,
      keepMetadata: v.metadata === undefined ? undefined : v.metadata === 'keep',
    };
  }
  return presets;
}
