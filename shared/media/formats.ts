/**
 * The one formats table: every media type the service knows, with what each
 * is (MIME type and its aliases, the extension in keys, image or PDF),
 * whether it is accepted by default, whether renders and conversions read it
 * as a source and produce it as an output, its encoder's defaults (quality,
 * effort by output size, the pixel bound of the slow encoders), and its
 * weight in the work estimate. Also the refusal of an output over its
 * format's pixel bound.
 *
 * Everything else derives from it: the accepted-types setting's values
 * (shared/config.ts), type detection and key extensions (media-types.ts),
 * the convert and render formats and their names (jpg beside jpeg), the
 * encoders (worker/image/convert.ts), the default qualities a variant's hash
 * folds away (render-options.ts), the work estimate (work.ts) and the
 * OpenAPI enums (test/unit/openapi/formats.test.ts holds the spec to it).
 */
import { Errors, type AppError } from '../errors';

const MP = 1_000_000;

export type MediaKind = 'image' | 'pdf';

/** An encoder effort, for outputs of at most `upTo` pixels. */
export interface EffortTier {
  readonly upTo: number;
  readonly effort: number;
}

/** What a format is as an output of conversions and renders. */
export interface OutputSpec {
  /** Other names a client may give for it (lower case), listed after it. */
  readonly aliases: readonly string[];
  /** Encoder quality (1-100) when none is asked; null for lossless encoders, which ignore `q`. */
  readonly quality: number | null;
  /**
   * Encoder effort (CPU spent for smaller files, on the encoder's own scale)
   * by output pixels: the first tier whose `upTo` the output is within, so a
   * large output keeps its encode to about a second of one core at the pixel
   * bounds (docs/renders.md, "Slow encoders"; bench/slow-encoders.ts). Null
   * where the encoder has none set.
   */
  readonly effort: readonly EffortTier[] | null;
  /**
   * The setting bounding its output pixels (width × height), for the slow
   * encoders libvips cannot stop once started (GIF's palette quantisation,
   * AVIF's AV1); null when unbounded.
   */
  readonly pixelBound: string | null;
  /** Whether the format keeps transparency (else `contain` pads and flattens onto white). */
  readonly alpha: boolean;
  /**
   * Output pixels from which an encode is heavy (work.ts): seconds of work at
   * these settings. The slow encoders (GIF's palette, AVIF) reach it at a
   * quarter of a megapixel.
   */
  readonly heavyPixels: number;
  /** Rate-limit units a render costs per megapixel it asks for (work.ts `renderUnits`). */
  readonly unitsPerMegapixel: number;
}

export interface FormatSpec {
  /** The MIME type records carry. */
  readonly mime: string;
  /** Other MIME types a client may declare for it (a `mimetype` field, a data URL). */
  readonly mimeAliases: readonly string[];
  /** Extension used in keys. */
  readonly ext: string;
  readonly kind: MediaKind;
  /** In `ACCEPTED_TYPES` unless the setting narrows it. */
  readonly acceptedByDefault: boolean;
  /** A source renders and conversions read (sharp decodes it; HEIC through libheif). */
  readonly renderable: boolean;
  /** sharp's decoder name for it (`ImageMetadata.format`); null when sharp does not read it. */
  readonly decoder: string | null;
  /**
   * Pixels a source of this type holds per byte, at most for ordinary images
   * (work.ts): compressed photos about 1-3, lossless ones fewer. A noisy photo
   * holds fewer pixels per byte but costs more per pixel to decode, so bytes
   * × this tracks decode work either way. Null for non-images (counted as 1).
   */
  readonly pixelsPerByte: number | null;
  /** What it is as a conversion or render output; null when it is none. */
  readonly output: OutputSpec | null;
}

/**
 * Every type the service knows, in the order settings and messages list
 * them. SVG is never one (sharp would read it, with its external references).
 */
export const MEDIA_FORMATS = {
  jpeg: {
    mime: 'image/jpeg',
    mimeAliases: ['image/jpg', 'image/pjpeg'],
    ext: 'jpg',
    kind: 'image',
    acceptedByDefault: true,
    renderable: true,
    decoder: 'jpeg',
    pixelsPerByte: 2,
    output: {
      aliases: ['jpg'],
      quality: 80,
      effort: null,
      pixelBound: null,
      alpha: false,
      heavyPixels: 16 * MP,
      unitsPerMegapixel: 0.5,
    },
  },
  png: {
    mime: 'image/png',
    mimeAliases: [],
    ext: 'png',
    kind: 'image',
    acceptedByDefault: true,
    renderable: true,
    decoder: 'png',
    pixelsPerByte: 1,
    output: {
      aliases: [],
      quality: null,
      effort: null,
      pixelBound: null,
      alpha: true,
      heavyPixels: 4 * MP,
      unitsPerMegapixel: 1,
    },
  },
  webp: {
    mime: 'image/webp',
    mimeAliases: [],
    ext: 'webp',
    kind: 'image',
    acceptedByDefault: true,
    renderable: true,
    decoder: 'webp',
    pixelsPerByte: 3,
    output: {
      aliases: [],
      quality: 80,
      effort: [
        { upTo: 4 * MP, effort: 4 },
        { upTo: Infinity, effort: 2 },
      ],
      pixelBound: null,
      alpha: true,
      heavyPixels: 4 * MP,
      unitsPerMegapixel: 1,
    },
  },
  gif: {
    mime: 'image/gif',
    mimeAliases: [],
    ext: 'gif',
    kind: 'image',
    acceptedByDefault: true,
    renderable: true,
    decoder: 'gif',
    pixelsPerByte: 2,
    output: {
      aliases: [],
      quality: null,
      effort: [
        { upTo: MP / 4, effort: 7 },
        { upTo: Infinity, effort: 1 },
      ],
      pixelBound: 'MAX_GIF_OUTPUT_PIXELS',
      alpha: true,
      heavyPixels: 0.25 * MP,
      unitsPerMegapixel: 4,
    },
  },
  avif: {
    mime: 'image/avif',
    mimeAliases: [],
    ext: 'avif',
    kind: 'image',
    acceptedByDefault: true,
    renderable: true,
    decoder: 'heif',
    pixelsPerByte: 4,
    output: {
      aliases: [],
      quality: 50,
      effort: [
        { upTo: 2 * MP, effort: 2 },
        { upTo: Infinity, effort: 0 },
      ],
      pixelBound: 'MAX_AVIF_OUTPUT_PIXELS',
      alpha: true,
      heavyPixels: 0.25 * MP,
      unitsPerMegapixel: 4,
    },
  },
  tiff: {
    mime: 'image/tiff',
    mimeAliases: [],
    ext: 'tiff',
    kind: 'image',
    acceptedByDefault: true,
    renderable: true,
    decoder: 'tiff',
    pixelsPerByte: 0.5,
    output: {
      aliases: [],
      quality: null,
      effort: null,
      pixelBound: null,
      alpha: true,
      heavyPixels: 8 * MP,
      unitsPerMegapixel: 1,
    },
  },
  heic: {
    mime: 'image/heic',
    mimeAliases: ['image/heic-sequence'],
    ext: 'heic',
    kind: 'image',
    acceptedByDefault: true,
    renderable: true,
    decoder: 'heif',
    pixelsPerByte: 4,
    output: null,
  },
  heif: {
    mime: 'image/heif',
    mimeAliases: ['image/heif-sequence'],
    ext: 'heif',
    kind: 'image',
    acceptedByDefault: true,
    renderable: true,
    decoder: 'heif',
    pixelsPerByte: 4,
    output: null,
  },
  pdf: {
    mime: 'application/pdf',
    mimeAliases: ['application/x-pdf'],
    ext: 'pdf',
    kind: 'pdf',
    acceptedByDefault: true,
    renderable: false,
    decoder: null,
    pixelsPerByte: null,
    output: null,
  },
} as const satisfies Record<string, FormatSpec>;

export type MediaFormat = keyof typeof MEDIA_FORMATS;

/** The formats conversions and renders produce, by the name the job payload carries. */
export type ConvertFormat = {
  [F in MediaFormat]: (typeof MEDIA_FORMATS)[F]['output'] extends null ? never : F;
}[MediaFormat];

/** The output formats bounded by output pixels (the slow encoders: GIF and AVIF). */
export type PixelBoundedFormat = {
  [F in ConvertFormat]: (typeof MEDIA_FORMATS)[F]['output']['pixelBound'] extends null ? never : F;
}[ConvertFormat];

/** The output formats whose encoder's effort follows the output's size. */
export type TieredFormat = {
  [F in ConvertFormat]: (typeof MEDIA_FORMATS)[F]['output']['effort'] extends null ? never : F;
}[ConvertFormat];

/** Other names clients may give for an output format (`jpg`). */
type OutputAlias = (typeof MEDIA_FORMATS)[ConvertFormat]['output']['aliases'][number];

const ENTRIES = Object.entries(MEDIA_FORMATS) as [MediaFormat, FormatSpec][];

/** The conversion targets, in the table's order. */
export const CONVERT_FORMATS = ENTRIES.flatMap(([name, f]) =>
  f.output ? [name] : [],
) as unknown as readonly [ConvertFormat, ...ConvertFormat[]];

/** Every name a client may give for a target (lower case), each format's aliases beside it. */
export const CONVERT_FORMAT_NAMES = CONVERT_FORMATS.flatMap((name) => [
  name,
  ...MEDIA_FORMATS[name].output.aliases,
]) as unknown as readonly [ConvertFormat | OutputAlias, ...(ConvertFormat | OutputAlias)[]];

/** The target a client's name stands for (any case, aliases resolved); undefined for none. */
export function convertFormatOf(name: string): ConvertFormat | undefined {
  const n = name.toLowerCase();
  return CONVERT_FORMATS.find(
    (f) => f === n || (MEDIA_FORMATS[f].output.aliases as readonly string[]).includes(n),
  );
}

/** The output's description in the table (non-null for a convert format). */
export function outputOf(format: ConvertFormat): OutputSpec {
  return MEDIA_FORMATS[format].output;
}

/** Every MIME type the service can store (detected from bytes): the values ACCEPTED_TYPES may list. */
export const KNOWN_MIME_TYPES: readonly string[] = ENTRIES.map(([, f]) => f.mime);

/** ACCEPTED_TYPES's default. */
export const DEFAULT_ACCEPTED_TYPES: readonly string[] = ENTRIES.flatMap(([, f]) =>
  f.acceptedByDefault ? [f.mime] : [],
);

const BY_MIME: ReadonlyMap<string, FormatSpec> = new Map(
  ENTRIES.flatMap(([, f]) => [f.mime, ...f.mimeAliases].map((m) => [m, f] as const)),
);

/** The table's entry of a MIME type or one of its aliases (any case); undefined for none. */
export function formatOfMime(mime: string): FormatSpec | undefined {
  return BY_MIME.get(mime.trim().toLowerCase());
}

/** Whether renders and conversions read a stored record of this type. */
export function isRenderableType(mime: string): boolean {
  return formatOfMime(mime)?.renderable ?? false;
}

/** sharp's decoder names of the types the service reads as images (one per decoder). */
export const IMAGE_DECODERS: readonly string[] = [
  ...new Set(ENTRIES.flatMap(([, f]) => (f.renderable && f.decoder ? [f.decoder] : []))),
];

/** The formats bounded by output pixels, in the table's order. */
export const PIXEL_BOUNDED_FORMATS = CONVERT_FORMATS.filter(
  (f) => outputOf(f).pixelBound !== null,
) as readonly PixelBoundedFormat[];

/** The most output pixels (width × height) each bounded format is encoded to; config `limits.maxOutputPixels`. */
export type OutputPixelLimits = Record<PixelBoundedFormat, number>;

/** The setting that sets each bound (named in refusals). */
export const OUTPUT_PIXEL_SETTINGS = Object.fromEntries(
  PIXEL_BOUNDED_FORMATS.map((f) => [f, outputOf(f).pixelBound]),
) as Readonly<Record<PixelBoundedFormat, string>>;

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

/** The encoder effort of `format` for an output of `pixels` pixels (its first tier within). */
export function effortFor(format: TieredFormat, pixels: number): EffortTier {
  const tiers = outputOf(format).effort!;
  return tiers.find((t) => pixels <= t.upTo) ?? tiers[tiers.length - 1]!;
}
