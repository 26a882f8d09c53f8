/**
 * The render parameters: the one schema of what a client may write to ask
 * for a render (`preset`, `w`, `h`, `fit`, `format`, `q`, `metadata`), read
 * the same way wherever they are written: the query of `GET /media/render`,
 * the `render` object of `POST /media/sign` and each entry of
 * `RENDER_PRESETS`. What one accepts the others accept, with the same words
 * for what they refuse; then how read parameters become the normalized
 * options a variant is named by (`resolveRenderOptions`, which holds a
 * `contain` render, whose size is its box, to the slow formats' pixel
 * bounds).
 *
 * Values are strings (a query) or numbers (JSON), an empty string is no
 * value, names and words are read in any case, `jpg` is `jpeg`.
 */
import { z } from 'zod';
import type { ErrorDetail } from '../errors';
import {
  CONVERT_FORMAT_NAMES,
  convertFormatOf,
  isPixelBounded,
  OUTPUT_PIXEL_SETTINGS,
  type ConvertFormat,
  type OutputPixelLimits,
} from './formats';
import {
  fixedRenderSize,
  negotiateFormat,
  normalizeRenderOptions,
  RENDER_FITS,
  type RenderFit,
  type RenderFormat,
  type RenderOptions,
} from './render-options';

/** The parameters' names, in the order a signed URL writes them. */
export const RENDER_PARAM_NAMES = [
  'preset',
  'w',
  'h',
  'fit',
  'format',
  'q',
  'metadata',
  'page',
] as const;
export type RenderParamName = (typeof RENDER_PARAM_NAMES)[number];

/** The names a preset may set: every parameter but `preset` and `page` (a page is the source's). */
export const PRESET_PARAM_NAMES = RENDER_PARAM_NAMES.filter(
  (n): n is Exclude<RenderParamName, 'preset' | 'page'> => n !== 'preset' && n !== 'page',
);

/** Parameters as a client writes them: each absent, a string, or (JSON) a number. */
export type RenderParamsInput = Partial<Record<RenderParamName, string | number | undefined>>;

/** A named set of options from configuration (RENDER_PRESETS), such as a thumbnail. */
export interface RenderPreset {
  width?: number | undefined;
  height?: number | undefined;
  fit?: RenderFit | undefined;
  format?: RenderFormat | undefined;
  quality?: number | undefined;
  keepMetadata?: boolean | undefined;
}

/** Parameters as read: every value checked, nothing resolved yet. */
export interface RenderParams extends RenderPreset {
  preset?: string | undefined;
  /** The page of a PDF source, 1-based (a PDF's renders default to page 1). */
  page?: number | undefined;
}

/** What the parameters are read against: the render maxima and the presets. */
export interface RenderParamRules {
  /** RENDER_MAX_WIDTH / RENDER_MAX_HEIGHT; without them a side is any positive integer. */
  maxWidth?: number | undefined;
  maxHeight?: number | undefined;
  /** RENDER_PRESETS; without them `preset` is no parameter (a preset's own options). */
  presets?: Readonly<Record<string, RenderPreset>> | undefined;
  /** The slow formats' pixel bounds (MAX_GIF/AVIF_OUTPUT_PIXELS); without them, none. */
  maxOutputPixels?: OutputPixelLimits | undefined;
}

export const RENDER_FORMAT_NAMES = ['auto', ...CONVERT_FORMAT_NAMES] as const;
const METADATA = ['keep', 'strip'] as const;
/** Options a preset fixes: none of them may be given beside it (`format` only when the preset has none). */
const PRESET_FIXES = ['w', 'h', 'fit', 'q', 'metadata'] as const;

/** One value: a string or a number as text, absent when empty; given twice (a query) or of another type, refused. */
const single = (name: string) =>
  z.unknown().transform((v, ctx): string | undefined => {
    if (v === undefined || v === '') return undefined;
    if (typeof v === 'string') return v;
    if (typeof v === 'number') return String(v);
    ctx.addIssue({
      code: 'custom',
      message: Array.isArray(v) ? `${name} must be given once` : `${name} is a string or a number`,
    });
    return z.NEVER;
  });

/** An integer from `min`, at most `max` (the bound named when it is a setting's). */
const integer = (name: string, min: number, max: number | undefined, bound: string) =>
  single(name).transform((v, ctx): number | undefined => {
    if (v === undefined) return undefined;
    const n = /^\d{1,6}$/.test(v) ? Number(v) : NaN;
    if (!Number.isInteger(n) || n < min) {
      const range = max === undefined ? `a positive integer` : `an integer from ${min} to ${max}`;
      ctx.addIssue({ code: 'custom', message: `${name} must be ${range}` });
    } else if (max !== undefined && n > max) {
      ctx.addIssue({ code: 'custom', message: `${name} is over the limit of ${max} (${bound})` });
    } else return n;
    return z.NEVER;
  });

/** One of `values`, in any case. */
const oneOf = <T extends string>(name: string, values: readonly T[]) =>
  single(name).transform((v, ctx): T | undefined => {
    const lower = v?.toLowerCase();
    if (lower === undefined) return undefined;
    if ((values as readonly string[]).includes(lower)) return lower as T;
    ctx.addIssue({ code: 'custom', message: `${name} must be one of ${values.join(', ')}` });
    return z.NEVER;
  });

/** The parameters' values as the schema reads them (in the client's names). */
interface ReadValues {
  preset?: string | undefined;
  w?: number | undefined;
  h?: number | undefined;
  fit?: RenderFit | undefined;
  format?: RenderFormat | undefined;
  q?: number | undefined;
  metadata?: (typeof METADATA)[number] | undefined;
  page?: number | undefined;
}

/**
 * The schema of the parameters under `rules`: each value on its own
 * (cross-parameter rules, a preset's, are `readRenderParams`'s). `strict`
 * refuses names that are no parameter (a JSON object); a query carries others.
 */
export function renderParamsSchema(
  rules: RenderParamRules,
  options: { strict?: boolean } = {},
): z.ZodType<ReadValues> {
  const presets = rules.presets;
  const shape = {
    preset: single('preset')
      .superRefine((name, ctx) => {
        if (name !== undefined && !(presets && Object.hasOwn(presets, name))) {
          const names = Object.keys(presets ?? {});
          ctx.addIssue({
            code: 'custom',
            message: `unknown preset "${name}" (RENDER_PRESETS: ${names.join(', ') || 'none'})`,
          });
        }
      })
      .optional(),
    w: integer('w', 1, rules.maxWidth, 'RENDER_MAX_WIDTH').optional(),
    h: integer('h', 1, rules.maxHeight, 'RENDER_MAX_HEIGHT').optional(),
    fit: oneOf<RenderFit>('fit', RENDER_FITS).optional(),
    format: oneOf('format', RENDER_FORMAT_NAMES)
      .transform((f): RenderFormat | undefined =>
        f === undefined || f === 'auto' ? f : convertFormatOf(f),
      )
      .optional(),
    q: integer('q', 1, 100, 'quality').optional(),
    metadata: oneOf('metadata', METADATA).optional(),
    page: integer('page', 1, undefined, 'pages').optional(),
  };
  // Without presets (a preset's own options), `preset` and `page` are no parameters.
  const schema = presets ? z.object(shape) : z.object(shape).omit({ preset: true, page: true });
  return options.strict ? schema.strict() : schema;
}

/** Each rules object's schemas, built once (a request reads its parameters with the settings' schema). */
const schemas = new WeakMap<RenderParamRules, Map<boolean, z.ZodType<ReadValues>>>();

function schemaFor(rules: RenderParamRules, strict: boolean): z.ZodType<ReadValues> {
  let built = schemas.get(rules);
  if (!built) schemas.set(rules, (built = new Map<boolean, z.ZodType<ReadValues>>()));
  let schema = built.get(strict);
  if (!schema) built.set(strict, (schema = renderParamsSchema(rules, { strict })));
  return schema;
}

/**
 * Reads render parameters under `rules` (the same rules object reads with
 * the same schema: do not change one once read with it): the parameters, or every problem
 * (each naming its parameter, in the words of the render's 400; a name that
 * is no parameter, with `strict`, as a problem without a field).
 */
export function readRenderParams(
  input: unknown,
  rules: RenderParamRules,
  options: { strict?: boolean } = {},
): { params: RenderParams; problems: ErrorDetail[] } {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    return { params: {}, problems: [{ message: 'render options are an object of options' }] };
  }
  const raw = input as Record<string, unknown>;
  const given = (name: string) => raw[name] !== undefined && raw[name] !== '';
  const problems: ErrorDetail[] = [];
  const parsed = schemaFor(rules, options.strict ?? false).safeParse(raw);
  for (const issue of parsed.error?.issues ?? []) {
    if (issue.code === 'unrecognized_keys') {
      problems.push({ message: `unknown field(s): ${issue.keys.join(', ')}` });
    } else problems.push({ field: String(issue.path[0] ?? ''), message: issue.message });
  }
  const presetName = rules.presets && given('preset') ? raw.preset : undefined;
  if (presetName !== undefined) {
    for (const name of PRESET_FIXES) {
      if (given(name)) {
        problems.push({ field: name, message: `${name} cannot be given with a preset` });
      }
    }
    const preset =
      typeof presetName === 'string' && Object.hasOwn(rules.presets!, presetName)
        ? rules.presets![presetName]
        : undefined;
    if (preset?.format !== undefined && given('format') && typeof presetName === 'string') {
      problems.push({ field: 'format', message: `preset "${presetName}" fixes the format` });
    }
  }
  if (!parsed.success || problems.length > 0) return { params: {}, problems };
  const v = parsed.data;
  const params: RenderParams = {
    preset: v.preset,
    width: v.w,
    height: v.h,
    fit: v.fit,
    format: v.format,
    quality: v.q,
    keepMetadata: v.metadata === undefined ? undefined : v.metadata === 'keep',
    page: v.page,
  };
  // Only what was asked (a preset compares equal to the options it was written with).
  return {
    params: Object.fromEntries(Object.entries(params).filter(([, value]) => value !== undefined)),
    problems: [],
  };
}

/** The render's query as read: the source's key and the parameters. */
export interface RenderQuery {
  key: string;
  params: RenderParams;
}

const MEDIA_REQUIRED = 'the media query parameter (a media key) is required';

/**
 * The schema of `GET /media/render`'s query under `rules`: `media` (a key,
 * given once) and the render parameters (`readRenderParams`; other names are
 * left alone: a signed URL's, say). Every problem is an issue naming its
 * parameter, in the words of the render's 400. What the caller may ask for
 * (a size list for bearer requests) is the render service's to say.
 */
export function renderQuerySchema(rules: RenderParamRules): z.ZodType<RenderQuery> {
  return z.unknown().transform((input, ctx): RenderQuery => {
    const query = (typeof input === 'object' && input !== null ? input : {}) as Record<
      string,
      unknown
    >;
    const problems: ErrorDetail[] = [];
    const media = query.media;
    const key = typeof media === 'string' && media !== '' ? media : undefined;
    if (media !== undefined && media !== '' && typeof media !== 'string') {
      problems.push({ field: 'media', message: 'media must be given once' });
    }
    if (key === undefined) problems.push({ field: 'media', message: MEDIA_REQUIRED });
    const read = readRenderParams(query, rules);
    problems.push(...read.problems);
    for (const { field, message } of problems) {
      ctx.addIssue({ code: 'custom', path: field === undefined ? [] : [field], message });
    }
    return problems.length > 0 || key === undefined ? z.NEVER : { key, params: read.params };
  });
}

/**
 * The normalized options read parameters ask for: a preset's options when
 * they name one (its format, or the one asked beside it), `auto` negotiated
 * from the Accept header (`negotiated`: the answer varies by it). A
 * `contain` render's size is its box, known before any job: over a slow
 * format's pixel bound it is a problem, and `auto` does not choose AVIF past
 * AVIF's (other sizes follow the source's, which the worker holds to the
 * bounds).
 */
export function resolveRenderOptions(
  params: RenderParams,
  rules: Pick<RenderParamRules, 'presets' | 'maxOutputPixels'>,
  accept: string | undefined,
): { options: RenderOptions; negotiated: boolean; problems: ErrorDetail[] } {
  const presets = rules.presets ?? {};
  const preset =
    params.preset !== undefined && Object.hasOwn(presets, params.preset)
      ? presets[params.preset]
      : undefined;
  const chosen: RenderPreset = preset ?? params;
  const asked: RenderFormat = preset?.format ?? params.format ?? 'auto';
  const negotiated = asked === 'auto';
  const size = {
    width: chosen.width ?? null,
    height: chosen.height ?? null,
    fit: chosen.fit ?? 'cover',
  };
  const box = fixedRenderSize(size);
  const limits = rules.maxOutputPixels;
  const over = (f: ConvertFormat) =>
    box !== null && limits !== undefined && isPixelBounded(f) && box.width * box.height > limits[f];
  const format: ConvertFormat = negotiated
    ? negotiateFormat(accept, { avif: !over('avif') })
    : asked;
  const problems: ErrorDetail[] = [];
  if (box && limits && isPixelBounded(format) && over(format)) {
    const limit = limits[format].toLocaleString('en-US');
    problems.push({
      field: preset ? 'preset' : 'w',
      message: `a ${format.toUpperCase()} of ${box.width} × ${box.height} is over the limit of ${limit} pixels (${OUTPUT_PIXEL_SETTINGS[format]})`,
    });
  }
  const options = normalizeRenderOptions({
    ...size,
    format,
    quality: chosen.quality ?? null,
    keepMetadata: chosen.keepMetadata ?? false,
    page: params.page,
  });
  return { options, negotiated, problems };
}

/** Bounds a preset is read within: RENDER_MAX_WIDTH and HEIGHT, the slow formats' pixel bounds, when known. */
export type PresetBounds = Pick<RenderParamRules, 'maxWidth' | 'maxHeight' | 'maxOutputPixels'>;

/** One preset's options read by the render's schema, or what is wrong with them. */
function readPreset(
  value: unknown,
  bounds: PresetBounds,
): { preset: RenderPreset; problems: string[] } {
  const { params, problems } = readRenderParams(
    value,
    { maxWidth: bounds.maxWidth, maxHeight: bounds.maxHeight },
    { strict: true },
  );
  // As a render asking for it would be: its box within the slow formats' bounds.
  if (problems.length === 0) {
    const rules = { maxOutputPixels: bounds.maxOutputPixels };
    problems.push(...resolveRenderOptions(params, rules, undefined).problems);
  }
  const known = `known: ${PRESET_PARAM_NAMES.join(', ')}`;
  return {
    preset: params,
    problems: problems.map((p) => (p.field === undefined ? `${p.message} (${known})` : p.message)),
  };
}

/**
 * Parses RENDER_PRESETS (a JSON object: name → every parameter but
 * `preset`), each entry read by the render's own schema (its sizes within
 * `bounds` when given: see `renderPresetProblems`); throws a message naming
 * the preset and what is wrong.
 */
export function parseRenderPresets(
  raw: string,
  bounds: PresetBounds = {},
): Record<string, RenderPreset> {
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
    const { preset, problems } = readPreset(value ?? {}, bounds);
    if (problems.length > 0) throw new Error(`preset "${name}": ${problems.join('; ')}`);
    presets[name] = preset;
  }
  return presets;
}

/**
 * What the render would refuse of parsed presets under these bounds (the
 * configuration reads RENDER_MAX_WIDTH and HEIGHT and the slow formats'
 * bounds beside the presets), each as `preset "<name>": <problem>`: the
 * presets read again, as the parameters that ask for them, by the render's
 * schema, and resolved as a render asking for them would be.
 */
export function renderPresetProblems(
  presets: Readonly<Record<string, RenderPreset>>,
  bounds: PresetBounds,
): string[] {
  return Object.entries(presets).flatMap(([name, preset]) =>
    readPreset(presetParams(preset), bounds).problems.map((p) => `preset "${name}": ${p}`),
  );
}

/** A preset as the parameters that ask for it (as RENDER_PRESETS writes it). */
function presetParams(preset: RenderPreset): RenderParamsInput {
  const keep = preset.keepMetadata;
  return {
    w: preset.width,
    h: preset.height,
    fit: preset.fit,
    format: preset.format,
    q: preset.quality,
    metadata: keep === undefined ? undefined : keep ? 'keep' : 'strip',
  };
}
