// MongoDB's own semantics for the query operators where mingo's differ:
// equality and ordering ($eq, $ne, $gt, $gte, $lt, $lte, $in, $nin) under the
// command's collation, with a Binary's subtype part of its value and numbers
// equal across BSON types; $all on a field that is not an array; and $type,
// which is answered from the typed document (where an Int32, a Double, a Long
// and an integral number are told apart) rather than the query form.
//
// mingo lets a context add operators but not replace its own, so a filter is
// rewritten first (rewriteFilter): these operators, and implicit equality
// (`{ a: 5 }`), become the `$__`-named operators below.

import type { Doc } from './bson-values';
import { bsonTag, isPlainObject, typedTwin } from './bson-values';
import type { StringComparer } from './bson-compare';
import {
  bsonEquals,
  bsonTypeAlias,
  compareBson,
  isMinOrMaxKey,
  sameTypeBracket,
  stringComparer,
} from './bson-compare';
import { ERRORS } from './command-errors';

type Predicate = (value: unknown) => boolean;
interface OperatorOptions {
  collation?: Doc;
}
type QueryOperatorFn = (
  selector: string,
  value: unknown,
  options: OperatorOptions,
) => (obj: unknown) => boolean;

const REWRITTEN: Record<string, string> = {
  $eq: '$__eq',
  $ne: '$__ne',
  $gt: '$__gt',
  $gte: '$__gte',
  $lt: '$__lt',
  $lte: '$__lte',
  $in: '$__in',
  $nin: '$__nin',
  $all: '$__all',
  $type: '$__type',
  $bitsAllSet: '$__bitsAllSet',
  $bitsAnySet: '$__bitsAnySet',
  $bitsAllClear: '$__bitsAllClear',
  $bitsAnyClear: '$__bitsAnyClear',
};

const isRegex = (value: unknown): boolean =>
  value instanceof RegExp || bsonTag(value) === 'BSONRegExp';

function rewriteOperators(expr: Doc): Doc {
  const out: Doc = {};
  for (const [op, operand] of Object.entries(expr)) {
    if (op === '$not' && isPlainObject(operand)) out.$not = rewriteOperators(operand);
    else if (op === '$elemMatch' && isPlainObject(operand))
      out.$elemMatch = rewriteElemMatch(operand);
    else out[REWRITTEN[op] ?? op] = operand;
  }
  return out;
}

const LOGICAL = new Set(['$and', '$or', '$nor']);

/** $elemMatch's criteria: operators on the element itself, or a query on an element document. */
function rewriteElemMatch(criteria: Doc): Doc {
  const keys = Object.keys(criteria);
  // $ref/$id/$db are the fields of a DBRef, not operators.
  if (keys.some((k) => DBREF_FIELDS.has(k))) return { $__dbref: criteria };
  const onValue = keys.length > 0 && keys.every((k) => k.startsWith('$') && !LOGICAL.has(k));
  return onValue ? rewriteOperators(criteria) : rewriteFilter(criteria);
}

const DBREF_FIELDS = new Set(['$ref', '$id', '$db']);

const isElemMatch = (item: unknown): item is Doc =>
  isPlainObject(item) && Object.keys(item).length === 1 && isPlainObject(item.$elemMatch);

/** The filter with the operators above renamed to the stand-in's versions (a new tree). */
export function rewriteFilter(filter: Doc): Doc {
  const out: Doc = {};
  const extra: Doc[] = [];
  for (const [key, entryValue] of Object.entries(filter)) {
    let value = entryValue;
    if (isPlainObject(value) && Array.isArray(value.$all) && value.$all.some(isElemMatch)) {
      // { a: { $all: [{ $elemMatch: c1 }, { $elemMatch: c2 }] } } is an $and of the $elemMatch.
      const items = value.$all as unknown[];
      if (!items.every(isElemMatch)) throw ERRORS.badValue('$all/$elemMatch has to be consistent');
      for (const item of items)
        extra.push({ [key]: { $elemMatch: rewriteElemMatch(item.$elemMatch as Doc) } });
      const rest = { ...value };
      delete rest.$all;
      if (Object.keys(rest).length === 0) continue;
      value = rest;
    }
    if ((key === '$and' || key === '$or' || key === '$nor') && Array.isArray(value)) {
      out[key] = (value as unknown[]).map((clause) =>
        isPlainObject(clause) ? rewriteFilter(clause) : clause,
      );
    } else if (key.startsWith('$')) {
      out[key] = value;
    } else if (isPlainObject(value) && Object.keys(value).some((k) => k.startsWith('$'))) {
      out[key] = Object.keys(value)[0] === '$regex' ? value : rewriteOperators(value);
    } else if (isRegex(value)) {
      out[key] = value;
    } else {
      out[key] = { $__eq: value };
    }
  }
  if (extra.length) out.$and = [...((out.$and as Doc[] | undefined) ?? []), ...extra];
  return out;
}

/** Rewrites the $match stages of a pipeline (and of the pipelines nested in it). */
export function rewritePipeline(stages: Doc[]): Doc[] {
  return stages.map((stage) => {
    const [name] = Object.keys(stage);
    const spec = name === undefined ? undefined : stage[name];
    if (name === '$match' && isPlainObject(spec)) return { $match: rewriteFilter(spec) };
    if ((name === '$lookup' || name === '$unionWith') && isPlainObject(spec)) {
      if (Array.isArray(spec.pipeline)) {
        return { [name]: { ...spec, pipeline: rewritePipeline(spec.pipeline as Doc[]) } };
      }
    }
    if (name === '$facet' && isPlainObject(spec)) {
      const facets: Doc = {};
      for (const [facet, pipeline] of Object.entries(spec)) {
        facets[facet] = Array.isArray(pipeline) ? rewritePipeline(pipeline as Doc[]) : pipeline;
      }
      return { $facet: facets };
    }
    return stage;
  });
}

// --- path traversal --------------------------------------------------------

interface PathValues {
  /** The values at the end of the path (arrays along the way traversed). */
  values: unknown[];
  /** True when some branch of the path ends at a missing field. */
  missing: boolean;
}

/** A DBRef as the document MongoDB stores: { $ref, $id, $db?, ...fields }. */
function dbrefDocument(value: unknown): Doc | undefined {
  if (bsonTag(value) !== 'DBRef') return undefined;
  const ref = value as { collection: string; oid: unknown; db?: string; fields?: Doc };
  return { $ref: ref.collection, $id: ref.oid, ...(ref.db ? { $db: ref.db } : {}), ...ref.fields };
}

function isDocument(value: unknown): value is Doc {
  return isPlainObject(value);
}

function collect(
  input: unknown,
  segments: string[],
  i: number,
  out: PathValues,
  typed: boolean,
): void {
  const twin = typed ? typedTwin(input) : input;
  const value = i < segments.length ? (dbrefDocument(twin) ?? twin) : twin;
  if (i === segments.length) {
    if (value === undefined) out.missing = true;
    else out.values.push(value);
    return;
  }
  const segment = segments[i]!;
  if (Array.isArray(value)) {
    let traversed = false;
    if (/^\d+$/.test(segment)) {
      const index = Number(segment);
      if (index < value.length) collect(value[index], segments, i + 1, out, typed);
      else out.missing = true;
      traversed = true;
    }
    for (const item of value as unknown[]) {
      const element = typed ? typedTwin(item) : item;
      if (isDocument(element) || dbrefDocument(element)) collect(item, segments, i, out, typed);
      else if (!traversed) out.missing = true;
    }
    if (value.length === 0 && !traversed) out.missing = true;
    return;
  }
  if (isDocument(value) && Object.prototype.hasOwnProperty.call(value, segment)) {
    collect(value[segment], segments, i + 1, out, typed);
    return;
  }
  out.missing = true;
}

function pathValues(obj: unknown, selector: string, typed = false): PathValues {
  const out: PathValues = { values: [], missing: false };
  collect(obj, selector.split('.'), 0, out, typed);
  return out;
}

/** A value or, for an array, the array and each of its elements (MongoDB's implicit traversal). */
function matchesAny(found: PathValues, test: Predicate, matchMissing: boolean): boolean {
  if (matchMissing && found.missing) return true;
  return found.values.some(
    (value) => test(value) || (Array.isArray(value) && (value as unknown[]).some(test)),
  );
}

const comparers = new WeakMap<Doc, StringComparer | undefined>();

function comparerFor(options: OperatorOptions): StringComparer | undefined {
  const { collation } = options;
  if (!collation) return undefined;
  if (!comparers.has(collation)) comparers.set(collation, stringComparer(collation));
  return comparers.get(collation);
}

function regexOf(value: unknown): RegExp {
  if (value instanceof RegExp) return value;
  const re = value as { pattern: string; options: string };
  return new RegExp(re.pattern, re.options.replace(/[^gimsuy]/g, ''));
}

function equalityPredicate(operand: unknown, strings: StringComparer | undefined): Predicate {
  return (value) => bsonEquals(value, operand, strings);
}

const eq: QueryOperatorFn = (selector, operand, options) => {
  const equal = equalityPredicate(operand, comparerFor(options));
  const nullish = operand === null;
  return (obj) => matchesAny(pathValues(obj, selector), equal, nullish);
};

const ne: QueryOperatorFn = (selector, operand, options) => {
  const match = eq(selector, operand, options);
  return (obj) => !match(obj);
};

function comparison(accept: (order: number) => boolean, orEqualNull: boolean): QueryOperatorFn {
  return (selector, operand, options) => {
    const strings = comparerFor(options);
    if (operand === null) {
      // { $gte: null } and { $lte: null } match null and missing; $gt/$lt nothing.
      return orEqualNull
        ? (obj) => matchesAny(pathValues(obj, selector), (v) => v === null, true)
        : () => false;
    }
    const unbracketed = isMinOrMaxKey(operand) !== undefined;
    const test: Predicate = (value) =>
      (unbracketed || sameTypeBracket(value, operand)) &&
      accept(compareBson(value, operand, strings));
    return (obj) => matchesAny(pathValues(obj, selector), test, false);
  };
}

function inPredicate(operand: unknown, strings: StringComparer | undefined): Predicate {
  if (!Array.isArray(operand)) throw ERRORS.badValue('$in needs an array');
  const tests: Predicate[] = (operand as unknown[]).map((item) => {
    if (isPlainObject(item) && Object.keys(item).some((k) => k.startsWith('$'))) {
      throw ERRORS.badValue('cannot nest $ under $in');
    }
    if (isRegex(item)) {
      const re = regexOf(item);
      return (value) =>
        (typeof value === 'string' && re.test(value)) ||
        (isRegex(value) && bsonEquals(value, item));
    }
    return equalityPredicate(item, strings);
  });
  return (value) => tests.some((test) => test(value));
}

const inOp: QueryOperatorFn = (selector, operand, options) => {
  const test = inPredicate(operand, comparerFor(options));
  const nullish = (operand as unknown[]).some((item) => item === null);
  return (obj) => matchesAny(pathValues(obj, selector), test, nullish);
};

const nin: QueryOperatorFn = (selector, operand, options) => {
  const match = inOp(selector, operand, options);
  return (obj) => !match(obj);
};

const all: QueryOperatorFn = (selector, operand, options) => {
  if (!Array.isArray(operand)) throw ERRORS.badValue('$all needs an array');
  const strings = comparerFor(options);
  // { a: { $all: [x, y] } } is { $and: [{ a: x }, { a: y }] } (an empty $all matches nothing).
  const clauses = (operand as unknown[]).map((item): ((found: PathValues) => boolean) => {
    if (isPlainObject(item) && Object.keys(item).some((k) => k.startsWith('$'))) {
      throw ERRORS.badValue('no $ expressions in $all');
    }
    if (isRegex(item)) {
      const re = regexOf(item);
      return (found) => matchesAny(found, (v) => typeof v === 'string' && re.test(v), false);
    }
    return (found) => matchesAny(found, equalityPredicate(item, strings), item === null);
  });
  return (obj) => {
    if (clauses.length === 0) return false;
    const found = pathValues(obj, selector);
    return clauses.every((clause) => clause(found));
  };
};

const TYPE_CODES: Record<number, string> = {
  1: 'double',
  2: 'string',
  3: 'object',
  4: 'array',
  5: 'binData',
  6: 'undefined',
  7: 'objectId',
  8: 'bool',
  9: 'date',
  10: 'null',
  11: 'regex',
  12: 'dbPointer',
  13: 'javascript',
  14: 'symbol',
  15: 'javascriptWithScope',
  16: 'int',
  17: 'timestamp',
  18: 'long',
  19: 'decimal',
  [-1]: 'minKey',
  127: 'maxKey',
};
const TYPE_ALIASES = new Set([...Object.values(TYPE_CODES), 'number']);
const NUMERIC_ALIASES = new Set(['int', 'long', 'double', 'decimal']);

function typeAliases(operand: unknown): string[] {
  const items = Array.isArray(operand) ? (operand as unknown[]) : [operand];
  if (items.length === 0) throw ERRORS.badValue('$type must match at least one type');
  return items.map((item) => {
    if (typeof item === 'string') {
      if (!TYPE_ALIASES.has(item)) throw ERRORS.badValue(`Unknown type name alias: ${item}`);
      return item;
    }
    const code = typeof item === 'number' ? item : Number((item as { value?: unknown })?.value);
    if (!Number.isInteger(code) || TYPE_CODES[code] === undefined) {
      throw ERRORS.badValue(`Invalid numerical type code: ${String(item)}`);
    }
    return TYPE_CODES[code];
  });
}

const type: QueryOperatorFn = (selector, operand) => {
  const wanted = typeAliases(operand);
  const matchesType = (value: unknown): boolean => {
    const alias = bsonTypeAlias(value);
    return wanted.some((w) => w === alias || (w === 'number' && NUMERIC_ALIASES.has(alias)));
  };
  return (obj) => {
    // Read the typed document (Int32 vs Double vs Long) where the query form has one.
    const found = pathValues(obj, selector, true);
    return found.values.some(
      (value) =>
        matchesType(value) ||
        (Array.isArray(value) &&
          !wanted.includes('array') &&
          (value as unknown[]).some(matchesType)),
    );
  };
};

// --- $bitsAllSet, $bitsAnySet, $bitsAllClear, $bitsAnyClear ---------------

function bytesOf(value: unknown): Uint8Array | undefined {
  if (value instanceof Uint8Array) return value;
  if (bsonTag(value) === 'Binary') {
    const binary = value as { buffer: Uint8Array; position: number };
    return binary.buffer.subarray(0, binary.position);
  }
  return undefined;
}

/** The bit positions of a $bits operand: a number's set bits, a list of positions, or BinData. */
function bitPositions(operator: string, operand: unknown): number[] {
  const bytes = bytesOf(operand);
  if (bytes) {
    const out: number[] = [];
    bytes.forEach((byte, i) => {
      for (let bit = 0; bit < 8; bit++) if (byte & (1 << bit)) out.push(i * 8 + bit);
    });
    return out;
  }
  if (Array.isArray(operand)) {
    return (operand as unknown[]).map((item) => {
      const n = numericOf(item);
      if (n === undefined || !Number.isInteger(n) || n < 0) {
        throw ERRORS.badValue(`bit positions must be an integer but got: ${String(item)}`);
      }
      return n;
    });
  }
  const n = numericOf(operand);
  if (n === undefined || !Number.isInteger(n) || n < 0) {
    throw ERRORS.badValue(
      `${operator} takes an Array, a number, or a BinData but received: ${String(operand)}`,
    );
  }
  const out: number[] = [];
  let mask = BigInt(n);
  for (let bit = 0; mask > 0n; bit++, mask >>= 1n) if (mask & 1n) out.push(bit);
  return out;
}

function numericOf(value: unknown): number | undefined {
  if (typeof value === 'number') return value;
  const tag = bsonTag(value);
  if (tag === 'Int32' || tag === 'Double') return (value as { value: number }).value;
  if (tag === 'Long') return Number((value as { toBigInt(): bigint }).toBigInt());
  return undefined;
}

/** Reads bit `position` of a value (numbers as 64-bit two's complement, BinData by byte); undefined: not testable. */
function bitReader(value: unknown): ((position: number) => boolean) | undefined {
  const bytes = bytesOf(value);
  if (bytes) return (position) => ((bytes[position >> 3] ?? 0) & (1 << (position & 7))) !== 0;
  let big: bigint;
  if (typeof value === 'number') {
    if (!Number.isInteger(value) || !Number.isSafeInteger(value)) return undefined;
    big = BigInt(value);
  } else if (bsonTag(value) === 'Long') {
    big = (value as { toBigInt(): bigint }).toBigInt();
  } else {
    const n = numericOf(value);
    if (n === undefined || !Number.isInteger(n)) return undefined;
    big = BigInt(n);
  }
  const bits = BigInt.asUintN(64, big);
  const negative = big < 0n;
  return (position) => (position >= 64 ? negative : ((bits >> BigInt(position)) & 1n) === 1n);
}

function bitsOperator(wantSet: boolean, all: boolean, name: string): QueryOperatorFn {
  return (selector, operand) => {
    const positions = bitPositions(name, operand);
    const test = (value: unknown): boolean => {
      const read = bitReader(value);
      if (!read) return false;
      const check = (position: number) => read(position) === wantSet;
      return all ? positions.every(check) : positions.some(check);
    };
    return (obj) => pathValues(obj, selector).values.some(test);
  };
}

/** $elemMatch on DBRefs: each field of the criteria, by equality or by its operators. */
const dbref: QueryOperatorFn = (selector, criteria, options) => {
  const strings = comparerFor(options);
  const tests = Object.entries(criteria as Doc).map(
    ([field, condition]): ((doc: Doc) => boolean) => {
      if (isPlainObject(condition) && Object.keys(condition).some((k) => k.startsWith('$'))) {
        const operators = rewriteOperators(condition);
        const fns = Object.entries(operators).map(([op, operand]) => {
          const fn = STANDIN_QUERY_OPERATORS[op];
          if (!fn) throw ERRORS.badValue(`unknown operator: ${op}`);
          return fn('v', operand, options);
        });
        return (doc) => fns.every((fn) => fn({ v: doc[field] }));
      }
      return (doc) => doc[field] !== undefined && bsonEquals(doc[field], condition, strings);
    },
  );
  return (obj) =>
    pathValues(obj, selector).values.some((value) => {
      const doc = dbrefDocument(value) ?? (isPlainObject(value) ? value : undefined);
      return doc !== undefined && tests.every((test) => test(doc));
    });
};

/** The operators rewriteFilter names, for mingo's context. */
export const STANDIN_QUERY_OPERATORS: Record<string, QueryOperatorFn> = {
  $__eq: eq,
  $__ne: ne,
  $__gt: comparison((order) => order > 0, false),
  $__gte: comparison((order) => order >= 0, true),
  $__lt: comparison((order) => order < 0, false),
  $__lte: comparison((order) => order <= 0, true),
  $__in: inOp,
  $__nin: nin,
  $__all: all,
  $__type: type,
  $__dbref: dbref,
  $__bitsAllSet: bitsOperator(true, true, '$bitsAllSet'),
  $__bitsAnySet: bitsOperator(true, false, '$bitsAnySet'),
  $__bitsAllClear: bitsOperator(false, true, '$bitsAllClear'),
  $__bitsAnyClear: bitsOperator(false, false, '$bitsAnyClear'),
};
