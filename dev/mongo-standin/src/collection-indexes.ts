// Index definitions of one collection and the keys a document contributes to
// them. Only unique indexes keep key → owner maps (that is all the stand-in needs
// indexes for: every query is a scan); other indexes are recorded so that
// createIndexes / listIndexes / dropIndexes behave like MongoDB's.

import type { Doc } from './bson-values';
import {
  canonicalKey,
  formatValue,
  isPlainObject,
  isTruthy,
  numericValue,
  setOwn,
} from './bson-values';
import { normalizeCollation } from './bson-compare';
import { ERRORS, MongoCommandError } from './command-errors';
import type { Matcher } from './mingo-adapter';
import { compileFilter } from './mingo-adapter';

export const ID_INDEX_NAME = '_id_';

/** One key a document contributes to a unique index. */
export interface IndexKey {
  /** Canonical string of the key values (equal strings = equal keys). */
  key: string;
  /** The typed value of each key field, in key pattern order. */
  values: unknown[];
}

interface IndexField {
  path: string;
  segments: string[];
  direction: unknown;
}

/** Options that are part of an index's identity (others, like `background`, are not). */
const IGNORED_SPEC_FIELDS = new Set(['v', 'key', 'name', 'background', 'ns']);

/** The name MongoDB derives from a key pattern: `a_1_b_-1`. */
export function defaultIndexName(key: Doc): string {
  return Object.entries(key)
    .map(([field, direction]) => `${field}_${numericValue(direction) ?? String(direction)}`)
    .join('_');
}

function directionKey(direction: unknown): string {
  const n = numericValue(direction);
  return n === undefined ? `s:${String(direction)}` : `n:${n}`;
}

/** Values a document holds at an index path; arrays are expanded (multikey), missing is undefined. */
function indexValues(
  value: unknown,
  segments: readonly string[],
  index: number,
  out: unknown[],
): void {
  if (index === segments.length) {
    if (Array.isArray(value)) {
      if (value.length === 0) out.push(undefined);
      for (const item of value as unknown[]) out.push(item);
    } else {
      out.push(value);
    }
    return;
  }
  const segment = segments[index]!;
  if (Array.isArray(value)) {
    const items = value as unknown[];
    if (/^\d+$/.test(segment)) {
      indexValues(items[Number(segment)], segments, index + 1, out);
      return;
    }
    if (items.length === 0) out.push(undefined);
    for (const item of items) indexValues(item, segments, index, out);
    return;
  }
  if (isPlainObject(value)) {
    indexValues(value[segment], segments, index + 1, out);
    return;
  }
  out.push(undefined);
}

/**
 * How an index under a collation tells strings apart, for uniqueness: strength
 * 1 ignores case and accents, 2 case, 3 and above only the normalisation form;
 * `alternate: shifted` ignores spaces and punctuation. This is ICU's equality
 * for Latin, Greek and Cyrillic text; other scripts' finer ICU rules (e.g.
 * contractions) are not modelled.
 */
function collationFold(collation: Doc): ((text: string) => string) | undefined {
  const spec = normalizeCollation(collation);
  if (spec.locale === 'simple') return undefined;
  return (text) => {
    let out = text.normalize('NFD');
    if (spec.alternate === 'shifted') out = out.replace(/[\p{P}\p{Z}\p{S}]/gu, '');
    if (spec.strength === 1) out = out.replace(/\p{M}/gu, '');
    if (spec.strength <= 2 && !spec.caseLevel) out = out.toLocaleLowerCase(spec.locale);
    return out.normalize('NFC');
  };
}

export class IndexDefinition {
  readonly name: string;
  readonly keyPattern: Doc;
  readonly unique: boolean;
  readonly sparse: boolean;
  /** The document listIndexes returns for this index. */
  readonly spec: Doc;
  /** Unique indexes only: canonical key → id key of the document holding it. */
  readonly owners = new Map<string, string>();
  private readonly fields: IndexField[];
  private readonly partial: Matcher | undefined;
  /** For an index with a collation: the form of a string its keys compare by. */
  private readonly fold: ((text: string) => string) | undefined;

  constructor(spec: Doc) {
    const key = spec.key;
    if (!isPlainObject(key) || Object.keys(key).length === 0) {
      throw new MongoCommandError('CannotCreateIndex', 'Index keys cannot be empty.');
    }
    const name = spec.name === undefined ? defaultIndexName(key) : spec.name;
    if (typeof name !== 'string' || name.length === 0) {
      throw ERRORS.typeMismatch('createIndexes.indexes.name', 'string');
    }
    this.name = name;
    this.keyPattern = key;
    this.unique = isTruthy(spec.unique);
    this.sparse = isTruthy(spec.sparse);
    this.fields = Object.entries(key).map(([path, direction]) => ({
      path,
      segments: path.split('.'),
      direction,
    }));
    const partialFilter = spec.partialFilterExpression;
    if (partialFilter !== undefined && !isPlainObject(partialFilter)) {
      throw ERRORS.typeMismatch('partialFilterExpression', 'object');
    }
    this.partial = partialFilter ? compileFilter(partialFilter) : undefined;
    this.fold = isPlainObject(spec.collation) ? collationFold(spec.collation) : undefined;

    const stored: Doc = { v: 2, key, name };
    for (const [field, value] of Object.entries(spec)) {
      if (IGNORED_SPEC_FIELDS.has(field)) continue;
      setOwn(stored, field, value);
    }
    this.spec = stored;
  }

  static idIndex(): IndexDefinition {
    return new IndexDefinition({ key: { _id: 1 }, name: ID_INDEX_NAME });
  }

  get isIdIndex(): boolean {
    return this.name === ID_INDEX_NAME;
  }

  sameKeyPattern(other: IndexDefinition): boolean {
    if (this.fields.length !== other.fields.length) return false;
    return this.fields.every((field, i) => {
      const theirs = other.fields[i]!;
      return (
        field.path === theirs.path &&
        directionKey(field.direction) === directionKey(theirs.direction)
      );
    });
  }

  private optionsKey(): string {
    const options: Doc = {};
    for (const [field, value] of Object.entries(this.spec)) {
      if (IGNORED_SPEC_FIELDS.has(field)) continue;
      if ((field === 'unique' || field === 'sparse') && !isTruthy(value)) continue;
      options[field] = field === 'unique' || field === 'sparse' ? true : value;
    }
    return canonicalKey(
      Object.fromEntries(Object.entries(options).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
    );
  }

  sameOptions(other: IndexDefinition): boolean {
    return this.optionsKey() === other.optionsKey();
  }

  /**
   * The keys a document contributes, or undefined when the index leaves it out
   * (sparse with all key fields missing, or not matching the partial filter).
   */
  keysFor(doc: Doc, view: Doc): IndexKey[] | undefined {
    if (this.partial && !this.partial(view)) return undefined;
    const perField = this.fields.map((field) => {
      const values: unknown[] = [];
      indexValues(doc, field.segments, 0, values);
      return values;
    });
    if (this.sparse && perField.every((values) => values.every((v) => v === undefined))) {
      return undefined;
    }
    let tuples: unknown[][] = [[]];
    for (const values of perField) {
      const next: unknown[][] = [];
      for (const tuple of tuples) for (const value of values) next.push([...tuple, value]);
      tuples = next;
    }
    const keys = new Map<string, IndexKey>();
    for (const values of tuples) {
      const fold = this.fold;
      const key = values
        .map((value) => canonicalKey(fold && typeof value === 'string' ? fold(value) : value))
        .join('|');
      if (!keys.has(key)) keys.set(key, { key, values });
    }
    return [...keys.values()];
  }

  /** `{ field: value }` for a key, as in duplicate-key errors. */
  keyValue(values: readonly unknown[]): Doc {
    const out: Doc = {};
    this.fields.forEach((field, i) => setOwn(out, field.path, values[i] ?? null));
    return out;
  }

  duplicateKeyError(ns: string, values: readonly unknown[], prefix = ''): MongoCommandError {
    const dupKey = this.fields
      .map((field, i) => `${field.path}: ${formatValue(values[i] ?? null)}`)
      .join(', ');
    return new MongoCommandError(
      'DuplicateKey',
      `${prefix}E11000 duplicate key error collection: ${ns} index: ${this.name} dup key: { ${dupKey} }`,
      { keyPattern: this.keyPattern, keyValue: this.keyValue(values) },
    );
  }
}
