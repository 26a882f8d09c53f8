// Index commands: createIndexes (all or nothing, as in MongoDB), listIndexes
// and dropIndexes (by name, names, key pattern or '*'). The indexes themselves,
// unique constraints included, are collection-indexes.ts.

import type { Doc } from './bson-values';
import { isPlainObject } from './bson-values';
import { normalizeCollation } from './bson-compare';
import { ERRORS } from './command-errors';
import type { CommandHandler } from './command-context';
import {
  collectionArg,
  cursorBatchSize,
  cursorReply,
  requireCollection,
  requiredDocArray,
} from './command-context';

export const createIndexes: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const specs = requiredDocArray(ctx.command, 'indexes', 'createIndexes.indexes');
  if (specs.length === 0) throw ERRORS.badValue('Must specify at least one index to create');
  // An index without a collation takes the collection's default, as in MongoDB.
  const defaultCollation = ctx.engine.collection(ctx.db, name)?.options.collation;
  const withCollation = specs.map((spec) => {
    if (isPlainObject(spec.collation)) normalizeCollation(spec.collation);
    return spec.collation === undefined && isPlainObject(defaultCollation)
      ? { ...spec, collation: defaultCollation }
      : spec;
  });
  const { store, created } = ctx.engine.ensureCollection(ctx.db, name);
  const numIndexesBefore = store.indexCount;
  const existing = new Set(store.indexSpecs().map((spec) => spec.name));
  try {
    for (const spec of withCollation) store.createIndex(spec);
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

export const listIndexes: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const store = requireCollection(ctx, name);
  const ns = `${ctx.db}.${name}`;
  return cursorReply(
    ns,
    ctx.cursors.open(ns, store.indexSpecs(), cursorBatchSize(ctx), false),
    'firstBatch',
  );
};

export const dropIndexes: CommandHandler = (ctx) => {
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
