/**
 * Render options (shared/media/render-options.ts) and the bounds a render
 * request meets (its query read by the route's schema, then
 * RenderService.options): normalization makes equal requests
 * name one variant, Accept negotiation, the configuration parsers, and the
 * 400s of RENDER_MAX_WIDTH/HEIGHT, RENDER_SIZES, RENDER_REQUIRE_SIGNED and
 * RENDER_MAX_VARIANTS, each naming its bound.
 */
import { parseInput } from '../../api/http/validate';
import { RenderService } from '../../api/services/render.service';
import type { Config } from '../../shared/config';
import { AppError } from '../../shared/errors';
import {
  negotiateFormat,
  normalizeRenderOptions,
  parseRenderSizes,
  sourceOfVariantKey,
  variantId,
  variantKey,
} from '../../shared/media/render-options';
import { parseRenderPresets, renderQuerySchema } from '../../shared/media/render-params';
import type { MediaRecord } from '../../shared/repositories/media.repository';

const base = {
  width: 100,
  height: null,
  fit: 'cover',
  format: 'webp',
  quality: null,
  keepMetadata: false,
} as const;

describe('normalized options and variant keys', () => {
  it('names one variant for requests that ask for the same pixels', () => {
    const a = normalizeRenderOptions(base);
    // fit does not matter with one side; the format's default quality is no quality.
    const b = normalizeRenderOptions({ ...base, fit: 'fill', quality: 80 });
    expect(variantId(b)).toBe(variantId(a));
    // png has no quality: ignored.
    expect(variantId(normalizeRenderOptions({ ...base, format: 'png', quality: 10 }))).toBe(
      variantId(normalizeRenderOptions({ ...base, format: 'png' })),
    );
    expect(variantId(normalizeRenderOptions({ ...base, quality: 60 }))).not.toBe(variantId(a));
    expect(variantId(normalizeRenderOptions({ ...base, height: 50, fit: 'fill' }))).not.toBe(
      variantId(normalizeRenderOptions({ ...base, height: 50, fit: 'cover' })),
    );
  });

  it('stores a variant under .variants/<source key>/ and finds the source back', () => {
    const key = variantKey('acme/photos/cat-AbC.jpg', normalizeRenderOptions(base));
    expect(key).toMatch(/^\.variants\/acme\/photos\/cat-AbC\.jpg\/[A-Za-z0-9_-]{22}\.webp$/);
    expect(sourceOfVariantKey(key)).toBe('acme/photos/cat-AbC.jpg');
    expect(sourceOfVariantKey('acme/photos/cat-AbC.jpg')).toBeNull();
  });

  it.each([
    ['image/avif,image/webp,*/*', 'avif'],
    ['image/webp', 'webp'],
    ['image/avif;q=0, image/webp;q=0.5', 'webp'],
    ['*/*', 'jpeg'],
    [undefined, 'jpeg'],
  ])('Accept %p picks %s', (accept, format) => {
    expect(negotiateFormat(accept)).toBe(format);
  });

  it('parses RENDER_SIZES and RENDER_PRESETS, naming what is wrong', () => {
    expect(parseRenderSizes('200x200, 400x,x300')).toEqual([
      { width: 200, height: 200 },
      { width: 400, height: null },
      { width: null, height: 300 },
    ]);
    expect(() => parseRenderSizes('x')).toThrow('"x" is not a size');
    expect(() => parseRenderSizes('0x10')).toThrow('"0x10"');
    expect(parseRenderPresets('{"t":{"w":10,"format":"auto","metadata":"keep"}}')).toEqual({
      t: { width: 10, format: 'auto', keepMetadata: true },
    });
    expect(() => parseRenderPresets('{"t":{"size":10}}')).toThrow(
      'preset "t": unknown field(s): size (known: w, h, fit, format, q, metadata)',
    );
    expect(() => parseRenderPresets('[]')).toThrow('JSON object');
  });
});

const settings = (over: Partial<Config['render']> = {}): Config['render'] => ({
  maxWidth: 1000,
  maxHeight: 800,
  sizes: [],
  presets: { thumb: { width: 200, height: 200, fit: 'cover' } },
  requireSigned: false,
  maxVariants: 3,
  handoffMaxBytes: 0,
  sourceCacheBytes: 0,
  ...over,
});

const maxOutputPixels = { gif: 4_194_304, avif: 16_777_216 };
/** The schema the render route reads each service's queries with (its settings' maxima and presets). */
const queryOf = new Map<RenderService, ReturnType<typeof renderQuerySchema>>();

function service(over: Partial<Config['render']> = {}, variants = 0) {
  const record = { key: 'acme/a.jpg', mimetype: 'image/jpeg' } as MediaRecord;
  const svc = new RenderService({
    variants: { find: () => Promise.resolve({ record, variant: null, variants }) },
    jobs: {
      runShared: () => Promise.reject(new Error('no job in this test')),
      forgetShared: () => Promise.resolve(),
    },
    store: { get: () => Promise.reject(new Error('no store')) },
    settings: settings(over),
    maxOutputPixels,
  });
  queryOf.set(svc, renderQuerySchema({ ...settings(over), maxOutputPixels }));
  return svc;
}

/** A render query as the route reads it. */
const read = (svc: RenderService, query: Record<string, string>) =>
  parseInput(queryOf.get(svc)!, { media: 'acme/a.jpg', ...query });

/** The 400's details, or [] when the request is accepted. */
function refusal(svc: RenderService, query: Record<string, string>, signed = false): string[] {
  try {
    svc.options({ ...read(svc, query), accept: undefined }, signed);
    return [];
  } catch (err) {
    if (!(err instanceof AppError) || err.status !== 400) throw err;
    return (err.details ?? []).map((d) => `${String(d.field)}: ${d.message}`);
  }
}

describe('bounds', () => {
  it('refuses sizes over the maxima, naming them', () => {
    const svc = service();
    expect(refusal(svc, { w: '1001' })).toEqual([
      'w: w is over the limit of 1000 (RENDER_MAX_WIDTH)',
    ]);
    expect(refusal(svc, { h: '801' })).toEqual([
      'h: h is over the limit of 800 (RENDER_MAX_HEIGHT)',
    ]);
    expect(refusal(svc, { w: '1000', h: '800', q: '40' })).toEqual([]);
  });

  it('with RENDER_SIZES, a bearer request asks for a listed size or a preset, without q', () => {
    const svc = service({
      sizes: [
        { width: 400, height: null },
        { width: 100, height: 100 },
      ],
    });
    expect(refusal(svc, { w: '400' })).toEqual([]);
    expect(refusal(svc, { w: '100', h: '100', fit: 'contain' })).toEqual([]);
    expect(refusal(svc, { preset: 'thumb' })).toEqual([]);
    expect(refusal(svc, { w: '401' })).toEqual([
      'w: 401x is not an allowed size (RENDER_SIZES: 400x, 100x100)',
    ]);
    expect(refusal(svc, { w: '400', q: '50' })[0]).toContain('q comes from a preset');
    // A signed request may ask for any size within the maxima.
    expect(refusal(svc, { w: '401', q: '50' }, true)).toEqual([]);
  });

  it('with RENDER_REQUIRE_SIGNED and no sizes, a bearer request asks for presets only', () => {
    const svc = service({ requireSigned: true });
    expect(refusal(svc, { preset: 'thumb', format: 'webp' })).toEqual([]);
    expect(refusal(svc, { w: '200' })[0]).toContain('RENDER_REQUIRE_SIGNED');
    expect(refusal(svc, { w: '200' }, true)).toEqual([]);
  });

  it('refuses a new variant past RENDER_MAX_VARIANTS', async () => {
    const svc = service({}, 3);
    const refused = await svc
      .render(
        {
          organization: { id: 1, slug: 'acme', name: 'Acme', quotaBytes: null, rootFolderId: 2 },
          requestId: 'r',
        },
        { ...read(svc, { w: '10' }), accept: undefined },
      )
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(AppError);
    expect((refused as AppError).status).toBe(400);
    expect((refused as AppError).details?.[0]?.message).toContain('RENDER_MAX_VARIANTS 3');
  });
});
