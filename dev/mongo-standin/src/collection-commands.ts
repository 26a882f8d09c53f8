// Collection and database commands: create (with its options kept for
// listCollections; a capped collection needs its size, a collation must be
// valid), collMod (index hiding, options kept), drop, dropDatabase,
// listCollections and listDatabases.

import type { Doc } from './bson-values';
import { isPlainObject, isTruthy, toQueryDoc } from './bson-values';
import { normalizeCollation } from './bson-compare';
import { checkValidationOptions } from './document-validation';
import { ERRORS, MongoCommandError } from './command-errors';
import type { CommandHandler } from './command-context';
import {
  collectionArg,
  cursorBatchSize,
  cursorReply,
  optionalDoc,
  requireCollection,
} from './command-context';
import { compileFilter } from './mingo-adapter';

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

export const create: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  if (ctx.command.viewOn !== undefined) throw ERRORS.notImplemented('Views');
  const options: Doc = {};
  for (const [field, value] of Object.entries(ctx.command)) {
    if (COLLECTION_OPTION_FIELDS.has(field)) options[field] = value;
  }
  if (isTruthy(options.capped) && options.size === undefined) {
    throw new MongoCommandError(
      'InvalidOptions',
      "the 'size' field is required when 'capped' is true",
    );
  }
  if (!isTruthy(options.capped) && (options.size !== undefined || options.max !== undefined)) {
    throw new MongoCommandError(
      'InvalidOptions',
      "the 'capped' field needs to be true when either the 'size' or 'max' fields are present",
    );
  }
  if (options.collation !== undefined) {
    if (!isPlainObject(options.collation)) throw ERRORS.typeMismatch('create.collation', 'object');
    normalizeCollation(options.collation);
  }
  checkValidationOptions(options);
  ctx.engine.createCollection(ctx.db, name, options);
  return {};
};

/** collMod's options the stand-in keeps (for listCollections) and what they change. */
const COLLMOD_OPTIONS = new Set([
  'validator',
  'validationLevel',
  'validationAction',
  'expireAfterSeconds',
  'changeStreamPreAndPostImages',
  'timeseries',
]);

export const collMod: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const store = requireCollection(ctx, name);
  const reply: Doc = {};
  for (const [field, value] of Object.entries(ctx.command)) {
    if (field === 'collMod' || IGNORED_ARGUMENTS.has(field)) continue;
    if (field === 'index') {
      if (!isPlainObject(value)) throw ERRORS.typeMismatch('collMod.index', 'object');
      const target = value.name ?? value.keyPattern;
      if (typeof target !== 'string' && !isPlainObject(target)) {
        throw new MongoCommandError(
          'InvalidOptions',
          'must specify either index name or key pattern',
        );
      }
      const spec = store.indexSpec(target);
      if (!spec) {
        throw new MongoCommandError(
          'IndexNotFound',
          `cannot find index ${typeof target === 'string' ? target : JSON.stringify(target)} for ns ${store.ns}`,
        );
      }
      if (value.hidden !== undefined) {
        if (spec.name === '_id_') throw ERRORS.badValue("can't hide _id index");
        const before = spec.hidden === true;
        const after = isTruthy(value.hidden);
        if (after) spec.hidden = true;
        else delete spec.hidden;
        if (before !== after) Object.assign(reply, { hidden_old: before, hidden_new: after });
      }
      if (value.expireAfterSeconds !== undefined) {
        reply.expireAfterSeconds_old = spec.expireAfterSeconds;
        reply.expireAfterSeconds_new = value.expireAfterSeconds;
        spec.expireAfterSeconds = value.expireAfterSeconds;
      }
      continue;
    }
    if (!COLLMOD_OPTIONS.has(field)) {
      throw new MongoCommandError('InvalidOptions', `unknown option to collMod: ${field}`);
    }
    checkValidationOptions({ [field]: value });
    store.options[field] = value;
  }
  store.definitionChanged();
  return reply;
};

const IGNORED_ARGUMENTS = new Set([
  'lsid',
  '$db',
  '$clusterTime',
  '$readPreference',
  'writeConcern',
  'comment',
  'apiVersion',
  'apiStrict',
  'apiDeprecationErrors',
  'txnNumber',
]);

export const drop: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const store = ctx.engine.dropCollection(ctx.db, name);
  // Since MongoDB 7.0 dropping a missing collection succeeds.
  return store ? { ns: store.ns, nIndexesWas: store.indexCount } : {};
};

export const dropDatabase: CommandHandler = (ctx) => {
  ctx.engine.dropDatabase(ctx.db);
  return { dropped: ctx.db };
};

const collectionType = (options: Doc): string =>
  isPlainObject(options.timeseries) ? 'timeseries' : 'collection';

export const listCollections: CommandHandler = (ctx) => {
  const filter = optionalDoc(ctx.command, 'filter');
  const nameOnly = isTruthy(ctx.command.nameOnly);
  const matches = compileFilter(filter);
  const docs = ctx.engine
    .collections(ctx.db)
    .map((store): Doc =>
      nameOnly
        ? { name: store.name, type: collectionType(store.options) }
        : {
            name: store.name,
            type: collectionType(store.options),
            options: store.options,
            info: { readOnly: false, uuid: store.uuid },
            idIndex: { v: 2, key: { _id: 1 }, name: '_id_' },
          },
    )
    .filter((doc) => matches(toQueryDoc(doc)));
  const ns = `${ctx.db}.$cmd.listCollections`;
  return cursorReply(ns, ctx.cursors.open(ns, docs, cursorBatchSize(ctx), false), 'firstBatch');
};

export const listDatabases: CommandHandler = (ctx) => {
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
