// Write commands: insert, update, delete and findAndModify, with MongoDB's
// reply shapes (n, nModified, upserted, writeErrors per statement; ordered
// batches stop at the first error) and upserts seeded from the filter.

import type { Doc } from './bson-values';
import { ensureId, isPlainObject, isTruthy } from './bson-values';
import { ERRORS, toCommandError } from './command-errors';
import type { CommandHandler } from './command-context';
import {
  collectionArg,
  optionalDoc,
  optionalDocArray,
  optionalInt,
  projectStored,
  queryOptions,
  requiredDocArray,
} from './command-context';
import type { QueryOptions } from './mingo-adapter';
import { compileFilter, normalizeSort } from './mingo-adapter';
import type { StoredEntry } from './storage-engine';
import type { UpdateDocument } from './update-engine';
import { applyUpdate, buildUpsertSeed, documentsEqual, isOperatorUpdate } from './update-engine';
import { validateWrite } from './document-validation';

export const insert: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const documents = requiredDocArray(ctx.command, 'documents', 'insert.documents');
  const ordered = ctx.command.ordered === undefined || isTruthy(ctx.command.ordered);
  const { store } = ctx.engine.ensureCollection(ctx.db, name);
  const bypass = isTruthy(ctx.command.bypassDocumentValidation);
  let n = 0;
  const writeErrors: Doc[] = [];
  for (const [index, document] of documents.entries()) {
    try {
      const doc = ensureId(document);
      validateWrite(store, doc, undefined, bypass);
      store.insert(doc);
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

export const update: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const statements = requiredDocArray(ctx.command, 'updates', 'update.updates');
  const ordered = ctx.command.ordered === undefined || isTruthy(ctx.command.ordered);
  const bypass = isTruthy(ctx.command.bypassDocumentValidation);
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
      const options = queryOptions(ctx, optionalDoc(statement, 'collation'), name);
      if (multi && !Array.isArray(change) && !isOperatorUpdate(change)) {
        throw ERRORS.failedToParse('multi update is not supported for replacement-style update');
      }
      const store = ctx.engine.collection(ctx.db, name);
      const sort = normalizeSort(statement.sort);
      if (!store) compileFilter(filter, options);
      const matched = store
        ? store.findEntries(filter, { ...options, sort, limit: multi ? 0 : 1 })
        : [];
      if (matched.length === 0) {
        if (upsert) {
          const doc = upsertDocument(filter, change, arrayFilters, options);
          const target = ctx.engine.ensureCollection(ctx.db, name).store;
          validateWrite(target, doc, undefined, bypass);
          target.insert(doc);
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
          validateWrite(store!, next, entry.doc, bypass);
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

export const remove: CommandHandler = (ctx) => {
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
      const options = queryOptions(ctx, optionalDoc(statement, 'collation'), name);
      if (!store) {
        compileFilter(filter, options);
        continue;
      }
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

export const findAndModify: CommandHandler = (ctx) => {
  const name = collectionArg(ctx);
  const cmd = ctx.command;
  const filter = optionalDoc(cmd, 'query') ?? {};
  const sort = normalizeSort(cmd.sort);
  const fields = optionalDoc(cmd, 'fields');
  const removeDoc = isTruthy(cmd.remove);
  const upsert = isTruthy(cmd.upsert);
  const returnNew = isTruthy(cmd.new);
  const arrayFilters = optionalDocArray(cmd, 'arrayFilters');
  const bypass = isTruthy(cmd.bypassDocumentValidation);
  const options = queryOptions(ctx, undefined, name);
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
  if (!store) compileFilter(filter, options);
  const entry: StoredEntry | undefined = store?.findEntries(filter, {
    ...options,
    sort,
    limit: 1,
  })[0];
  const project = (doc: Doc | undefined): Doc | null =>
    doc ? projectStored(doc, fields, options, filter) : null;

  if (removeDoc) {
    if (!store || !entry) return { lastErrorObject: { n: 0 }, value: null };
    store.remove(entry);
    return { lastErrorObject: { n: 1 }, value: project(entry.doc) };
  }

  const change = updateArg(cmd.update, 'findAndModify.update');
  if (store && entry) {
    const next = applyUpdate(entry.doc, change, { insert: false, filter, arrayFilters, options });
    const unchanged = documentsEqual(entry.doc, next);
    if (!unchanged) validateWrite(store, next, entry.doc, bypass);
    const stored = unchanged ? entry : store.replace(entry, next);
    return {
      lastErrorObject: { n: 1, updatedExisting: true },
      value: project(returnNew ? stored.doc : entry.doc),
    };
  }
  if (upsert) {
    const doc = upsertDocument(filter, change, arrayFilters, options);
    const target = ctx.engine.ensureCollection(ctx.db, name).store;
    validateWrite(target, doc, undefined, bypass);
    const inserted = target.insert(doc);
    return {
      lastErrorObject: { n: 1, updatedExisting: false, upserted: doc._id },
      value: returnNew ? project(inserted.doc) : null,
    };
  }
  return { lastErrorObject: { n: 0, updatedExisting: false }, value: null };
};
