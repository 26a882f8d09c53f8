// Every command the stand-in answers, in one table: command name → handler.
// A handler gets the (typed) command document and answers the reply fields;
// `runCommand` adds `ok: 1`, or turns any exception into MongoDB's error reply
// `{ ok: 0, errmsg, code, codeName }`. Handlers are synchronous, so each
// command's read-modify-write is atomic with respect to every other command.
//
// Fields every command may carry and the stand-in ignores: lsid, txnNumber,
// $clusterTime, $readPreference, readConcern, writeConcern, comment, maxTimeMS,
// hint, allowDiskUse, apiVersion/apiStrict/apiDeprecationErrors,
// bypassDocumentValidation.

import { Long } from 'bson';
import type { Logger } from 'pino';

import type { Doc } from './bson-values';
import {
  bsonTag,
  canonicalKey,
  cloneDoc,
  ensureId,
  isPlainObject,
  isTruthy,
  optionalNumber,
  restoreTypes,
  toQueryDoc,
  valuesAtPath,
} from './bson-values';
import { ERRORS, MongoCommandError, toCommandError } from './command-errors';
import type { CursorRegistry } from './cursor-registry';
import type { QueryOptions } from './mingo-adapter';
import {
  compileFilter,
  isSimpleProjection,
  normalizeSort,
  projectDoc,
  runPipeline,
} from './mingo-adapter';
import type { CollectionStore, StorageEngine, StoredEntry } from './storage-engine';
import { MAX_BSON_OBJECT_SIZE } from './storage-engine';
import type { UpdateDocument } from './update-engine';
import { applyUpdate, buildUpsertSeed, documentsEqual, isOperatorUpdate } from './update-engine';
import { MAX_MESSAGE_SIZE } from './wire-protocol';

/** Wire version 21 = MongoDB 7.0 (driver 7.8 accepts 9 to 29, i.e. MongoDB 4.4 to 9.0). */
export const MAX_WIRE_VERSION = 21;
export const SERVER_VERSION = '7.0.0';
const MAX_WRITE_BATCH_SIZE = 100_000;
const LOGICAL_SESSION_TIMEOUT_MINUTES = 30;

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
function collectionArg(ctx: CommandContext): string {
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

function optionalDoc(cmd: Doc, field: string, path = field): Doc | undefined {
  const value = cmd[field];
  if (value === undefined || value === null) return undefined;
  if (!isPlainObject(value)) throw ERRORS.typeMismatch(path, 'object');
  return value;
}

function requiredDocArray(cmd: Doc, field: string, path = field): Doc[] {
  const value = cmd[field];
  if (!Array.isArray(value)) throw ERRORS.typeMismatch(path, 'array');
  return value.map((item, i) => {
    if (!isPlainObject(item)) throw ERRORS.typeMismatch(`${path}.${i}`, 'object');
    return item;
  });
}

function optionalDocArray(cmd: Doc, field: string): Doc[] | undefined {
  return cmd[field] === undefined || cmd[field] === null ? undefined : requiredDocArray(cmd, field);
}

function optionalInt(cmd: Doc, field: string): number | undefined {
  const value = cmd[field];
  if (value === undefined || value === null) return undefined;
  const n = optionalNumber(value);
  if (n === undefined || !Number.isFinite(n)) throw ERRORS.typeMismatch(field, 'number');
  return Math.trunc(n);
}

function nonNegative(field: string, value: number | undefined): number | undefined {
  if (value !== undefined && value < 0) {
    throw ERRORS.badValue(`${field} value must be non-negative, but received: ${value}`);
  }
  return value;
}

function queryOptions(ctx: CommandContext, collation?: Doc): QueryOptions {
  const options: QueryOptions = {
    // Copies: pipeline stages after a $lookup may modify what it joined.
    collectionResolver: (name) =>
      (ctx.engine.collection(ctx.db, name)?.views() ?? []).map((view) => cloneDoc(view)),
  };
  const effectiveCollation = collation ?? optionalDoc(ctx.command, 'collation');
  if (effectiveCollation) options.collation = effectiveCollation;
  const variables = optionalDoc(ctx.command, 'let');
  if (variables) options.variables = toQueryDoc(variables);
  return options;
}

function cursorBatchSize(ctx: CommandContext): number | undefined {
  const cursor = optionalDoc(ctx.command, 'cursor');
  return cursor ? nonNegative('batchSize', optionalInt(cursor, 'batchSize')) : undefined;
}

function projectStored(doc: Doc, projection: Doc | undefined, options: QueryOptions): Doc {
  if (!projection || Object.keys(projection).length === 0) return doc;
  if (isSimpleProjection(projection)) return projectDoc(doc, projection, options);
  return restoreTypes(projectDoc(toQueryDoc(doc), projection, options), doc);
}

function cursorReply(
  ns: string,
  batch: ReturnType<CursorRegistry['open']>,
  field: 'firstBatch' | 'nextBatch',
): Doc {
  return { cursor: { [field]: batch.batch, id: batch.id, ns } };
}

// --- handshake and server information ------------------------------------

function helloReply(ctx: CommandContext, legacy: boolean): Doc {
  const reply: Doc = {};
  if (ctx.command.helloOk !== undefined) reply.helloOk = true;
  if (legacy) reply.ismaster = true;
  else reply.isWritablePrimary = true;
  // No setName (standalone), no compression, no topologyVersion (so drivers poll
  // instead of using the streaming hello protocol), no saslSupportedMechs (no auth).
  Object.assign(reply, {
    maxBsonObjectSize: MAX_BSON_OBJECT_SIZE,
    maxMessageSizeBytes: MAX_MESSAGE_SIZE,
    maxWriteBatchSize: MAX_WRITE_BATCH_SIZE,
    localTime: new Date(),
    logicalSessionTimeoutMinutes: LOGICAL_SESSION_TIMEOUT_MINUTES,
    connectionId: ctx.connectionId,
    minWireVersion: 0,
    maxWireVersion: MAX_WIRE_VERSION,
    readOnly: false,
  });
  return reply;
}

const buildInfo: CommandHandler = () => ({
  version: SERVER_VERSION,
  gitVersion: 'mongo-standin',
  versionArray: SERVER_VERSION.split('.').map(Number).concat([0]),
  bits: 64,
  debug: false,
  maxBsonObjectSize: MAX_BSON_OBJECT_SIZE,
  storageEngines: ['mongo-standin'],
  javascriptEngine: 'none',
  modules: [],
  openssl: { running: 'disabled' },
});

const PARAMETERS: Doc = {
  featureCompatibilityVersion: { version: SERVER_VERSION.split('.').slice(0, 2).join('.') },
  authenticationMechanisms: [],
  logLevel: 0,
  quiet: false,
};

const getParameter: CommandHandler = (ctx) => {
  if (ctx.command.getParameter === '*') return { ...PARAMETERS };
  const reply: Doc = {};
  for (const field of Object.keys(ctx.command)) {
    if (Object.hasOwn(PARAMETERS, field)) reply[field] = PARAMETERS[field];
  }
  if (Object.keys(reply).length === 0) {
    throw new MongoCommandError('InvalidOptions', 'no option found to get');
  }
  return reply;
};

const notOnStandalone: CommandHandler = () => {
  throw new MongoCommandError(
    'IllegalOperation',
    'Transaction numbers are only allowed on a replica set member or mongos',
  );
};

// --- writes ---------------------------------------------------------------

const insert: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const documents = requiredDocArray(ctx.command, 'documents', 'insert.documents');
  const ordered = ctx.command.ordered === undefined || isTruthy(ctx.command.ordered);
  const { store } = ctx.engine.ensureCollection(ctx.db, name);
  let n = 0;
  const writeErrors: Doc[] = [];
  for (const [index, document] of documents.entries()) {
    try {
      store.insert(ensureId(document));
      n++;
    } catch (error) {
      writeErrors.push(toCommandError(error).toWriteError(index));
      if (ordered) break;
    }
  }
  return writeErrors.length ? { n, writeErrors } : { n };
};

function upsertDocument(
  filter: Doc,
  update: UpdateDocument,
  arrayFilters: Doc[] | undefined,
  options: QueryOptions,
): Doc {
  const seed = buildUpsertSeed(filter);
  return ensureId(applyUpdate(seed, update, { insert: true, filter, arrayFilters, options }));
}

function updateArg(value: unknown, field: string): UpdateDocument {
  if (Array.isArray(value)) {
    return value.map((stage, i) => {
      if (!isPlainObject(stage)) throw ERRORS.typeMismatch(`${field}.${i}`, 'object');
      return stage;
    });
  }
  if (!isPlainObject(value)) throw ERRORS.typeMismatch(field, 'object or array');
  return value;
}

const update: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const statements = requiredDocArray(ctx.command, 'updates', 'update.updates');
  const ordered = ctx.command.ordered === undefined || isTruthy(ctx.command.ordered);
  let n = 0;
  let nModified = 0;
  const upserted: Doc[] = [];
  const writeErrors: Doc[] = [];
  for (const [index, statement] of statements.entries()) {
    try {
      const filter = optionalDoc(statement, 'q', 'update.updates.q') ?? {};
      const change = updateArg(statement.u, 'update.updates.u');
      const multi = isTruthy(statement.multi);
      const upsert = isTruthy(statement.upsert);
      const arrayFilters = optionalDocArray(statement, 'arrayFilters');
      const options = queryOptions(ctx, optionalDoc(statement, 'collation'));
      if (multi && !Array.isArray(change) && !isOperatorUpdate(change)) {
        throw ERRORS.failedToParse('multi update is not supported for replacement-style update');
      }
      const store = ctx.engine.collection(ctx.db, name);
      const sort = normalizeSort(statement.sort);
      const matched = store
        ? store.findEntries(filter, { ...options, sort, limit: multi ? 0 : 1 })
        : [];
      if (matched.length === 0) {
        if (upsert) {
          const doc = upsertDocument(filter, change, arrayFilters, options);
          ctx.engine.ensureCollection(ctx.db, name).store.insert(doc);
          n++;
          upserted.push({ index, _id: doc._id });
        }
        continue;
      }
      for (const entry of matched) {
        const next = applyUpdate(entry.doc, change, {
          insert: false,
          filter,
          arrayFilters,
          options,
        });
        n++;
        if (!documentsEqual(entry.doc, next)) {
          store!.replace(entry, next);
          nModified++;
        }
      }
    } catch (error) {
      writeErrors.push(toCommandError(error).toWriteError(index));
      if (ordered) break;
    }
  }
  const reply: Doc = { n, nModified };
  if (upserted.length) reply.upserted = upserted;
  if (writeErrors.length) reply.writeErrors = writeErrors;
  return reply;
};

const remove: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const statements = requiredDocArray(ctx.command, 'deletes', 'delete.deletes');
  const ordered = ctx.command.ordered === undefined || isTruthy(ctx.command.ordered);
  let n = 0;
  const writeErrors: Doc[] = [];
  for (const [index, statement] of statements.entries()) {
    try {
      const filter = optionalDoc(statement, 'q', 'delete.deletes.q') ?? {};
      const limit = optionalInt(statement, 'limit') ?? 0;
      if (limit !== 0 && limit !== 1) {
        throw ERRORS.failedToParse(
          `The limit field in delete objects must be 0 or 1. Got ${limit}`,
        );
      }
      const store = ctx.engine.collection(ctx.db, name);
      if (!store) continue;
      const options = queryOptions(ctx, optionalDoc(statement, 'collation'));
      for (const entry of store.findEntries(filter, { ...options, limit })) {
        store.remove(entry);
        n++;
      }
    } catch (error) {
      writeErrors.push(toCommandError(error).toWriteError(index));
      if (ordered) break;
    }
  }
  return writeErrors.length ? { n, writeErrors } : { n };
};

const findAndModify: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const cmd = ctx.command;
  const filter = optionalDoc(cmd, 'query') ?? {};
  const sort = normalizeSort(cmd.sort);
  const fields = optionalDoc(cmd, 'fields');
  const removeDoc = isTruthy(cmd.remove);
  const upsert = isTruthy(cmd.upsert);
  const returnNew = isTruthy(cmd.new);
  const arrayFilters = optionalDocArray(cmd, 'arrayFilters');
  const options = queryOptions(ctx);
  if (removeDoc && cmd.update !== undefined) {
    throw ERRORS.failedToParse('Cannot specify both an update and remove=true');
  }
  if (!removeDoc && cmd.update === undefined) {
    throw ERRORS.failedToParse('Either an update or remove=true must be specified');
  }
  if (removeDoc && (upsert || returnNew)) {
    throw ERRORS.failedToParse(
      'Cannot specify both upsert=true and remove=true, or new=true and remove=true',
    );
  }

  const store = ctx.engine.collection(ctx.db, name);
  const entry: StoredEntry | undefined = store?.findEntries(filter, {
    ...options,
    sort,
    limit: 1,
  })[0];
  const project = (doc: Doc | undefined): Doc | null =>
    doc ? projectStored(doc, fields, options) : null;

  if (removeDoc) {
    if (!store || !entry) return { lastErrorObject: { n: 0 }, value: null };
    store.remove(entry);
    return { lastErrorObject: { n: 1 }, value: project(entry.doc) };
  }

  const change = updateArg(cmd.update, 'findAndModify.update');
  if (store && entry) {
    const next = applyUpdate(entry.doc, change, { insert: false, filter, arrayFilters, options });
    const stored = documentsEqual(entry.doc, next) ? entry : store.replace(entry, next);
    return {
      lastErrorObject: { n: 1, updatedExisting: true },
      value: project(returnNew ? stored.doc : entry.doc),
    };
  }
  if (upsert) {
    const doc = upsertDocument(filter, change, arrayFilters, options);
    const inserted = ctx.engine.ensureCollection(ctx.db, name).store.insert(doc);
    return {
      lastErrorObject: { n: 1, updatedExisting: false, upserted: doc._id },
      value: returnNew ? project(inserted.doc) : null,
    };
  }
  return { lastErrorObject: { n: 0, updatedExisting: false }, value: null };
};

// --- reads ----------------------------------------------------------------

const find: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const cmd = ctx.command;
  const ns = `${ctx.db}.${name}`;
  if (isTruthy(cmd.tailable)) throw ERRORS.notImplemented('tailable cursors');
  const filter = optionalDoc(cmd, 'filter');
  const sort = normalizeSort(cmd.sort);
  const projection = optionalDoc(cmd, 'projection');
  const skip = nonNegative('skip', optionalInt(cmd, 'skip'));
  let limit = optionalInt(cmd, 'limit');
  let singleBatch = isTruthy(cmd.singleBatch);
  if (limit !== undefined && limit < 0) {
    // Legacy negative limit: one batch of at most |limit| documents.
    limit = -limit;
    singleBatch = true;
  }
  const batchSize = nonNegative('batchSize', optionalInt(cmd, 'batchSize'));
  const options = queryOptions(ctx);
  const store = ctx.engine.collection(ctx.db, name);
  const entries = store ? store.findEntries(filter, { ...options, sort, skip, limit }) : [];
  const docs = entries.map((entry) => projectStored(entry.doc, projection, options));
  return cursorReply(ns, ctx.cursors.open(ns, docs, batchSize, singleBatch), 'firstBatch');
};

const getMore: CommandHandler = (ctx) => {
  const idValue = ctx.command.getMore;
  const id =
    idValue instanceof Long ? idValue : Long.fromNumber(optionalNumber(idValue) ?? Number.NaN);
  if (typeof ctx.command.collection !== 'string')
    throw ERRORS.typeMismatch('getMore.collection', 'string');
  const ns = `${ctx.db}.${ctx.command.collection}`;
  const batchSize = nonNegative('batchSize', optionalInt(ctx.command, 'batchSize'));
  return cursorReply(ns, ctx.cursors.getMore(id, ns, batchSize), 'nextBatch');
};

const killCursors: CommandHandler = (ctx) => {
  collectionArg(ctx);
  const ids = ctx.command.cursors;
  if (!Array.isArray(ids)) throw ERRORS.typeMismatch('killCursors.cursors', 'array');
  const longs = ids.map((id) =>
    id instanceof Long ? id : Long.fromNumber(optionalNumber(id) ?? Number.NaN),
  );
  const { killed, notFound } = ctx.cursors.kill(longs);
  return { cursorsKilled: killed, cursorsNotFound: notFound, cursorsAlive: [], cursorsUnknown: [] };
};

const UNSUPPORTED_STAGES: Record<string, () => MongoCommandError> = {
  $out: () => ERRORS.notImplemented('The $out aggregation stage'),
  $merge: () => ERRORS.notImplemented('The $merge aggregation stage'),
  $changeStream: () =>
    new MongoCommandError(
      'Location40573',
      'The $changeStream stage is only supported on replica sets',
    ),
  $search: () => ERRORS.notImplemented('The $search aggregation stage'),
  $vectorSearch: () => ERRORS.notImplemented('The $vectorSearch aggregation stage'),
};

const aggregate: CommandHandler = (ctx) => {
  const target = ctx.command.aggregate;
  const pipeline = requiredDocArray(ctx.command, 'pipeline', 'aggregate.pipeline');
  if (isTruthy(ctx.command.explain)) throw ERRORS.notImplemented('explain');
  if (ctx.command.cursor === undefined) {
    throw ERRORS.failedToParse(
      "The 'cursor' option is required, except for aggregate with the explain argument",
    );
  }
  for (const stage of pipeline) {
    const stageName = Object.keys(stage)[0] ?? '';
    if (Object.hasOwn(UNSUPPORTED_STAGES, stageName)) throw UNSUPPORTED_STAGES[stageName]!();
  }
  let views: Doc[] = [];
  let ns: string;
  if (typeof target === 'string') {
    ns = `${ctx.db}.${target}`;
    views = ctx.engine.collection(ctx.db, target)?.views() ?? [];
  } else if (optionalNumber(target) === 1) {
    ns = `${ctx.db}.$cmd.aggregate`;
  } else {
    throw ERRORS.typeMismatch('aggregate', 'string or 1');
  }
  const results = runPipeline(views, pipeline, queryOptions(ctx));
  return cursorReply(ns, ctx.cursors.open(ns, results, cursorBatchSize(ctx), false), 'firstBatch');
};

const count: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const filter = optionalDoc(ctx.command, 'query');
  const skip = nonNegative('skip', optionalInt(ctx.command, 'skip'));
  const limit = Math.abs(optionalInt(ctx.command, 'limit') ?? 0);
  const store = ctx.engine.collection(ctx.db, name);
  if (!store) return { n: 0 };
  if (!filter && !skip && !limit) return { n: store.count };
  return { n: store.findEntries(filter, { ...queryOptions(ctx), skip, limit }).length };
};

const distinct: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const key = ctx.command.key;
  if (typeof key !== 'string') throw ERRORS.typeMismatch('distinct.key', 'string');
  const filter = optionalDoc(ctx.command, 'query');
  const store = ctx.engine.collection(ctx.db, name);
  const values: unknown[] = [];
  const seen = new Set<string>();
  for (const entry of store?.findEntries(filter, queryOptions(ctx)) ?? []) {
    for (const value of valuesAtPath(entry.doc, key.split('.'))) {
      for (const item of Array.isArray(value) ? (value as unknown[]) : [value]) {
        const itemKey = canonicalKey(item);
        if (seen.has(itemKey)) continue;
        seen.add(itemKey);
        values.push(item);
      }
    }
  }
  return { values };
};

// --- collections, databases and indexes ------------------------------------

function requireCollection(ctx: CommandContext, name: string): CollectionStore {
  const store = ctx.engine.collection(ctx.db, name);
  if (!store) throw ERRORS.namespaceNotFound(`${ctx.db}.${name}`);
  return store;
}

const createIndexes: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const specs = requiredDocArray(ctx.command, 'indexes', 'createIndexes.indexes');
  if (specs.length === 0) throw ERRORS.badValue('Must specify at least one index to create');
  const { store, created } = ctx.engine.ensureCollection(ctx.db, name);
  const numIndexesBefore = store.indexCount;
  const existing = new Set(store.indexSpecs().map((spec) => spec.name));
  try {
    for (const spec of specs) store.createIndex(spec);
  } catch (error) {
    // All or nothing, as in MongoDB: undo the indexes this command already built.
    for (const spec of store.indexSpecs()) {
      if (typeof spec.name === 'string' && !existing.has(spec.name)) store.dropIndex(spec.name);
    }
    throw error;
  }
  const numIndexesAfter = store.indexCount;
  const reply: Doc = { createdCollectionAutomatically: created, numIndexesBefore, numIndexesAfter };
  if (numIndexesAfter === numIndexesBefore) reply.note = 'all indexes already exist';
  return reply;
};

const listIndexes: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const store = requireCollection(ctx, name);
  const ns = `${ctx.db}.${name}`;
  return cursorReply(
    ns,
    ctx.cursors.open(ns, store.indexSpecs(), cursorBatchSize(ctx), false),
    'firstBatch',
  );
};

const dropIndexes: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const store = requireCollection(ctx, name);
  const nIndexesWas = store.indexCount;
  const index = ctx.command.index;
  if (index === '*') {
    store.dropAllIndexes();
  } else if (typeof index === 'string') {
    store.dropIndex(index);
  } else if (Array.isArray(index)) {
    const names = index.map((item) => {
      if (typeof item !== 'string') throw ERRORS.typeMismatch('dropIndexes.index', 'string');
      return item;
    });
    // All or nothing: an unknown name fails before anything is dropped.
    const missing = names.find((indexName) => !store.hasIndex(indexName));
    if (missing !== undefined) store.dropIndex(missing);
    for (const indexName of names) store.dropIndex(indexName);
  } else if (isPlainObject(index)) {
    store.dropIndex(index);
  } else {
    throw ERRORS.typeMismatch('dropIndexes.index', 'string, array or object');
  }
  return { nIndexesWas };
};

const COLLECTION_OPTION_FIELDS = new Set([
  'capped',
  'size',
  'max',
  'validator',
  'validationLevel',
  'validationAction',
  'collation',
  'timeseries',
  'expireAfterSeconds',
  'clusteredIndex',
  'changeStreamPreAndPostImages',
  'storageEngine',
  'indexOptionDefaults',
]);

const create: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  if (ctx.command.viewOn !== undefined) throw ERRORS.notImplemented('Views');
  const options: Doc = {};
  for (const [field, value] of Object.entries(ctx.command)) {
    if (COLLECTION_OPTION_FIELDS.has(field)) options[field] = value;
  }
  ctx.engine.createCollection(ctx.db, name, options);
  return {};
};

const drop: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const store = ctx.engine.dropCollection(ctx.db, name);
  // Since MongoDB 7.0 dropping a missing collection succeeds.
  return store ? { ns: store.ns, nIndexesWas: store.indexCount } : {};
};

const dropDatabase: CommandHandler = (ctx) => {
  ctx.engine.dropDatabase(ctx.db);
  return { dropped: ctx.db };
};

const listCollections: CommandHandler = (ctx) => {
  const filter = optionalDoc(ctx.command, 'filter');
  const nameOnly = isTruthy(ctx.command.nameOnly);
  const matches = compileFilter(filter);
  const docs = ctx.engine
    .collections(ctx.db)
    .map((store): Doc =>
      nameOnly
        ? { name: store.name, type: 'collection' }
        : {
            name: store.name,
            type: 'collection',
            options: store.options,
            info: { readOnly: false, uuid: store.uuid },
            idIndex: { v: 2, key: { _id: 1 }, name: '_id_' },
          },
    )
    .filter((doc) => matches(toQueryDoc(doc)));
  const ns = `${ctx.db}.$cmd.listCollections`;
  return cursorReply(ns, ctx.cursors.open(ns, docs, cursorBatchSize(ctx), false), 'firstBatch');
};

const listDatabases: CommandHandler = (ctx) => {
  const nameOnly = isTruthy(ctx.command.nameOnly);
  const matches = compileFilter(optionalDoc(ctx.command, 'filter'));
  let totalSize = 0;
  const databases = ctx.engine
    .databaseNames()
    .map((name): Doc => {
      const sizeOnDisk = ctx.engine
        .collections(name)
        .reduce((sum, store) => sum + store.dataSize(), 0);
      return nameOnly ? { name } : { name, sizeOnDisk, empty: sizeOnDisk === 0 };
    })
    .filter((doc) => matches(toQueryDoc(doc)));
  for (const db of databases) totalSize += typeof db.sizeOnDisk === 'number' ? db.sizeOnDisk : 0;
  return nameOnly
    ? { databases }
    : { databases, totalSize, totalSizeMb: Math.floor(totalSize / 1048576) };
};

// --- the table --------------------------------------------------------------

const ok: CommandHandler = () => ({});

/** Command name → handler. Lookup is exact (MongoDB command names are case sensitive). */
export const COMMAND_HANDLERS: ReadonlyMap<string, CommandHandler> = new Map<
  string,
  CommandHandler
>([
  ['hello', (ctx) => helloReply(ctx, false)],
  ['isMaster', (ctx) => helloReply(ctx, true)],
  ['ismaster', (ctx) => helloReply(ctx, true)],
  ['ping', ok],
  ['buildInfo', buildInfo],
  ['buildinfo', buildInfo],
  ['getParameter', getParameter],
  ['endSessions', ok],
  ['refreshSessions', ok],
  ['killSessions', ok],
  ['killAllSessions', ok],
  ['commitTransaction', notOnStandalone],
  ['abortTransaction', notOnStandalone],
  ['insert', insert],
  ['update', update],
  ['delete', remove],
  ['findAndModify', findAndModify],
  ['findandmodify', findAndModify],
  ['find', find],
  ['getMore', getMore],
  ['killCursors', killCursors],
  ['aggregate', aggregate],
  ['count', count],
  ['distinct', distinct],
  ['createIndexes', createIndexes],
  ['listIndexes', listIndexes],
  ['dropIndexes', dropIndexes],
  ['deleteIndexes', dropIndexes],
  ['listCollections', listCollections],
  ['create', create],
  ['drop', drop],
  ['dropDatabase', dropDatabase],
  ['listDatabases', listDatabases],
]);

/** Commands a current server still accepts over legacy OP_QUERY. */
export const OP_QUERY_COMMANDS = new Set(['hello', 'isMaster', 'ismaster']);

/**
 * Runs one command and answers its reply document. Never throws: failures
 * become `{ ok: 0, errmsg, code, codeName }`.
 */
export function runCommand(ctx: CommandContext): Doc {
  const name = Object.keys(ctx.command)[0];
  try {
    if (name === undefined) throw ERRORS.failedToParse('empty command document');
    const handler = COMMAND_HANDLERS.get(name);
    if (!handler) throw ERRORS.commandNotFound(name);
    if (ctx.command.startTransaction !== undefined || ctx.command.autocommit !== undefined) {
      notOnStandalone(ctx);
    }
    const reply = handler(ctx);
    if (!('ok' in reply)) reply.ok = 1;
    return reply;
  } catch (error) {
    const commandError = toCommandError(error);
    if (commandError.codeName === 'InternalError') {
      ctx.logger?.error(
        { err: error, command: name, db: ctx.db },
        'mongo stand-in: command failed unexpectedly',
      );
    } else {
      ctx.logger?.debug(
        { command: name, db: ctx.db, code: commandError.code, errmsg: commandError.message },
        'mongo stand-in: command error',
      );
    }
    return commandError.toReply();
  }
}
