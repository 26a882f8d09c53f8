// Computes the document an update produces: operator updates ($set, $inc, ...)
// through mingo, aggregation-pipeline updates, and replacement documents; plus
// the seed document an upsert starts from. Pure functions on typed documents:
// the input is never modified, the result is a fresh tree.

import { BSON } from 'bson';

import { ERRORS, MongoCommandError } from './command-errors';
import type { Doc } from './bson-values';
import {
  TypeHints,
  canonicalKey,
  cloneDoc,
  isPlainObject,
  numericKind,
  numericValue,
  restoreTypes,
  setOwn,
  toQueryDoc,
  withIdFirst,
} from './bson-values';
import type { QueryOptions } from './mingo-adapter';
import { applyModifier, applyPipelineUpdate } from './mingo-adapter';

export type UpdateDocument = Doc | Doc[];

export interface ApplyUpdateContext {
  /** True when the update builds a new document for an upsert ($setOnInsert applies). */
  insert: boolean;
  /** The typed filter of the update (for the positional `$` operator). */
  filter?: Doc;
  arrayFilters?: Doc[];
  options?: QueryOptions;
}

/** Classifies an update document, rejecting a mix of operators and plain fields. */
export function isOperatorUpdate(update: UpdateDocument): update is Doc {
  if (Array.isArray(update)) return false;
  const keys = Object.keys(update);
  if (keys.length === 0) return false;
  const operators = keys.filter((key) => key.startsWith('$'));
  if (operators.length === 0) return false;
  if (operators.length !== keys.length) {
    const plain = keys.find((key) => !key.startsWith('$'));
    throw ERRORS.failedToParse(
      `Unknown modifier: ${plain}. Expected a valid update modifier or pipeline-style update specified as an array`,
    );
  }
  return true;
}

export function documentsEqual(a: Doc, b: Doc): boolean {
  return Buffer.compare(BSON.serialize(a), BSON.serialize(b)) === 0;
}

function addSetHints(hints: TypeHints, path: string, value: unknown): void {
  const kind = numericKind(value);
  if (kind) {
    hints.add(path, { op: 'set', kind });
  } else if (Array.isArray(value)) {
    value.forEach((item, i) => addSetHints(hints, `${path}.${i}`, item));
  } else if (isPlainObject(value)) {
    for (const [key, inner] of Object.entries(value)) addSetHints(hints, `${path}.${key}`, inner);
  }
}

/** Records, per path, which BSON number type the update's operands ask for. */
function buildTypeHints(modifier: Doc): TypeHints {
  const hints = new TypeHints();
  for (const [op, fields] of Object.entries(modifier)) {
    if (!isPlainObject(fields)) continue;
    for (const [path, value] of Object.entries(fields)) {
      switch (op) {
        case '$set':
        case '$setOnInsert':
          addSetHints(hints, path, value);
          break;
        case '$inc':
        case '$mul':
          hints.add(path, { op: 'arith', kind: numericKind(value) });
          break;
        case '$min':
        case '$max':
          hints.add(path, { op: 'minmax', kind: numericKind(value) });
          break;
        case '$push':
        case '$addToSet': {
          const items =
            isPlainObject(value) && Array.isArray(value.$each)
              ? (value.$each as unknown[])
              : [value];
          const byValue = new Map<number, NonNullable<ReturnType<typeof numericKind>>>();
          for (const item of items) {
            const kind = numericKind(item);
            const n = numericValue(item);
            if (kind && n !== undefined) byValue.set(n, kind);
            else addSetHints(hints, `${path}.*`, item);
          }
          if (byValue.size) hints.add(`${path}.*`, { op: 'set', kind: undefined, byValue });
          break;
        }
        default:
          break;
      }
    }
  }
  return hints;
}

function rethrowMingoUpdateError(error: unknown): never {
  if (error instanceof Error && error.constructor.name === 'MingoError') {
    if (error.message.includes('immutable field')) throw ERRORS.immutableId();
    if (error.message.includes('would create a conflict')) {
      throw new MongoCommandError('ConflictingUpdateOperators', error.message);
    }
    throw ERRORS.badValue(error.message);
  }
  throw error;
}

function usesPositionalOperator(modifier: Doc): boolean {
  return Object.values(modifier).some(
    (fields) =>
      isPlainObject(fields) && Object.keys(fields).some((path) => path.split('.').includes('$')),
  );
}

function applyOperatorUpdate(old: Doc, update: Doc, ctx: ApplyUpdateContext): Doc {
  const modifier: Doc = {};
  for (const [op, fields] of Object.entries(update)) {
    if (!isPlainObject(fields)) {
      throw ERRORS.failedToParse(
        `Modifiers operate on fields but we found another type instead: ${op}`,
      );
    }
    modifier[op] = { ...fields };
  }
  const setOnInsert = modifier.$setOnInsert as Doc | undefined;
  delete modifier.$setOnInsert;
  if (ctx.insert && setOnInsert && Object.keys(setOnInsert).length) {
    const set = (modifier.$set as Doc | undefined) ?? {};
    for (const [path, value] of Object.entries(setOnInsert)) {
      if (path in set) {
        throw new MongoCommandError(
          'ConflictingUpdateOperators',
          `Updating the path '${path}' would create a conflict at '${path}'`,
        );
      }
      setOwn(set, path, value);
    }
    modifier.$set = set;
  }

  let base = old;
  const set = modifier.$set as Doc | undefined;
  if (set && '_id' in set) {
    if (old._id === undefined) {
      base = withIdFirst({ ...old, _id: set._id });
    } else if (canonicalKey(old._id) !== canonicalKey(set._id)) {
      throw ERRORS.immutableId();
    }
    delete set._id;
  }

  const view = toQueryDoc(base);
  // mingo only applies an update to a document matching `condition`; it is
  // needed (and only passed) to resolve the positional `$` operator, which
  // MongoDB refuses when an upsert inserts.
  const positional = usesPositionalOperator(modifier);
  if (positional && ctx.insert) {
    throw ERRORS.badValue('The positional operator did not find the match needed from the query.');
  }
  try {
    applyModifier(
      view,
      toQueryDoc(modifier),
      ctx.arrayFilters?.map((filter) => toQueryDoc(filter)),
      positional && ctx.filter ? toQueryDoc(ctx.filter) : undefined,
      ctx.options,
    );
  } catch (error) {
    rethrowMingoUpdateError(error);
  }
  return withIdFirst(restoreTypes(view, base, buildTypeHints(modifier)));
}

function applyReplacement(old: Doc, replacement: Doc): Doc {
  const next = cloneDoc(replacement);
  if (
    next._id !== undefined &&
    old._id !== undefined &&
    canonicalKey(next._id) !== canonicalKey(old._id)
  ) {
    throw ERRORS.immutableId();
  }
  if (next._id === undefined && old._id !== undefined) next._id = old._id;
  return withIdFirst(next);
}

/** The document `update` turns `old` into (a fresh tree; `old` is untouched). */
export function applyUpdate(old: Doc, update: UpdateDocument, ctx: ApplyUpdateContext): Doc {
  if (Array.isArray(update)) {
    let next: Doc;
    try {
      next = applyPipelineUpdate(toQueryDoc(old), update, ctx.options);
    } catch (error) {
      rethrowMingoUpdateError(error);
    }
    if (old._id !== undefined && canonicalKey(next._id) !== canonicalKey(old._id)) {
      throw ERRORS.immutableId();
    }
    return withIdFirst(restoreTypes(next, old));
  }
  if (isOperatorUpdate(update)) return applyOperatorUpdate(old, update, ctx);
  return applyReplacement(old, update);
}

function setPath(doc: Doc, path: string, value: unknown): void {
  const segments = path.split('.');
  let node = doc;
  for (let i = 0; i < segments.length - 1; i++) {
    const segment = segments[i]!;
    const next = node[segment];
    if (!isPlainObject(next)) {
      const created: Doc = {};
      setOwn(node, segment, created);
      node = created;
    } else {
      node = next;
    }
  }
  setOwn(node, segments[segments.length - 1]!, cloneDoc({ v: value }).v);
}

function collectEqualities(filter: Doc, seed: Doc): void {
  for (const [key, value] of Object.entries(filter)) {
    if (key === '$and' && Array.isArray(value)) {
      for (const clause of value) if (isPlainObject(clause)) collectEqualities(clause, seed);
      continue;
    }
    if (key.startsWith('$')) continue;
    if (
      value instanceof RegExp ||
      (value !== null &&
        typeof value === 'object' &&
        (value as { _bsontype?: unknown })._bsontype === 'BSONRegExp')
    ) {
      continue;
    }
    if (isPlainObject(value)) {
      const keys = Object.keys(value);
      if (keys.some((k) => k.startsWith('$'))) {
        if ('$eq' in value) setPath(seed, key, value.$eq);
        continue;
      }
    }
    setPath(seed, key, value);
  }
}

/** The document an upsert starts from: the equality conditions of its filter. */
export function buildUpsertSeed(filter: Doc | undefined): Doc {
  const seed: Doc = {};
  if (filter) collectEqualities(filter, seed);
  return withIdFirst(seed);
}
