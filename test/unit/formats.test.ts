/**
 * The formats table (shared/media/formats.ts) and what derives from it: the
 * convert formats and their names, the accepted-types setting, detection's
 * types and key extensions, the encoders and their default qualities (which
 * a variant's hash folds away), the decoders sharp may use, the work
 * estimate and the queue names' counterpart, the job map.
 */
import sharp from 'sharp';
import { loadConfig, type ConfigError } from '../../shared/config';
import {
  CONVERT_FORMAT_NAMES,
  CONVERT_FORMATS,
  convertFormatOf,
  DEFAULT_ACCEPTED_TYPES,
  IMAGE_DECODERS,
  isRenderableType,
  KNOWN_MIME_TYPES,
  MEDIA_FORMATS,
  OUTPUT_PIXEL_SETTINGS,
  outputOf,
  PIXEL_BOUNDED_FORMATS,
  type ConvertFormat,
} from '../../shared/media/formats';
import { KNOWN_TYPES, normaliseMime } from '../../shared/media/media-types';
import {
  DEFAULT_QUALITY,
  normalizeRenderOptions,
  variantId,
  variantKey,
} from '../../shared/media/render-options';
import { renderUnits, sourcePixels } from '../../shared/media/work';
import { ENCODER_TIERS, ENCODERS, FORMAT_EXT, FORMAT_MIME } from '../../worker/image/encoders';

const formats = Object.entries(MEDIA_FORMATS);

describe('the convert formats', () => {
  it('are the entries with an output, in the table order, each alias beside its format', () => {
    expect(CONVERT_FORMATS).toEqual(formats.filter(([, f]) => f.output).map(([name]) => name));
    expect(CONVERT_FORMATS).toEqual(['jpeg', 'png', 'webp', 'gif', 'avif', 'tiff']);
    expect(CONVERT_FORMAT_NAMES).toEqual(['jpeg', 'jpg', 'png', 'webp', 'gif', 'avif', 'tiff']);
  });

  it('resolve a client name in any case, aliases included, and nothing else', () => {
    expect(convertFormatOf('JPG')).toBe('jpeg');
    expect(convertFormatOf('Avif')).toBe('avif');
    for (const none of ['heic', 'pdf', 'svg', 'jpegg', ''])
      expect(convertFormatOf(none)).toBeUndefined();
  });

  it('have the type and key extension of their table entry', () => {
    for (const format of CONVERT_FORMATS) {
      expect([format, FORMAT_MIME[format], FORMAT_EXT[format]]).toEqual([
        format,
        MEDIA_FORMATS[format].mime,
        MEDIA_FORMATS[format].ext,
      ]);
    }
    expect(FORMAT_EXT.jpeg).toBe('jpg');
  });
});

describe('the encoders', () => {
  // A fixed busy pattern (sharp's own noise differs on each call).
  const pixels = Buffer.from(Array.from({ length: 48 * 32 * 3 }, (_, i) => (i * 7919) % 251));
  const image = () => sharp(pixels, { raw: { width: 48, height: 32, channels: 3 } });

  it('exist for exactly the convert formats', () => {
    expect(Object.keys(ENCODERS).sort()).toEqual([...CONVERT_FORMATS].sort());
  });

  it.each(CONVERT_FORMATS.filter((f) => outputOf(f).quality !== null))(
    '%s encodes at the table quality when none is asked (so asking for it names the same variant)',
    async (format) => {
      const quality = outputOf(format).quality!;
      const pixels = 48 * 32;
      const byDefault = await ENCODERS[format](image(), undefined, pixels).toBuffer();
      const asked = await ENCODERS[format](image(), quality, pixels).toBuffer();
      const other = await ENCODERS[format](image(), quality === 90 ? 60 : 90, pixels).toBuffer();
      expect(byDefault.equals(asked)).toBe(true);
      expect(byDefault.equals(other)).toBe(false);
      expect(DEFAULT_QUALITY[format]).toBe(quality);
      const options = {
        width: 10,
        height: null,
        fit: 'cover',
        keepMetadata: false,
        format,
      } as const;
      expect(variantId(normalizeRenderOptions({ ...options, quality }))).toBe(
        variantId(normalizeRenderOptions({ ...options, quality: null })),
      );
    },
  );

  it("take their effort by output size, and the slow formats' pixel bounds, from the table", () => {
    for (const [format, tiers] of Object.entries(ENCODER_TIERS)) {
      expect([format, tiers]).toEqual([format, outputOf(format as ConvertFormat).effort]);
    }
    expect(Object.keys(ENCODER_TIERS).sort()).toEqual(
      CONVERT_FORMATS.filter((f) => outputOf(f).effort !== null).sort(),
    );
    expect(PIXEL_BOUNDED_FORMATS).toEqual(CONVERT_FORMATS.filter((f) => outputOf(f).pixelBound));
    expect(OUTPUT_PIXEL_SETTINGS).toEqual({
      gif: 'MAX_GIF_OUTPUT_PIXELS',
      avif: 'MAX_AVIF_OUTPUT_PIXELS',
    });
  });

  it('give the lossless formats no default quality: q names no other variant', () => {
    for (const format of CONVERT_FORMATS.filter((f) => outputOf(f).quality === null)) {
      expect(DEFAULT_QUALITY[format]).toBeUndefined();
      const options = {
        width: 10,
        height: null,
        fit: 'cover',
        keepMetadata: false,
        format,
      } as const;
      expect(variantId(normalizeRenderOptions({ ...options, quality: 10 }))).toBe(
        variantId(normalizeRenderOptions({ ...options, quality: null })),
      );
    }
    expect(Object.keys(DEFAULT_QUALITY).sort()).toEqual(['avif', 'jpeg', 'webp']);
  });

  it('store variants under their format key extension', () => {
    const options = normalizeRenderOptions({
      width: 10,
      height: null,
      fit: 'cover',
      format: 'jpeg',
      quality: null,
      keepMetadata: false,
    });
    expect(variantKey('acme/a.png', options)).toMatch(/\.jpg$/);
  });
});

describe('the stored types', () => {
  it('are detection and key extension as the table says, aliases normalised', () => {
    expect(Object.keys(KNOWN_TYPES)).toEqual(KNOWN_MIME_TYPES);
    for (const [, f] of formats) {
      expect(KNOWN_TYPES[f.mime]).toEqual({ mime: f.mime, ext: f.ext, kind: f.kind });
      for (const alias of f.mimeAliases)
        expect(normaliseMime(` ${alias.toUpperCase()} `)).toBe(f.mime);
    }
    expect(normaliseMime('image/jpg')).toBe('image/jpeg');
    expect(normaliseMime('image/heic-sequence')).toBe('image/heic');
    expect(normaliseMime('Image/SVG+xml')).toBe('image/svg+xml');
  });

  it('are what ACCEPTED_TYPES may list, and its default', () => {
    expect(KNOWN_MIME_TYPES).toHaveLength(9);
    expect(loadConfig({}).limits.acceptedTypes).toEqual(DEFAULT_ACCEPTED_TYPES);
    expect(
      loadConfig({ ACCEPTED_TYPES: 'IMAGE/HEIF, application/pdf' }).limits.acceptedTypes,
    ).toEqual(['image/heif', 'application/pdf']);
    let problems: string[] = [];
    try {
      loadConfig({ ACCEPTED_TYPES: 'image/svg+xml' });
    } catch (err) {
      problems = (err as ConfigError).problems;
    }
    expect(problems).toEqual([
      `ACCEPTED_TYPES: must list types from: ${KNOWN_MIME_TYPES.join(', ')} (unknown: image/svg+xml)`,
    ]);
  });

  it('are read by renders and conversions when they are images', () => {
    expect(isRenderableType('image/heic')).toBe(true);
    expect(isRenderableType('application/pdf')).toBe(false);
    expect(isRenderableType('image/svg+xml')).toBe(false);
    expect(IMAGE_DECODERS).toEqual(['jpeg', 'png', 'webp', 'gif', 'heif', 'tiff']);
  });
});

describe('the work estimate', () => {
  it("counts a source's pixels by its type's pixels per byte (1 when it has none)", () => {
    expect(sourcePixels({ bytes: 1000, mimetype: 'image/tiff' })).toBe(500);
    expect(sourcePixels({ bytes: 1000, mimetype: 'image/heic' })).toBe(4000);
    expect(sourcePixels({ bytes: 1000, mimetype: 'application/pdf' })).toBe(1000);
  });

  it("costs a render the output's units per megapixel", () => {
    const size = { width: 1000, height: 1000 };
    for (const format of CONVERT_FORMATS) {
      const units = Math.floor(outputOf(format).unitsPerMegapixel);
      expect([format, renderUnits({ ...size, format }, 1e8)]).toEqual([format, 1 + units]);
    }
  });
});
