// BSON value helpers shared by the storage engine and the command handlers.
//
// Documents live in two forms:
// - the *typed* form, exactly as BSON deserialised them with `promoteValues: false`:
//   numbers stay Int32 / Double / Long wrappers, so what was written is what is
//   read back (an integral Double stays a double, a Long stays a Long);
// - the *query* form handed to mingo: the same tree with Int32/Double (and Longs
//   that fit a JS number) turned into plain numbers, so mingo's comparisons and
//   arithmetic work. Everything else (ObjectId, Date, Binary, Decimal128, ...) is
//   shared between both forms; mingo compares ObjectIds by their hex string.
//
// `restoreTypes` maps a query-form result (after an update or a projection) back
// to the typed form, keeping each number's original BSON type where it can.

import { Double, Int32, Long, ObjectId } from 'bson';
import type {
  Binary,
  BSONRegExp,
  BSONSymbol,
  BSONTypeTag,
  Code,
  DBRef,
  Decimal128,
  Timestamp,
} from 'bson';

/** A BSON document as the stand-in handles it. */
export type Doc = Record<string, unknown>;

export type NumericKind = 'int' | 'long' | 'double';

const INT32_MIN = -2_147_483_648;
const INT32_MAX = 2_147_483_647;
const SAFE_MAX = BigInt(Number.MAX_SAFE_INTEGER);
const SAFE_MIN = BigInt(Number.MIN_SAFE_INTEGER);

export function isPlainObject(value: unknown): value is Doc {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** The `_bsontype` tag of a BSON value class instance, if `value` is one. */
export function bsonTag(value: unknown): BSONTypeTag | undefined {
  if (value === null || typeof value !== 'object') return undefined;
  const tag = (value as { _bsontype?: unknown })._bsontype;
  return typeof tag === 'string' ? (tag as BSONTypeTag) : undefined;
}

/** Sets an own property, also when the key is `__proto__`. */
export function setOwn(target: Doc, key: string, value: unknown): void {
  if (key === '__proto__') {
    Object.defineProperty(target, key, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  } else {
    target[key] = value;
  }
}

function longIsSafe(value: Long): boolean {
  const big = value.toBigInt();
  return big <= SAFE_MAX && big >= SAFE_MIN;
}

const NUMERIC_KINDS: Partial<Record<BSONTypeTag, NumericKind>> = {
  Int32: 'int',
  Double: 'double',
  Long: 'long',
};

/** The numeric BSON kind of a typed value (Decimal128 excluded), if it is a number. */
export function numericKind(value: unknown): NumericKind | undefined {
  const tag = bsonTag(value);
  return tag === undefined ? undefined : NUMERIC_KINDS[tag];
}

/** The JS number of a numeric value (plain number, Int32, Double, Long or Decimal128), if it is one. */
export function numericValue(value: unknown): number | undefined {
  if (typeof value === 'number') return value;
  const tag = bsonTag(value);
  if (tag === 'Int32') return (value as Int32).value;
  if (tag === 'Double') return (value as Double).value;
  if (tag === 'Long') return (value as Long).toNumber();
  if (tag === 'Decimal128') return Number((value as Decimal128).toString());
  return undefined;
}

/** Reads a command option that should be a number (any BSON numeric type or boolean). */
export function optionalNumber(value: unknown): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'boolean') return value ? 1 : 0;
  return numericValue(value);
}

/** MongoDB's notion of a truthy option: true, or a non-zero number. */
export function isTruthy(value: unknown): boolean {
  if (typeof value === 'boolean') return value;
  const n = numericValue(value);
  if (n !== undefined) return n !== 0;
  return value !== undefined && value !== null;
}

// Query-form containers → the typed containers they were made from, so that
// what needs the BSON types ($type) can read them back.
const TYPED_TWINS = new WeakMap<object, object>();

/** The typed container a query-form container was made from (itself when none). */
export function typedTwin(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  return TYPED_TWINS.get(value) ?? value;
}

/** A typed → query-form copy (fresh containers, numbers promoted). */
export function toQueryForm(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) {
    const out = value.map(toQueryForm);
    TYPED_TWINS.set(out, value);
    return out;
  }
  if (value instanceof Date) return new Date(value.getTime());
  const tag = bsonTag(value);
  if (tag === 'Int32') return (value as Int32).value;
  if (tag === 'Double') return (value as Double).value;
  if (tag === 'Long') return longIsSafe(value as Long) ? (value as Long).toNumber() : value;
  if (isPlainObject(value)) {
    const out: Doc = {};
    for (const [key, inner] of Object.entries(value)) setOwn(out, key, toQueryForm(inner));
    TYPED_TWINS.set(out, value);
    return out;
  }
  return value;
}

export function toQueryDoc(doc: Doc): Doc {
  return toQueryForm(doc) as Doc;
}

/** A deep copy of a typed value; immutable BSON value objects are shared. */
export function cloneBson(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(cloneBson);
  if (value instanceof Date) return new Date(value.getTime());
  if (value instanceof RegExp) return new RegExp(value.source, value.flags);
  if (bsonTag(value) === 'Binary') {
    const binary = value as Binary;
    const Ctor = binary.constructor as new (buffer: Uint8Array, subType: number) => Binary;
    return new Ctor(
      Uint8Array.prototype.slice.call(binary.buffer, 0, binary.position),
      binary.sub_type,
    );
  }
  if (value instanceof Uint8Array) return Uint8Array.prototype.slice.call(value);
  if (isPlainObject(value)) {
    const out: Doc = {};
    for (const [key, inner] of Object.entries(value)) setOwn(out, key, cloneBson(inner));
    return out;
  }
  return value;
}

export function cloneDoc(doc: Doc): Doc {
  return cloneBson(doc) as Doc;
}

/** Builds a typed number of the wanted kind, widening when the value does not fit. */
export function makeNumber(value: number, kind: NumericKind | undefined): Int32 | Double | Long {
  const integral = Number.isInteger(value) && !Object.is(value, -0);
  if (kind === 'double' || !integral) return new Double(value);
  if (kind === 'long')
    return Number.isSafeInteger(value) ? Long.fromNumber(value) : new Double(value);
  if (value >= INT32_MIN && value <= INT32_MAX) return new Int32(value);
  // An int that outgrew int32 becomes a long, as MongoDB does for $inc; a plain JS
  // number out of int32 range is a double, as the driver would have sent it.
  if (kind === 'int' && Number.isSafeInteger(value)) return Long.fromNumber(value);
  return new Double(value);
}

const KIND_RANK: Record<NumericKind, number> = { int: 0, long: 1, double: 2 };

export function widestKind(
  a: NumericKind | undefined,
  b: NumericKind | undefined,
): NumericKind | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return KIND_RANK[a] >= KIND_RANK[b] ? a : b;
}

/** How the update that produced a value wants a number at some path typed. */
export interface TypeHint {
  /** `set`: the value's own type; `arith`: widest of old and operand; `minmax`: operand's type when it won. */
  op: 'set' | 'arith' | 'minmax';
  kind: NumericKind | undefined;
  /** For values pushed into an array: the kind of each pushed number. */
  byValue?: Map<number, NumericKind>;
}

/** Type hints keyed by path segments; a segment starting with `$` (or `*`) matches any array index. */
export class TypeHints {
  private readonly hints: Array<{ segments: string[]; hint: TypeHint }> = [];

  add(path: string, hint: TypeHint): void {
    this.hints.push({ segments: path.split('.'), hint });
  }

  get size(): number {
    return this.hints.length;
  }

  lookup(segments: readonly string[]): TypeHint | undefined {
    for (let i = this.hints.length - 1; i >= 0; i--) {
      const candidate = this.hints[i]!;
      if (candidate.segments.length !== segments.length) continue;
      let matches = true;
      for (let s = 0; s < segments.length; s++) {
        const want = candidate.segments[s]!;
        const have = segments[s]!;
        if (want === have) continue;
        if ((want.startsWith('$') || want === '*') && /^\d+$/.test(have)) continue;
        matches = false;
        break;
      }
      if (matches) return candidate.hint;
    }
    return undefined;
  }
}

function typeNumber(value: number, ref: unknown, hint: TypeHint | undefined): unknown {
  const refKind = numericKind(ref);
  const refValue = refKind === undefined ? undefined : numericValue(ref);
  const unchanged = refValue !== undefined && Object.is(refValue, value);
  if (hint) {
    if (hint.byValue) {
      return unchanged ? ref : makeNumber(value, hint.byValue.get(value) ?? refKind);
    }
    switch (hint.op) {
      case 'set':
        return makeNumber(value, hint.kind);
      case 'arith':
        return unchanged && refKind === widestKind(refKind, hint.kind)
          ? ref
          : makeNumber(value, widestKind(refKind, hint.kind));
      case 'minmax':
        return unchanged ? ref : makeNumber(value, hint.kind);
    }
  }
  if (unchanged) return ref;
  return makeNumber(value, refKind);
}

function restoreAt(
  value: unknown,
  ref: unknown,
  path: string[],
  hints: TypeHints | undefined,
): unknown {
  if (typeof value === 'number') return typeNumber(value, ref, hints?.lookup(path));
  if (Array.isArray(value)) {
    const refArray = Array.isArray(ref) ? (ref as unknown[]) : undefined;
    return value.map((item, i) => {
      let itemRef = refArray?.[i];
      if (typeof item === 'number' && refArray && !Object.is(numericValue(itemRef), item)) {
        // Elements may have moved ($pull, $pop, $position): find the same number.
        itemRef =
          refArray.find((r) => numericKind(r) && Object.is(numericValue(r), item)) ?? itemRef;
      }
      return restoreAt(item, itemRef, [...path, String(i)], hints);
    });
  }
  if (isPlainObject(value)) {
    const refDoc = isPlainObject(ref) ? ref : undefined;
    const out: Doc = {};
    for (const [key, inner] of Object.entries(value)) {
      setOwn(out, key, restoreAt(inner, refDoc?.[key], [...path, key], hints));
    }
    return out;
  }
  return value;
}

/**
 * Maps a query-form document back to the typed form: a number keeps the BSON type
 * of the value at the same path in `ref` when unchanged, takes the type the update
 * asked for (`hints`), or else becomes an Int32 (integral, in range) or a Double.
 */
export function restoreTypes(value: Doc, ref: Doc | undefined, hints?: TypeHints): Doc {
  return restoreAt(value, ref, [], hints) as Doc;
}

/**
 * A string that is equal for two values exactly when MongoDB's index would treat
 * them as the same key (numbers compare across int/long/double/decimal; null and
 * missing are the same key).
 */
export function canonicalKey(value: unknown): string {
  if (value === undefined || value === null) return 'null';
  if (typeof value === 'number') return `n:${Object.is(value, -0) ? 0 : value}`;
  if (typeof value === 'string') return `s:${JSON.stringify(value)}`;
  if (typeof value === 'boolean') return `b:${value}`;
  if (typeof value === 'bigint') return `n:${value}`;
  if (Array.isArray(value)) return `a[${value.map(canonicalKey).join(',')}]`;
  if (value instanceof Date) return `d:${value.getTime()}`;
  if (value instanceof RegExp) return `r:${value.source}/${value.flags}`;
  const tag = bsonTag(value);
  switch (tag) {
    case 'Int32':
    case 'Double':
      return canonicalKey(numericValue(value));
    case 'Long': {
      const long = value as Long;
      return longIsSafe(long) ? canonicalKey(long.toNumber()) : `n:${long.toString()}`;
    }
    case 'Decimal128': {
      const text = (value as Decimal128).toString();
      const n = Number(text);
      return Number.isFinite(n) ? canonicalKey(n) : `n:${text}`;
    }
    case 'ObjectId':
      return `id:${(value as ObjectId).toHexString()}`;
    case 'Binary':
      return `x:${(value as Binary).sub_type}:${binaryHex(value as Binary)}`;
    case 'Timestamp':
      return `t:${(value as Timestamp).t}:${(value as Timestamp).i}`;
    case 'MinKey':
      return 'minkey';
    case 'MaxKey':
      return 'maxkey';
    case 'BSONRegExp':
      return `r:${(value as BSONRegExp).pattern}/${(value as BSONRegExp).options}`;
    case 'BSONSymbol':
      return `s:${JSON.stringify((value as BSONSymbol).value)}`;
    case 'Code':
      return `code:${JSON.stringify((value as Code).code)}:${canonicalKey((value as Code).scope)}`;
    case 'DBRef': {
      const ref = value as DBRef;
      return `ref:${ref.db ?? ''}.${ref.collection}:${canonicalKey(ref.oid)}`;
    }
    case undefined:
      break;
  }
  if (isPlainObject(value)) {
    return `o{${Object.entries(value)
      .map(([key, inner]) => `${JSON.stringify(key)}:${canonicalKey(inner)}`)
      .join(',')}}`;
  }
  return `?:${Object.prototype.toString.call(value)}`;
}

function binaryHex(binary: Binary): string {
  return Buffer.from(binary.buffer.subarray(0, binary.position)).toString('hex');
}

/** Formats a value the way MongoDB prints it in `dup key: { ... }` messages. */
export function formatValue(value: unknown): string {
  if (value === undefined || value === null) return 'null';
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') {
    return String(value);
  }
  if (Array.isArray(value)) return value.length ? `[ ${value.map(formatValue).join(', ')} ]` : '[]';
  if (value instanceof Date) return `new Date(${value.getTime()})`;
  if (value instanceof RegExp) return `/${value.source}/${value.flags}`;
  const tag = bsonTag(value);
  switch (tag) {
    case 'Int32':
    case 'Double':
    case 'Long':
      return (value as Int32 | Double | Long).toString();
    case 'Decimal128':
      return (value as Decimal128).toString();
    case 'ObjectId':
      return `ObjectId('${(value as ObjectId).toHexString()}')`;
    case 'Binary':
      return `BinData(${(value as Binary).sub_type}, ${binaryHex(value as Binary).toUpperCase()})`;
    case 'Timestamp':
      return `Timestamp(${(value as Timestamp).t}, ${(value as Timestamp).i})`;
    case 'MinKey':
      return 'MinKey';
    case 'MaxKey':
      return 'MaxKey';
    case 'BSONRegExp':
      return `/${(value as BSONRegExp).pattern}/${(value as BSONRegExp).options}`;
    case 'BSONSymbol':
      return JSON.stringify((value as BSONSymbol).value);
    case 'Code':
      return `Code(${JSON.stringify((value as Code).code)})`;
    case 'DBRef':
      return `DBRef(${JSON.stringify((value as DBRef).collection)}, ${formatValue((value as DBRef).oid)})`;
    case undefined:
      break;
  }
  if (isPlainObject(value)) {
    const entries = Object.entries(value);
    if (!entries.length) return '{}';
    return `{ ${entries.map(([key, inner]) => `${key}: ${formatValue(inner)}`).join(', ')} }`;
  }
  return Object.prototype.toString.call(value);
}

/** Values at a dotted path, MongoDB-style: arrays along the way are traversed. */
export function valuesAtPath(value: unknown, segments: readonly string[], index = 0): unknown[] {
  if (index === segments.length) return value === undefined ? [] : [value];
  const segment = segments[index]!;
  if (Array.isArray(value)) {
    if (/^\d+$/.test(segment)) {
      return valuesAtPath((value as unknown[])[Number(segment)], segments, index + 1);
    }
    return (value as unknown[]).flatMap((item) =>
      isPlainObject(item) ? valuesAtPath(item, segments, index) : [],
    );
  }
  if (isPlainObject(value)) {
    return Object.prototype.hasOwnProperty.call(value, segment)
      ? valuesAtPath(value[segment], segments, index + 1)
      : [];
  }
  return [];
}

/** Puts `_id` first, as MongoDB stores it. */
export function withIdFirst(doc: Doc): Doc {
  if (!('_id' in doc) || Object.keys(doc)[0] === '_id') return doc;
  const out: Doc = { _id: doc._id };
  for (const [key, value] of Object.entries(doc)) if (key !== '_id') setOwn(out, key, value);
  return out;
}

/** Gives a document an ObjectId `_id` when it has none, placing `_id` first. */
export function ensureId(doc: Doc): Doc {
  if (doc._id === undefined) return withIdFirst({ ...doc, _id: new ObjectId() });
  return withIdFirst(doc);
}
