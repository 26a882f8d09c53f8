// What every command handler gets and the argument parsing they share: the
// command's collection, typed options (documents, arrays, integers), the query
// options (collation, let, $lookup's collections), projections and cursor replies.
// The handlers live by family: admin-commands.ts (handshake, server information,
// sessions), write-commands.ts, read-commands.ts (find and cursors, aggregate,
// count, distinct), index-commands.ts, collection-commands.ts (collections and
// databases); command-handlers.ts is the table that names them.

import type { Logger } from 'pino';

import type { Doc } from './bson-values';
import {
  bsonTag,
  cloneDoc,
  isPlainObject,
  optionalNumber,
  restoreTypes,
  toQueryDoc,
} from './bson-values';
import { normalizeCollation } from './bson-compare';
import { ERRORS } from './command-errors';
import type { CursorRegistry } from './cursor-registry';
import type { QueryOptions } from './mingo-adapter';
import { isSimpleProjection, projectDoc } from './mingo-adapter';
import type { CollectionStore, StorageEngine } from './storage-engine';

export interface CommandContext {
  /** The database the command runs in (`$db`). */
  db: string;
  command: Doc;
  engine: StorageEngine;
  cursors: CursorRegistry;
  connectionId: number;
  logger?: Logger;
}

export type CommandHandler = (ctx: CommandContext) => Doc;

// --- option parsing -------------------------------------------------------

function commandName(ctx: CommandContext): string {
  return Object.keys(ctx.command)[0]!;
}

/** The collection a command names in its first field. */
export function collectionArg(ctx: CommandContext): string {
  const name = commandName(ctx);
  const value = ctx.command[name];
  if (typeof value !== 'string') {
    throw ERRORS.invalidNamespace(`collection name has invalid type ${describeType(value)}`);
  }
  if (!value) throw ERRORS.invalidNamespace(`Invalid namespace specified '${ctx.db}.'`);
  return value;
}

function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  const tag = bsonTag(value);
  return tag ? tag.toLowerCase() : typeof value;
}

export function optionalDoc(cmd: Doc, field: string, path = field): Doc | undefined {
  const value = cmd[field];
  if (value === undefined || value === null) return undefined;
  if (!isPlainObject(value)) throw ERRORS.typeMismatch(path, 'object');
  return value;
}

export function requiredDocArray(cmd: Doc, field: string, path = field): Doc[] {
  const value = cmd[field];
  if (!Array.isArray(value)) throw ERRORS.typeMismatch(path, 'array');
  return value.map((item, i) => {
    if (!isPlainObject(item)) throw ERRORS.typeMismatch(`${path}.${i}`, 'object');
    return item;
  });
}

export function optionalDocArray(cmd: Doc, field: string): Doc[] | undefined {
  return cmd[field] === undefined || cmd[field] === null ? undefined : requiredDocArray(cmd, field);
}

export function optionalInt(cmd: Doc, field: string): number | undefined {
  const value = cmd[field];
  if (value === undefined || value === null) return undefined;
  const n = optionalNumber(value);
  if (n === undefined || !Number.isFinite(n)) throw ERRORS.typeMismatch(field, 'number');
  return Math.trunc(n);
}

export function nonNegative(field: string, value: number | undefined): number | undefined {
  if (value !== undefined && value < 0) {
    throw ERRORS.badValue(`${field} value must be non-negative, but received: ${value}`);
  }
  return value;
}

/**
 * The query options of a command: its collation (else, with `collection`
 * given, that collection's default collation), `let` variables, and the
 * resolver for $lookup's collections. The collation is checked here, so a
 * bad one fails the command before anything runs.
 */
export function queryOptions(
  ctx: CommandContext,
  collation?: Doc,
  collection?: string,
): QueryOptions {
  const options: QueryOptions = {
    // Copies: pipeline stages after a $lookup may modify what it joined.
    collectionResolver: (name) =>
      (ctx.engine.collection(ctx.db, name)?.views() ?? []).map((view) => cloneDoc(view)),
  };
  let effectiveCollation = collation ?? optionalDoc(ctx.command, 'collation');
  if (!effectiveCollation && collection !== undefined) {
    const fallback = ctx.engine.collection(ctx.db, collection)?.options.collation;
    if (isPlainObject(fallback)) effectiveCollation = fallback;
  }
  if (effectiveCollation) {
    normalizeCollation(effectiveCollation);
    options.collation = effectiveCollation;
  }
  const variables = optionalDoc(ctx.command, 'let');
  if (variables) options.variables = toQueryDoc(variables);
  return options;
}

export function cursorBatchSize(ctx: CommandContext): number | undefined {
  const cursor = optionalDoc(ctx.command, 'cursor');
  return cursor ? nonNegative('batchSize', optionalInt(cursor, 'batchSize')) : undefined;
}

export function projectStored(
  doc: Doc,
  projection: Doc | undefined,
  options: QueryOptions,
  filter?: Doc,
): Doc {
  if (!projection || Object.keys(projection).length === 0) return doc;
  if (isSimpleProjection(projection)) return projectDoc(doc, projection, options);
  return restoreTypes(projectDoc(toQueryDoc(doc), projection, options, filter), doc);
}

export function cursorReply(
  ns: string,
  batch: ReturnType<CursorRegistry['open']>,
  field: 'firstBatch' | 'nextBatch',
): Doc {
  return { cursor: { [field]: batch.batch, id: batch.id, ns } };
}

export function requireCollection(ctx: CommandContext, name: string): CollectionStore {
  const store = ctx.engine.collection(ctx.db, name);
  if (!store) throw ERRORS.namespaceNotFound(`${ctx.db}.${name}`);
  return store;
}

/**
 * The order a `hint` makes a scan return documents in when nothing sorts them:
 * the hinted index's key order ({ $natural: ±1 }: insertion order). A hint that
 * names no index of an existing collection is MongoDB's BadValue.
 */
export function hintOrder(
  hint: unknown,
  store: CollectionStore | undefined,
): Record<string, 1 | -1> | undefined {
  if (hint === undefined || hint === null || !store) return undefined;
  if (isPlainObject(hint) && Object.keys(hint).length === 0) return undefined;
  if (isPlainObject(hint) && '$natural' in hint) {
    return { $natural: optionalNumber(hint.$natural) === -1 ? -1 : 1 };
  }
  const spec = typeof hint === 'string' || isPlainObject(hint) ? store.indexSpec(hint) : undefined;
  if (!spec || !isPlainObject(spec.key)) {
    throw ERRORS.badValue('hint provided does not correspond to an existing index');
  }
  const order: Record<string, 1 | -1> = {};
  for (const [field, direction] of Object.entries(spec.key)) {
    const n = optionalNumber(direction);
    if (n === undefined) return undefined;
    order[field] = n < 0 ? -1 : 1;
  }
  return order;
}

const INDEX_BOUNDS = new Set(['$eq', '$in', '$gt', '$gte', '$lt', '$lte']);

/**
 * The order MongoDB's plan returns an unsorted query in when the filter bounds
 * `_id` (equality, $in, a range): a scan of the `_id` index, so ascending `_id`.
 * Clients rely on it (mongoose's populate with a limit does); other indexes are
 * not modelled, so any other query returns documents in insertion order.
 */
export function idIndexOrder(filter: Doc | undefined): Record<string, 1 | -1> | undefined {
  if (!filter || !Object.prototype.hasOwnProperty.call(filter, '_id')) return undefined;
  const condition = filter._id;
  if (isPlainObject(condition) && Object.keys(condition).some((key) => key.startsWith('$'))) {
    return Object.keys(condition).every((key) => INDEX_BOUNDS.has(key)) ? { _id: 1 } : undefined;
  }
  return { _id: 1 };
}
