/**
 * The render parameters' one schema (shared/media/render-params.ts): a query
 * of GET /media/render, the `render` object of POST /media/sign and a
 * RENDER_PRESETS entry are read alike, accepting the same values and
 * refusing the others in the same words; read parameters resolve to the
 * options a variant is named by.
 */
import { parseInput } from '../../api/http/validate';
import { RenderService } from '../../api/services/render.service';
import type { Config } from '../../shared/config';
import { AppError } from '../../shared/errors';
import {
  parseRenderPresets,
  readRenderParams,
  renderQuerySchema,
  resolveRenderOptions,
  type RenderPreset,
} from '../../shared/media/render-params';

const presets: Record<string, RenderPreset> = {
  thumb: { width: 200, height: 200, fit: 'cover' },
  webp: { width: 64, format: 'webp' },
};

const settings: Config['render'] = {
  maxWidth: 1000,
  maxHeight: 800,
  sizes: [],
  presets,
  requireSigned: false,
  maxVariants: 3,
  handoffMaxBytes: 0,
  sourceCacheBytes: 0,
};

const maxOutputPixels = { gif: 40_000, avif: 90_000 };

const renders = new RenderService({
  variants: { find: () => Promise.reject(new Error('no variants in this test')) },
  jobs: {
    runShared: () => Promise.reject(new Error('no job in this test')),
    forgetShared: () => Promise.resolve(),
  },
  store: { get: () => Promise.reject(new Error('no store')) },
  settings,
  maxOutputPixels,
});

/** The render route's query schema under the same settings. */
const renderQuery = renderQuerySchema({ ...settings, maxOutputPixels });

/** What GET /media/render says of a query (a signed one: no size list), as `field: message`. */
function asQuery(params: Record<string, string | number>): string[] {
  const query = Object.fromEntries(Object.entries(params).map(([k, v]) => [k, String(v)]));
  try {
    const { params: asked } = parseInput(renderQuery, { media: 'acme/a.jpg', ...query });
    renders.options({ params: asked, accept: undefined }, true);
    return [];
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    return (err.details ?? []).map((d) => `${String(d.field)}: ${d.message}`);
  }
}

/** What POST /media/sign says of the same parameters as a JSON object (fields named `render.<x>`). */
function asSignObject(params: Record<string, unknown>): string[] {
  try {
    renders.check(params, 'render');
    return [];
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    return (err.details ?? []).map(
      (d) => `${String(d.field).replace(/^render\./, '')}: ${d.message}`,
    );
  }
}

/** What RENDER_PRESETS says of them as a preset (within the same maxima), or [] when accepted. */
function asPreset(params: Record<string, unknown>): string[] {
  try {
    parseRenderPresets(JSON.stringify({ p: params }), settings);
    return [];
  } catch (err) {
    return [(err as Error).message];
  }
}

describe('one schema for the query, the sign object and a preset', () => {
  const accepted: Record<string, string | number>[] = [
    {},
    { w: 1000, h: 800 },
    { w: '48', format: 'jpg', metadata: 'keep' },
    { format: 'AUTO', fit: 'Contain', w: 10, h: 10 },
    { format: 'jpeg', q: 100 },
    { metadata: 'strip', q: '1' },
  ];
  it.each(accepted)('all accept %p', (params) => {
    expect(asQuery(params)).toEqual([]);
    expect(asSignObject(params)).toEqual([]);
    expect(asPreset(params)).toEqual([]);
  });

  const refused: [Record<string, string | number>, string][] = [
    [{ w: 1001 }, 'w: w is over the limit of 1000 (RENDER_MAX_WIDTH)'],
    [{ h: 801 }, 'h: h is over the limit of 800 (RENDER_MAX_HEIGHT)'],
    [{ w: 0 }, 'w: w must be an integer from 1 to 1000'],
    [{ w: 1.5 }, 'w: w must be an integer from 1 to 1000'],
    [{ w: '12px' }, 'w: w must be an integer from 1 to 1000'],
    [{ q: 101 }, 'q: q is over the limit of 100 (quality)'],
    [{ fit: 'stretch' }, 'fit: fit must be one of cover, contain, inside, outside, fill'],
    [
      { format: 'bmp' },
      'format: format must be one of auto, jpeg, jpg, png, webp, gif, avif, tiff',
    ],
    [{ metadata: 'all' }, 'metadata: metadata must be one of keep, strip'],
  ];
  it.each(refused)('all refuse %p in the same words', (params, problem) => {
    expect(asQuery(params)).toEqual([problem]);
    expect(asSignObject(params)).toEqual([problem]);
    expect(asPreset(params)).toEqual([`preset "p": ${problem.slice(problem.indexOf(': ') + 2)}`]);
  });

  it('read presets in the query and the sign object alike', () => {
    const withPresets: Record<string, string>[] = [
      { preset: 'thumb' },
      { preset: 'thumb', format: 'webp' },
    ];
    for (const params of withPresets) {
      expect(asQuery(params)).toEqual([]);
      expect(asSignObject(params)).toEqual([]);
    }
    const refusals = [
      [{ preset: 'nope' }, 'preset: unknown preset "nope" (RENDER_PRESETS: thumb, webp)'],
      [{ preset: 'thumb', w: 10 }, 'w: w cannot be given with a preset'],
      [{ preset: 'webp', format: 'png' }, 'format: preset "webp" fixes the format'],
    ] as const;
    for (const [params, problem] of refusals) {
      expect(asQuery(params)).toEqual([problem]);
      expect(asSignObject(params)).toEqual([problem]);
    }
  });

  it('refuse what is no parameter in a JSON object, and values that are neither text nor number', () => {
    expect(asSignObject({ size: 10 })).toEqual(['render: unknown field(s): size']);
    expect(asSignObject({ w: true })).toEqual(['w: w is a string or a number']);
    expect(asPreset({ w: true })).toEqual(['preset "p": w is a string or a number']);
    // A query carries other parameters (media, disposition, the signature's).
    expect(asQuery({ disposition: 'inline' })).toEqual([]);
    expect(readRenderParams({ w: ['1', '2'] }, settings).problems).toEqual([
      { field: 'w', message: 'w must be given once' },
    ]);
  });
});

describe('resolving read parameters', () => {
  const rules = { presets, maxOutputPixels: { gif: 40_000, avif: 90_000 } };
  const resolve = (params: Record<string, string | number>, accept?: string) =>
    resolveRenderOptions(readRenderParams(params, settings).params, rules, accept);

  it("takes a preset's options, and the format asked beside one that fixes none", () => {
    expect(resolve({ preset: 'thumb', format: 'png' })).toEqual({
      options: {
        width: 200,
        height: 200,
        fit: 'cover',
        format: 'png',
        quality: null,
        keepMetadata: false,
      },
      negotiated: false,
      problems: [],
    });
    expect(resolve({ preset: 'webp' }, 'image/avif').options.format).toBe('webp');
  });

  it('negotiates auto from Accept, and reads jpg as jpeg', () => {
    expect(resolve({ w: 10 }, 'image/avif,*/*')).toMatchObject({
      options: { format: 'avif' },
      negotiated: true,
    });
    expect(resolve({ w: 10, format: 'JPG', q: 80 })).toEqual({
      options: {
        width: 10,
        height: null,
        fit: 'cover',
        format: 'jpeg',
        quality: null,
        keepMetadata: false,
      },
      negotiated: false,
      problems: [],
    });
  });

  it("holds a contain render (its size is its box) to the slow formats' pixel bounds", () => {
    const box = { w: 201, h: 200, fit: 'contain' };
    expect(resolve({ ...box, format: 'gif' }).problems).toEqual([
      {
        field: 'w',
        message: 'a GIF of 201 × 200 is over the limit of 40,000 pixels (MAX_GIF_OUTPUT_PIXELS)',
      },
    ]);
    expect(resolve({ ...box, fit: 'cover', format: 'gif' }).problems).toEqual([]);
    expect(resolve({ ...box, format: 'png' }).problems).toEqual([]);
    // auto does not choose AVIF past its bound (301 × 300 > 90,000).
    expect(
      resolve({ w: 301, h: 300, fit: 'contain' }, 'image/avif,image/webp').options.format,
    ).toBe('webp');
    expect(
      resolve({ w: 300, h: 300, fit: 'contain' }, 'image/avif,image/webp').options.format,
    ).toBe('avif');
  });
});

describe("a contain box over a slow format's bound", () => {
  it('is refused alike by the render, the sign object and a preset', () => {
    const params = { w: 201, h: 200, fit: 'contain', format: 'gif' };
    const problem =
      'w: a GIF of 201 × 200 is over the limit of 40,000 pixels (MAX_GIF_OUTPUT_PIXELS)';
    expect(asQuery(params)).toEqual([problem]);
    expect(asSignObject(params)).toEqual([problem]);
    expect(() =>
      parseRenderPresets(JSON.stringify({ p: params }), {
        ...settings,
        maxOutputPixels: { gif: 40_000, avif: 90_000 },
      }),
    ).toThrow(`preset "p": ${problem.slice(3)}`);
  });
});
