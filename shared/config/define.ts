/**
 * The kinds of value a configuration variable may hold (integer, boolean, one
 * of a list, text, URL, or a value read by its own parser). Each kind carries
 * its parser, its default as it would be written in the environment, and the
 * words the reference (docs/configuration.md) uses for its type: the table in
 * variables.ts declares a variable once with one of them.
 */
import { z } from 'zod';

/** What a number counts, so the reference can show `8388608` as 8 MiB and `900000` as 15 min. */
export type Unit = 'bytes' | 'ms' | 's';

export interface Kind<T> {
  /** Parses a set value; an unset or empty variable gets `default`, parsed the same way. */
  readonly schema: z.ZodType<T>;
  /** The value used when the variable is unset or empty, as written in the environment. */
  readonly default: string | undefined;
  /** The type in the reference's words (markdown). */
  readonly type: string;
  readonly unit?: Unit;
}

const KiB = 1024;
const units: Record<Unit, { name: string; steps: [number, string][] }> = {
  bytes: {
    name: 'bytes',
    steps: [
      [KiB ** 3, 'GiB'],
      [KiB ** 2, 'MiB'],
      [KiB, 'KiB'],
    ],
  },
  ms: {
    name: 'milliseconds',
    steps: [
      [86_400_000, 'days'],
      [3_600_000, 'h'],
      [60_000, 'min'],
      [1_000, 's'],
    ],
  },
  s: {
    name: 'seconds',
    steps: [
      [86_400, 'days'],
      [3_600, 'h'],
      [60, 'min'],
    ],
  },
};

/** `n` in a readable unit when it is a round amount of one (`8 MiB`, `15 min`), else undefined. */
export function readable(n: number, unit: Unit | undefined): string | undefined {
  if (unit === undefined) return undefined;
  const step = units[unit].steps.find(([size]) => n >= size && n % size === 0);
  return step ? `${n / step[0]} ${step[1]}` : undefined;
}

/** `n` as written, with its readable amount beside it when there is one: `8388608 (8 MiB)`. */
export function amount(n: number, unit: Unit | undefined): string {
  const r = readable(n, unit);
  return r === undefined ? String(n) : `${n} (${r})`;
}

const emptyToUndefined = (v: unknown): unknown =>
  typeof v === 'string' && v.trim() === '' ? undefined : v;

/** A variable's whole schema: an empty value counts as unset, and unset takes the default. */
export const variableSchema = <T>(kind: Kind<T>) =>
  z.preprocess((v) => emptyToUndefined(v) ?? kind.default, kind.schema);

/** A parser's result, or its error's message as the variable's issue. */
function parsedOrIssue<T>(parse: () => T, ctx: z.RefinementCtx): T {
  try {
    return parse();
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: err instanceof Error ? err.message : String(err) });
    return z.NEVER;
  }
}

/** A whole number within `min`…`max` (default: at least 1). */
export function integer(o: {
  default: number;
  min?: number;
  max?: number;
  unit?: Unit;
}): Kind<number> {
  const { min = 1, max = Number.MAX_SAFE_INTEGER, unit } = o;
  const range =
    max === Number.MAX_SAFE_INTEGER
      ? `at least ${amount(min, unit)}`
      : `${amount(min, unit)} to ${amount(max, unit)}`;
  return {
    schema: z.coerce.number().int().min(min).max(max),
    default: String(o.default),
    type: `integer${unit ? ` (${units[unit].name})` : ''}, ${range}`,
    ...(unit ? { unit } : {}),
  };
}

/** A number within `min`…`max`, fractions allowed. */
export function decimal(o: { default: number; min: number; max: number }): Kind<number> {
  return {
    schema: z.coerce.number().min(o.min).max(o.max),
    default: String(o.default),
    type: `number, ${o.min} to ${o.max}`,
  };
}

/** `true` or `false`. */
export function boolean(def: boolean): Kind<boolean> {
  return {
    schema: z
      .enum(['true', 'false'], { message: 'must be true or false' })
      .transform((v) => v === 'true'),
    default: String(def),
    type: '`true` or `false`',
  };
}

/** One of `values` (`message`: the issue when it is none of them; zod's own otherwise). */
export function oneOf<const V extends readonly [string, ...string[]]>(
  values: V,
  o: { default: V[number]; message?: string },
): Kind<V[number]> {
  return {
    schema: z.enum(values, o.message === undefined ? undefined : { message: o.message }),
    default: o.default,
    type: `one of ${values.map((v) => `\`${v}\``).join(', ')}`,
  };
}

interface TextOptions {
  /** The shape a value must have, and the issue when it has not. */
  pattern?: [RegExp, string];
  /**
   * A check of the whole value that throws an Error whose message is the
   * issue; unlike a parser's, its issue does not stop the checks across
   * variables, which then report their own problems too.
   */
  check?: (raw: string) => unknown;
  /** The type in the reference's words, when not plain text. */
  type?: string;
}

/** Text, unset when empty. */
export function text(o?: TextOptions): Kind<string | undefined>;
/** Text with a default. */
export function text(o: TextOptions & { default: string }): Kind<string>;
export function text(o: TextOptions & { default?: string } = {}): Kind<string | undefined> {
  let shaped = o.pattern ? z.string().regex(o.pattern[0], o.pattern[1]) : z.string();
  const check = o.check;
  if (check) {
    shaped = shaped.superRefine((raw, ctx) => {
      parsedOrIssue(() => check(raw), ctx);
    });
  }
  return {
    schema: o.default === undefined ? shaped.optional() : shaped,
    default: o.default,
    type: o.type ?? 'text',
  };
}

/** A URL of one of `protocols`, unset when empty. */
export function url(protocols: readonly string[]): Kind<string | undefined> {
  return {
    schema: z
      .string()
      .url()
      .refine((v) => protocols.some((p) => v.startsWith(`${p}:`)), {
        message: `must be a ${protocols.join(' or ')} URL`,
      })
      .optional(),
    default: undefined,
    type: `${protocols.join(' or ')} URL`,
  };
}

interface ParsedOptions<T> {
  /** The variable's value from its text; throws an Error whose message is the variable's issue. */
  parse: (raw: string) => T;
  type: string;
}

/** A value read by its own parser, with a default (an empty default: what `parse('')` gives). */
export function parsed<T>(o: ParsedOptions<T> & { default: string }): Kind<T>;
/** A value read by its own parser, unset when empty. */
export function parsed<T>(o: ParsedOptions<T>): Kind<T | undefined>;
export function parsed<T>(o: ParsedOptions<T> & { default?: string }): Kind<T | undefined> {
  const schema = z.string().transform((raw, ctx) => parsedOrIssue(() => o.parse(raw), ctx));
  return {
    schema: o.default === undefined ? schema.optional() : schema,
    default: o.default,
    type: o.type,
  };
}
