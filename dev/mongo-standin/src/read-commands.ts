// Read commands: find and its cursor (getMore, killCursors), aggregate
// (through mingo; stages that write or need a replica set are refused),
// count and distinct.

import { Long } from 'bson';

import type { Doc } from './bson-values';
import { canonicalKey, isPlainObject, isTruthy, optionalNumber, valuesAtPath } from './bson-values';
import { bsonEquals, stringComparer } from './bson-compare';
import { ERRORS, MongoCommandError } from './command-errors';
import type { CommandHandler } from './command-context';
import {
  collectionArg,
  cursorBatchSize,
  cursorReply,
  hintOrder,
  idIndexOrder,
  nonNegative,
  optionalDoc,
  optionalInt,
  projectStored,
  queryOptions,
  requiredDocArray,
} from './command-context';
import { compileFilter, normalizeSort, runPipeline, sortViews } from './mingo-adapter';

export const find: CommandHandler = (ctx) => {
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
  const options = queryOptions(ctx, undefined, name);
  const store = ctx.engine.collection(ctx.db, name);
  // A missing collection still validates the filter, as MongoDB does.
  if (!store) compileFilter(filter, options);
  const order = sort ?? hintOrder(cmd.hint, store) ?? idIndexOrder(filter);
  const entries = store ? store.findEntries(filter, { ...options, sort: order, skip, limit }) : [];
  const docs = entries.map((entry) => projectStored(entry.doc, projection, options, filter));
  return cursorReply(ns, ctx.cursors.open(ns, docs, batchSize, singleBatch), 'firstBatch');
};

export const getMore: CommandHandler = (ctx) => {
  const idValue = ctx.command.getMore;
  const id =
    idValue instanceof Long ? idValue : Long.fromNumber(optionalNumber(idValue) ?? Number.NaN);
  if (typeof ctx.command.collection !== 'string')
    throw ERRORS.typeMismatch('getMore.collection', 'string');
  const ns = `${ctx.db}.${ctx.command.collection}`;
  const batchSize = nonNegative('batchSize', optionalInt(ctx.command, 'batchSize'));
  return cursorReply(ns, ctx.cursors.getMore(id, ns, batchSize), 'nextBatch');
};

export const killCursors: CommandHandler = (ctx) => {
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

export const aggregate: CommandHandler = (ctx) => {
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
  let options;
  if (typeof target === 'string') {
    ns = `${ctx.db}.${target}`;
    views = ctx.engine.collection(ctx.db, target)?.views() ?? [];
    options = queryOptions(ctx, undefined, target);
  } else if (optionalNumber(target) === 1) {
    ns = `${ctx.db}.$cmd.aggregate`;
    options = queryOptions(ctx);
  } else {
    throw ERRORS.typeMismatch('aggregate', 'string or 1');
  }
  // Leading $match stages run on the stored query forms (whose typed twins
  // $type reads), before mingo copies the documents.
  let rest = pipeline;
  while (rest.length && isPlainObject(rest[0]!.$match) && Object.keys(rest[0]!).length === 1) {
    const matches = compileFilter(rest[0]!.$match, options);
    views = views.filter((view) => matches(view));
    rest = rest.slice(1);
  }
  if (typeof target === 'string') {
    const order = hintOrder(ctx.command.hint, ctx.engine.collection(ctx.db, target));
    if (order) views = sortViews(views, order, options);
  }
  const results = rest.length ? runPipeline(views, rest, options) : views;
  return cursorReply(ns, ctx.cursors.open(ns, results, cursorBatchSize(ctx), false), 'firstBatch');
};

export const count: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const filter = optionalDoc(ctx.command, 'query');
  const skip = nonNegative('skip', optionalInt(ctx.command, 'skip'));
  const limit = Math.abs(optionalInt(ctx.command, 'limit') ?? 0);
  const store = ctx.engine.collection(ctx.db, name);
  const options = queryOptions(ctx, undefined, name);
  if (!store) {
    compileFilter(filter, options);
    return { n: 0 };
  }
  if (!filter && !skip && !limit) return { n: store.count };
  return { n: store.findEntries(filter, { ...options, skip, limit }).length };
};

export const distinct: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const key = ctx.command.key;
  if (typeof key !== 'string') throw ERRORS.typeMismatch('distinct.key', 'string');
  const filter = optionalDoc(ctx.command, 'query');
  const store = ctx.engine.collection(ctx.db, name);
  const options = queryOptions(ctx, undefined, name);
  if (!store) compileFilter(filter, options);
  const values: unknown[] = [];
  const seen = new Set<string>();
  const strings = stringComparer(options.collation);
  for (const entry of store?.findEntries(filter, options) ?? []) {
    for (const value of valuesAtPath(entry.doc, key.split('.'))) {
      for (const item of Array.isArray(value) ? (value as unknown[]) : [value]) {
        const itemKey = canonicalKey(item);
        if (seen.has(itemKey)) continue;
        // Under a collation, strings it calls equal are one value.
        if (strings && values.some((other) => bsonEquals(other, item, strings))) continue;
        seen.add(itemKey);
        values.push(item);
      }
    }
  }
  return { values };
};
