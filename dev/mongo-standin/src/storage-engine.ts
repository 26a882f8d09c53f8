// In-memory databases, collections and their unique indexes.
//
// A collection keeps its documents in insertion order, each stored twice: the
// typed document (what is written and read back) and its query form (what mingo
// filters and sorts). Stored entries are never modified in place; a write
// replaces the entry, so a reader holding an entry (an open cursor) keeps a
// consistent snapshot. Every operation is synchronous: a command's
// read-modify-write cannot interleave with another command's.
//
// Every change is noted in the engine's journal (which documents, which
// collections' definitions, what was dropped), so that a persistence layer
// (persistence.ts) writes exactly what a command changed once it has run.

import { BSON, UUID } from 'bson';

import type { Doc } from './bson-values';
import {
  bsonTag,
  canonicalKey,
  cloneDoc,
  isPlainObject,
  isTruthy,
  numericValue,
  toQueryDoc,
  withIdFirst,
} from './bson-values';
import { ERRORS, MongoCommandError } from './command-errors';
import type { IndexKey } from './collection-indexes';
import { IndexDefinition } from './collection-indexes';
import type { QueryOptions } from './mingo-adapter';
import { compileFilter, sortViews } from './mingo-adapter';

/** MongoDB's maximum document size. */
export const MAX_BSON_OBJECT_SIZE = 16 * 1024 * 1024;

export interface StoredEntry {
  /** Canonical `_id` key. */
  readonly idKey: string;
  /** The typed document. */
  readonly doc: Doc;
  /** The query form of `doc`. */
  readonly view: Doc;
  /** Keys per unique index name. */
  readonly keys: ReadonlyMap<string, IndexKey[]>;
}

export interface FindEntriesOptions extends QueryOptions {
  sort?: Record<string, 1 | -1>;
  skip?: number;
  /** 0 or undefined: no limit. */
  limit?: number;
}

export type CreateIndexOutcome = 'created' | 'exists';

/** A change to write through, in the order it happened. */
export type JournalEntry =
  | { kind: 'document'; store: CollectionStore; idKey: string }
  | { kind: 'definition'; store: CollectionStore }
  | { kind: 'dropCollection'; db: string; name: string }
  | { kind: 'dropDatabase'; db: string };

/** Where stores note their changes (the engine's journal). */
export interface ChangeSink {
  note(entry: JournalEntry): void;
}

export class CollectionStore {
  readonly uuid = new UUID();
  private readonly entries = new Map<string, StoredEntry>();
  private readonly indexes: IndexDefinition[] = [IndexDefinition.idIndex()];

  constructor(
    readonly db: string,
    readonly name: string,
    readonly options: Doc = {},
    private readonly changes?: ChangeSink,
  ) {}

  private changed(idKey: string): void {
    this.changes?.note({ kind: 'document', store: this, idKey });
  }

  /** Its options or an index's spec changed in place (collMod). */
  definitionChanged(): void {
    this.changes?.note({ kind: 'definition', store: this });
  }

  get ns(): string {
    return `${this.db}.${this.name}`;
  }

  get count(): number {
    return this.entries.size;
  }

  /** The entry stored under a canonical `_id` key. */
  get(idKey: string): StoredEntry | undefined {
    return this.entries.get(idKey);
  }

  /** A snapshot of the stored entries in insertion order. */
  allEntries(): StoredEntry[] {
    return [...this.entries.values()];
  }

  views(): Doc[] {
    return this.allEntries().map((entry) => entry.view);
  }

  dataSize(): number {
    let size = 0;
    for (const entry of this.entries.values()) size += BSON.calculateObjectSize(entry.doc);
    return size;
  }

  /** Matching entries, optionally sorted, skipped and limited. */
  findEntries(filter: Doc | undefined, options: FindEntriesOptions = {}): StoredEntry[] {
    const matches = compileFilter(filter, options);
    const skip = Math.max(0, options.skip ?? 0);
    const limit = options.limit && options.limit > 0 ? options.limit : Infinity;
    const byId = options.collation ? undefined : this.lookupById(filter);
    const candidates: Iterable<StoredEntry> =
      byId === undefined ? this.entries.values() : byId ? [byId] : [];
    if (!options.sort) {
      const out: StoredEntry[] = [];
      let skipped = 0;
      for (const entry of candidates) {
        if (out.length >= limit) break;
        if (!matches(entry.view)) continue;
        if (skipped < skip) {
          skipped++;
          continue;
        }
        out.push(entry);
      }
      return out;
    }
    const byView = new Map<Doc, StoredEntry>();
    for (const entry of candidates) if (matches(entry.view)) byView.set(entry.view, entry);
    const sorted = sortViews([...byView.keys()], options.sort, options);
    const end = limit === Infinity ? undefined : skip + limit;
    return sorted.slice(skip, end).map((view) => byView.get(view)!);
  }

  /**
   * The only entry a filter with an `_id` equality can match (null: none), or
   * undefined when the filter does not pin `_id` to one scalar value. The full
   * filter is still applied to the candidate.
   */
  private lookupById(filter: Doc | undefined): StoredEntry | null | undefined {
    if (!filter || !Object.prototype.hasOwnProperty.call(filter, '_id')) return undefined;
    let value = filter._id;
    if (isPlainObject(value)) {
      const keys = Object.keys(value);
      if (keys.length !== 1 || keys[0] !== '$eq') return undefined;
      value = value.$eq;
    }
    const scalar =
      typeof value === 'string' ||
      typeof value === 'number' ||
      typeof value === 'boolean' ||
      value instanceof Date ||
      ['ObjectId', 'Int32', 'Double', 'Long'].includes(bsonTag(value) ?? '');
    if (!scalar) return undefined;
    return this.entries.get(canonicalKey(value)) ?? null;
  }

  private checkSize(doc: Doc): void {
    const size = BSON.calculateObjectSize(doc);
    if (size > MAX_BSON_OBJECT_SIZE) {
      throw new MongoCommandError(
        'BSONObjectTooLarge',
        `object to insert too large. size in bytes: ${size}, max size: ${MAX_BSON_OBJECT_SIZE}`,
      );
    }
  }

  private uniqueIndexes(): IndexDefinition[] {
    return this.indexes.filter((index) => index.unique && !index.isIdIndex);
  }

  private computeKeys(doc: Doc, view: Doc): Map<string, IndexKey[]> {
    const keys = new Map<string, IndexKey[]>();
    for (const index of this.uniqueIndexes()) {
      const indexKeys = index.keysFor(doc, view);
      if (indexKeys) keys.set(index.name, indexKeys);
    }
    return keys;
  }

  private checkConflicts(keys: ReadonlyMap<string, IndexKey[]>, idKey: string): void {
    for (const index of this.uniqueIndexes()) {
      for (const key of keys.get(index.name) ?? []) {
        const owner = index.owners.get(key.key);
        if (owner !== undefined && owner !== idKey)
          throw index.duplicateKeyError(this.ns, key.values);
      }
    }
  }

  private addKeys(entry: StoredEntry): void {
    for (const index of this.uniqueIndexes()) {
      for (const key of entry.keys.get(index.name) ?? []) index.owners.set(key.key, entry.idKey);
    }
  }

  private removeKeys(entry: StoredEntry): void {
    for (const index of this.uniqueIndexes()) {
      for (const key of entry.keys.get(index.name) ?? []) {
        if (index.owners.get(key.key) === entry.idKey) index.owners.delete(key.key);
      }
    }
  }

  /** Stores a copy of a document that already has its `_id`. Throws on a duplicate key. */
  insert(input: Doc): StoredEntry {
    const doc = withIdFirst(cloneDoc(input));
    if (doc._id === undefined) throw ERRORS.badValue('document to insert has no _id');
    if (Array.isArray(doc._id)) throw ERRORS.badValue("can't use an array for _id");
    this.checkSize(doc);
    const idKey = canonicalKey(doc._id);
    if (this.entries.has(idKey)) {
      throw this.indexes[0]!.duplicateKeyError(this.ns, [doc._id]);
    }
    const view = toQueryDoc(doc);
    const keys = this.computeKeys(doc, view);
    this.checkConflicts(keys, idKey);
    const entry: StoredEntry = { idKey, doc, view, keys };
    this.entries.set(idKey, entry);
    this.addKeys(entry);
    this.changed(idKey);
    this.enforceCap();
    return entry;
  }

  /**
   * A capped collection keeps at most `max` documents and `size` bytes (rounded
   * up to a multiple of 256, at least 4096, as MongoDB does): the oldest go first.
   */
  private enforceCap(): void {
    if (!isTruthy(this.options.capped)) return;
    const max = numericValue(this.options.max) ?? 0;
    const size = Math.max(4096, Math.ceil((numericValue(this.options.size) ?? 0) / 256) * 256);
    let bytes = this.dataSize();
    for (const oldest of this.entries.values()) {
      if (this.entries.size <= 1) break;
      if (!(max > 0 && this.entries.size > max) && bytes <= size) break;
      bytes -= BSON.calculateObjectSize(oldest.doc);
      this.remove(oldest);
    }
  }

  /** Replaces a stored document by its new version (same `_id`). Throws on a duplicate key. */
  replace(entry: StoredEntry, next: Doc): StoredEntry {
    const doc = withIdFirst(next);
    if (canonicalKey(doc._id) !== entry.idKey) throw ERRORS.immutableId();
    if (this.entries.get(entry.idKey) !== entry) {
      throw new MongoCommandError('InternalError', 'document changed during the update');
    }
    this.checkSize(doc);
    const view = toQueryDoc(doc);
    const keys = this.computeKeys(doc, view);
    this.checkConflicts(keys, entry.idKey);
    const replacement: StoredEntry = { idKey: entry.idKey, doc, view, keys };
    this.removeKeys(entry);
    this.entries.set(entry.idKey, replacement);
    this.addKeys(replacement);
    this.changed(entry.idKey);
    return replacement;
  }

  remove(entry: StoredEntry): void {
    if (this.entries.get(entry.idKey) !== entry) return;
    this.removeKeys(entry);
    this.entries.delete(entry.idKey);
    this.changed(entry.idKey);
  }

  indexSpecs(): Doc[] {
    return this.indexes.map((index) => index.spec);
  }

  /** The stored spec of one index, by name or key pattern (collMod changes it in place). */
  indexSpec(nameOrKey: string | Doc): Doc | undefined {
    return this.indexes.find((index) =>
      typeof nameOrKey === 'string'
        ? index.name === nameOrKey
        : index.sameKeyPattern(new IndexDefinition({ key: nameOrKey, name: 'probe' })),
    )?.spec;
  }

  get indexCount(): number {
    return this.indexes.length;
  }

  /** Creates an index; an identical existing index is a no-op. */
  createIndex(spec: Doc): CreateIndexOutcome {
    const index = new IndexDefinition(spec);
    const sameName = this.indexes.find((existing) => existing.name === index.name);
    if (sameName) {
      if (sameName.sameKeyPattern(index) && sameName.sameOptions(index)) return 'exists';
      if (sameName.sameKeyPattern(index)) {
        throw new MongoCommandError(
          'IndexOptionsConflict',
          `An equivalent index already exists with the same name but different options. Requested index: ${JSON.stringify(index.spec)}, existing index: ${JSON.stringify(sameName.spec)}`,
        );
      }
      throw new MongoCommandError(
        'IndexKeySpecsConflict',
        `An existing index has the same name as the requested index. When index names are not specified, they are auto generated and can cause conflicts. Please refer to our documentation. Requested index: ${JSON.stringify(index.spec)}, existing index: ${JSON.stringify(sameName.spec)}`,
      );
    }
    const sameKey = this.indexes.find((existing) => existing.sameKeyPattern(index));
    if (sameKey) {
      throw new MongoCommandError(
        'IndexOptionsConflict',
        sameKey.sameOptions(index)
          ? `Index already exists with a different name: ${sameKey.name}`
          : `An existing index has the same key pattern but different options. Requested index: ${JSON.stringify(index.spec)}, existing index: ${JSON.stringify(sameKey.spec)}`,
      );
    }

    if (index.unique) {
      // Build the key map first: existing duplicates fail the build, as in MongoDB.
      for (const entry of this.entries.values()) {
        for (const key of index.keysFor(entry.doc, entry.view) ?? []) {
          const owner = index.owners.get(key.key);
          if (owner !== undefined && owner !== entry.idKey) {
            throw index.duplicateKeyError(this.ns, key.values, 'Index build failed: ');
          }
          index.owners.set(key.key, entry.idKey);
        }
      }
      this.indexes.push(index);
      for (const [idKey, entry] of this.entries) {
        const keys = new Map(entry.keys);
        const indexKeys = index.keysFor(entry.doc, entry.view);
        if (indexKeys) keys.set(index.name, indexKeys);
        this.entries.set(idKey, { ...entry, keys });
      }
    } else {
      this.indexes.push(index);
    }
    this.definitionChanged();
    return 'created';
  }

  /** Drops one index by name or key pattern. */
  dropIndex(nameOrKey: string | Doc): void {
    const position = this.indexes.findIndex((index) =>
      typeof nameOrKey === 'string'
        ? index.name === nameOrKey
        : index.sameKeyPattern(new IndexDefinition({ key: nameOrKey, name: 'probe' })),
    );
    const index = this.indexes[position];
    if (!index) {
      throw new MongoCommandError(
        'IndexNotFound',
        typeof nameOrKey === 'string'
          ? `index not found with name [${nameOrKey}]`
          : `can't find index with key: ${JSON.stringify(nameOrKey)}`,
      );
    }
    if (index.isIdIndex) throw new MongoCommandError('InvalidOptions', 'cannot drop _id index');
    this.indexes.splice(position, 1);
    this.definitionChanged();
  }

  /** Drops every index but `_id_`. */
  dropAllIndexes(): void {
    this.indexes.splice(1);
    this.definitionChanged();
  }

  hasIndex(name: string): boolean {
    return this.indexes.some((index) => index.name === name);
  }
}

const INVALID_DB_CHARS = /[/\\. "$*<>:|?\0]/;

function validateDbName(db: string): void {
  if (!db || INVALID_DB_CHARS.test(db) || db.length >= 64) {
    throw ERRORS.invalidNamespace(`Invalid database name: '${db}'`);
  }
}

function validateCollectionName(db: string, name: string): void {
  if (!name || name.includes('\0') || (name.includes('$') && !name.startsWith('system.'))) {
    throw ERRORS.invalidNamespace(`Invalid collection name: ${db}.${name}`);
  }
}

export class StorageEngine implements ChangeSink {
  private readonly databases = new Map<string, Map<string, CollectionStore>>();
  private journal: JournalEntry[] = [];
  /** Whether changes are noted (only when something takes them: persistence.ts). */
  journaling = false;

  note(entry: JournalEntry): void {
    if (this.journaling) this.journal.push(entry);
  }

  /** The changes since the last call, in order (and forgets them). */
  takeJournal(): JournalEntry[] {
    const taken = this.journal;
    this.journal = [];
    return taken;
  }

  collection(db: string, name: string): CollectionStore | undefined {
    return this.databases.get(db)?.get(name);
  }

  /** The collection, created implicitly (as a first write does) when missing. */
  ensureCollection(db: string, name: string): { store: CollectionStore; created: boolean } {
    const existing = this.collection(db, name);
    if (existing) return { store: existing, created: false };
    return { store: this.createCollection(db, name), created: true };
  }

  createCollection(db: string, name: string, options: Doc = {}): CollectionStore {
    validateDbName(db);
    validateCollectionName(db, name);
    let collections = this.databases.get(db);
    if (!collections) {
      collections = new Map();
      this.databases.set(db, collections);
    }
    if (collections.has(name)) {
      throw new MongoCommandError('NamespaceExists', `Collection ${db}.${name} already exists.`);
    }
    const store = new CollectionStore(db, name, options, this);
    collections.set(name, store);
    this.note({ kind: 'definition', store });
    return store;
  }

  dropCollection(db: string, name: string): CollectionStore | undefined {
    const collections = this.databases.get(db);
    const store = collections?.get(name);
    if (!collections || !store) return undefined;
    collections.delete(name);
    if (collections.size === 0) this.databases.delete(db);
    this.note({ kind: 'dropCollection', db, name });
    return store;
  }

  dropDatabase(db: string): boolean {
    this.note({ kind: 'dropDatabase', db });
    return this.databases.delete(db);
  }

  collections(db: string): CollectionStore[] {
    return [...(this.databases.get(db)?.values() ?? [])];
  }

  databaseNames(): string[] {
    return [...this.databases.keys()];
  }

  /** Forgets everything in memory (closing); nothing is journaled. */
  clear(): void {
    this.databases.clear();
    this.journal = [];
  }
}
