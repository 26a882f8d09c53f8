// MongoDB's comparison of BSON values, for both document forms (typed and
// query, see bson-values.ts): the canonical order across types (MinKey < null <
// numbers < strings < objects < arrays < binData < ObjectId < booleans < dates
// < timestamps < regular expressions < MaxKey), numbers compared by value
// across int/long/double/decimal, a Binary's subtype part of its value, and
// strings compared under a collation when one is given.

import type { Binary, BSONRegExp, Decimal128, Long, ObjectId, Timestamp } from 'bson';

import type { Doc } from './bson-values';
import { bsonTag } from './bson-values';
import { MongoCommandError } from './command-errors';

/** Compares two strings; the simple (binary) comparison when there is no collation. */
export type StringComparer = (a: string, b: string) => number;

const simpleCompare: StringComparer = (a, b) => {
  // MongoDB's simple collation compares UTF-8 bytes; for strings without lone
  // surrogates that is the order of code points.
  if (a === b) return 0;
  const ia = a[Symbol.iterator]();
  const ib = b[Symbol.iterator]();
  for (;;) {
    const x = ia.next();
    const y = ib.next();
    if (x.done) return y.done ? 0 : -1;
    if (y.done) return 1;
    const cx = x.value.codePointAt(0)!;
    const cy = y.value.codePointAt(0)!;
    if (cx !== cy) return cx < cy ? -1 : 1;
  }
};

const COLLATION_FIELDS = new Set([
  'locale',
  'caseLevel',
  'caseFirst',
  'strength',
  'numericOrdering',
  'alternate',
  'maxVariable',
  'normalization',
  'backwards',
  'version',
]);

function collationError(field: string, collation: Doc): MongoCommandError {
  return new MongoCommandError(
    'BadValue',
    `Field '${field}' is invalid in: ${JSON.stringify(collation)}`,
  );
}

/** A MongoDB collation document checked and turned into the form Intl (and mingo) take. */
export interface NormalizedCollation {
  /** BCP 47 locale (`en-US`), or `simple`. */
  locale: string;
  strength: number;
  caseLevel: boolean;
  caseFirst: 'upper' | 'lower' | 'off';
  numericOrdering: boolean;
  alternate: 'non-ignorable' | 'shifted';
}

/**
 * Validates a collation document as MongoDB does (locale required, known
 * fields, strength 1 to 5) and normalises the ICU locale (`en_US`,
 * `de@collation=phonebook`) to BCP 47.
 */
export function normalizeCollation(collation: Doc): NormalizedCollation {
  for (const field of Object.keys(collation)) {
    if (!COLLATION_FIELDS.has(field)) {
      throw new MongoCommandError('FailedToParse', `unknown field '${field}' in collation`);
    }
  }
  const { locale } = collation;
  if (typeof locale !== 'string') {
    throw new MongoCommandError('FailedToParse', "Required field 'locale' is missing");
  }
  const strength = collation.strength === undefined ? 3 : Number(collation.strength);
  if (!Number.isInteger(strength) || strength < 1 || strength > 5) {
    throw collationError('strength', collation);
  }
  const caseFirst = (collation.caseFirst ?? 'off') as NormalizedCollation['caseFirst'];
  if (!['upper', 'lower', 'off'].includes(caseFirst)) throw collationError('caseFirst', collation);
  const alternate = (collation.alternate ?? 'non-ignorable') as NormalizedCollation['alternate'];
  if (!['non-ignorable', 'shifted'].includes(alternate)) {
    throw collationError('alternate', collation);
  }
  let bcp47 = locale;
  if (locale !== 'simple') {
    const [base = '', keywords = ''] = locale.split('@');
    bcp47 = base.replace(/_/g, '-');
    const match = /collation=([a-z]+)/.exec(keywords);
    if (match) bcp47 += `-u-co-${match[1]}`;
    let supported: string[];
    try {
      supported = bcp47 ? Intl.Collator.supportedLocalesOf(bcp47) : [];
    } catch {
      supported = [];
    }
    if (supported.length === 0 && base !== 'root') throw collationError('locale', collation);
    if (base === 'root') bcp47 = 'und';
  }
  return {
    locale: bcp47,
    strength,
    caseLevel: collation.caseLevel === true,
    caseFirst,
    numericOrdering: collation.numericOrdering === true,
    alternate,
  };
}

/** The string comparison a collation asks for (undefined: the simple, binary one). */
export function stringComparer(collation: Doc | undefined): StringComparer | undefined {
  if (!collation) return undefined;
  const spec = normalizeCollation(collation);
  if (spec.locale === 'simple') return undefined;
  let sensitivity: Intl.CollatorOptions['sensitivity'] =
    spec.strength === 1 ? 'base' : spec.strength === 2 ? 'accent' : 'variant';
  if (spec.caseLevel) {
    if (sensitivity === 'base') sensitivity = 'case';
    else if (sensitivity === 'accent') sensitivity = 'variant';
  }
  const collator = new Intl.Collator(spec.locale, {
    sensitivity,
    usage: 'sort',
    numeric: spec.numericOrdering,
    caseFirst: spec.caseFirst === 'off' ? 'false' : spec.caseFirst,
    ignorePunctuation: spec.alternate === 'shifted',
  });
  return (a, b) => {
    const result = collator.compare(a, b);
    // ICU at strength 3+ still tells apart strings Intl calls equal only by
    // their code points (e.g. different normalisations): fall back to them.
    if (result === 0 && spec.strength >= 3 && a !== b && a.normalize() !== b.normalize()) {
      return simpleCompare(a, b);
    }
    return result;
  };
}

// Canonical type ranks, as in MongoDB's BSONType canonicalization.
const RANK = {
  minKey: 0,
  undefined: 2,
  null: 5,
  number: 10,
  string: 15,
  object: 20,
  array: 25,
  binData: 30,
  objectId: 35,
  bool: 40,
  date: 45,
  timestamp: 47,
  regex: 50,
  dbPointer: 55,
  javascript: 60,
  javascriptWithScope: 65,
  maxKey: 127,
} as const;

function typeRank(value: unknown): number {
  if (value === undefined) return RANK.undefined;
  if (value === null) return RANK.null;
  if (typeof value === 'number' || typeof value === 'bigint') return RANK.number;
  if (typeof value === 'string') return RANK.string;
  if (typeof value === 'boolean') return RANK.bool;
  if (Array.isArray(value)) return RANK.array;
  if (value instanceof Date) return RANK.date;
  if (value instanceof RegExp) return RANK.regex;
  if (value instanceof Uint8Array) return RANK.binData;
  const tag = bsonTag(value);
  if (tag === 'Code') {
    return (value as { scope?: unknown }).scope ? RANK.javascriptWithScope : RANK.javascript;
  }
  return (tag && TAG_RANKS[tag]) ?? RANK.object;
}

const TAG_RANKS: Partial<Record<string, number>> = {
  Int32: RANK.number,
  Double: RANK.number,
  Long: RANK.number,
  Decimal128: RANK.number,
  BSONSymbol: RANK.string,
  Binary: RANK.binData,
  ObjectId: RANK.objectId,
  Timestamp: RANK.timestamp,
  BSONRegExp: RANK.regex,
  MinKey: RANK.minKey,
  MaxKey: RANK.maxKey,
};

/** A number as a comparable pair: NaN first, then by value (bigint for Longs beyond 2^53). */
function numberOf(value: unknown): number | bigint {
  if (typeof value === 'number' || typeof value === 'bigint') return value;
  const tag = bsonTag(value);
  if (tag === 'Int32' || tag === 'Double') return (value as { value: number }).value;
  if (tag === 'Long') {
    const big = (value as Long).toBigInt();
    return big >= BigInt(Number.MIN_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER)
      ? Number(big)
      : big;
  }
  if (tag === 'Decimal128') {
    const text = (value as Decimal128).toString();
    return text === 'NaN' || text === '-NaN' ? Number.NaN : Number(text);
  }
  return Number.NaN;
}

function compareNumbers(a: unknown, b: unknown): number {
  const x = numberOf(a);
  const y = numberOf(b);
  const xNaN = typeof x === 'number' && Number.isNaN(x);
  const yNaN = typeof y === 'number' && Number.isNaN(y);
  if (xNaN || yNaN) return xNaN && yNaN ? 0 : xNaN ? -1 : 1;
  if (typeof x === 'bigint' || typeof y === 'bigint') {
    // One side is a Long beyond 2^53: compare as bigints where the other is integral.
    const other = typeof x === 'bigint' ? y : x;
    if (typeof other === 'number' && !Number.isInteger(other)) {
      const bx = typeof x === 'bigint' ? Number(x) : x;
      const by = typeof y === 'bigint' ? Number(y) : y;
      return bx < by ? -1 : bx > by ? 1 : 0;
    }
    const bx = BigInt(x);
    const by = BigInt(y);
    return bx < by ? -1 : bx > by ? 1 : 0;
  }
  return x < y ? -1 : x > y ? 1 : 0;
}

function bytesOf(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value;
  const binary = value as Binary;
  return binary.buffer.subarray(0, binary.position);
}

function subtypeOf(value: unknown): number {
  return value instanceof Uint8Array ? 0 : (value as Binary).sub_type;
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  return Buffer.compare(
    Buffer.from(a.buffer, a.byteOffset, a.length),
    Buffer.from(b.buffer, b.byteOffset, b.length),
  );
}

function regexParts(value: unknown): [string, string] {
  if (value instanceof RegExp) return [value.source, value.flags];
  const re = value as BSONRegExp;
  return [re.pattern, re.options];
}

function entriesOf(value: unknown): Array<[string, unknown]> {
  if (Array.isArray(value)) return value.map((item, i) => [String(i), item]);
  if (bsonTag(value) === 'DBRef') {
    const ref = value as { collection: string; oid: unknown; db?: string; fields?: Doc };
    const out: Array<[string, unknown]> = [
      ['$ref', ref.collection],
      ['$id', ref.oid],
    ];
    if (ref.db) out.push(['$db', ref.db]);
    return out.concat(Object.entries(ref.fields ?? {}));
  }
  return Object.entries(value as Doc);
}

function compareSequences(a: unknown, b: unknown, strings: StringComparer): number {
  const x = entriesOf(a);
  const y = entriesOf(b);
  const arrays = Array.isArray(a);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const [ka, va] = x[i]!;
    const [kb, vb] = y[i]!;
    const rank = typeRank(va) - typeRank(vb);
    if (rank !== 0) return rank < 0 ? -1 : 1;
    if (!arrays) {
      const names = simpleCompare(ka, kb);
      if (names !== 0) return names;
    }
    const values = compareBson(va, vb, strings);
    if (values !== 0) return values;
  }
  return x.length === y.length ? 0 : x.length < y.length ? -1 : 1;
}

/**
 * MongoDB's order of two BSON values (negative, zero, positive). Field names
 * and the values of one document compare in order, as BSONObj::woCompare does.
 */
export function compareBson(
  a: unknown,
  b: unknown,
  strings: StringComparer = simpleCompare,
): number {
  const ra = typeRank(a);
  const rb = typeRank(b);
  if (ra !== rb) return ra < rb ? -1 : 1;
  switch (ra) {
    case RANK.minKey:
    case RANK.maxKey:
    case RANK.null:
    case RANK.undefined:
      return 0;
    case RANK.number:
      return compareNumbers(a, b);
    case RANK.string: {
      const sa = typeof a === 'string' ? a : String((a as { value: string }).value);
      const sb = typeof b === 'string' ? b : String((b as { value: string }).value);
      return Math.sign(strings(sa, sb));
    }
    case RANK.object:
    case RANK.array:
      return compareSequences(a, b, strings);
    case RANK.binData: {
      const ba = bytesOf(a);
      const bb = bytesOf(b);
      if (ba.length !== bb.length) return ba.length < bb.length ? -1 : 1;
      const st = subtypeOf(a) - subtypeOf(b);
      if (st !== 0) return st < 0 ? -1 : 1;
      return Math.sign(compareBytes(ba, bb));
    }
    case RANK.objectId:
      return Math.sign(compareBytes((a as ObjectId).id, (b as ObjectId).id));
    case RANK.bool:
      return a === b ? 0 : a ? 1 : -1;
    case RANK.date: {
      const x = (a as Date).getTime();
      const y = (b as Date).getTime();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    case RANK.timestamp: {
      const x = (a as Timestamp).toBigInt();
      const y = (b as Timestamp).toBigInt();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    case RANK.regex: {
      const [pa, fa] = regexParts(a);
      const [pb, fb] = regexParts(b);
      return simpleCompare(pa, pb) || simpleCompare(fa, fb);
    }
    default: {
      const ca = String((a as { code?: unknown }).code);
      const cb = String((b as { code?: unknown }).code);
      return simpleCompare(ca, cb);
    }
  }
}

/** MongoDB's equality of two values (numbers across types, Binary subtype included). */
export function bsonEquals(a: unknown, b: unknown, strings?: StringComparer): boolean {
  return compareBson(a, b, strings) === 0;
}

/** True when two values have the same canonical type (MongoDB's type bracketing). */
export function sameTypeBracket(a: unknown, b: unknown): boolean {
  return typeRank(a) === typeRank(b);
}

export function isMinOrMaxKey(value: unknown): 'min' | 'max' | undefined {
  const rank = typeRank(value);
  return rank === RANK.minKey ? 'min' : rank === RANK.maxKey ? 'max' : undefined;
}

const TAG_ALIASES: Partial<Record<string, string>> = {
  Int32: 'int',
  Double: 'double',
  Long: 'long',
  Decimal128: 'decimal',
  BSONSymbol: 'symbol',
  Binary: 'binData',
  ObjectId: 'objectId',
  Timestamp: 'timestamp',
  BSONRegExp: 'regex',
  MinKey: 'minKey',
  MaxKey: 'maxKey',
};

/** MongoDB's alias of a value's BSON type (`$type`), from its typed form. */
export function bsonTypeAlias(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (value === null) return 'null';
  if (typeof value === 'number') {
    // Only seen for values without a typed form: an integral number fitting
    // an int32 is what the driver sends as an int.
    return Number.isInteger(value) && Math.abs(value) <= 2_147_483_647 && !Object.is(value, -0)
      ? 'int'
      : 'double';
  }
  if (typeof value === 'bigint') return 'long';
  if (typeof value === 'string') return 'string';
  if (typeof value === 'boolean') return 'bool';
  if (Array.isArray(value)) return 'array';
  if (value instanceof Date) return 'date';
  if (value instanceof RegExp) return 'regex';
  if (value instanceof Uint8Array) return 'binData';
  const tag = bsonTag(value);
  if (tag === 'Code') {
    return (value as { scope?: unknown }).scope ? 'javascriptWithScope' : 'javascript';
  }
  return (tag && TAG_ALIASES[tag]) ?? 'object';
}
