// Collection and database commands: create (with its options kept for
// listCollections), drop, dropDatabase, listCollections and listDatabases.

import type { Doc } from './bson-values';
import { isTruthy, toQueryDoc } from './bson-values';
import { ERRORS } from './command-errors';
import type { CommandHandler } from './command-context';
import { collectionArg, cursorBatchSize, cursorReply, optionalDoc } from './command-context';
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
  ctx.engine.createCollection(ctx.db, name, options);
  return {};
};

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

export const listCollections: CommandHandler = (ctx) => {
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
