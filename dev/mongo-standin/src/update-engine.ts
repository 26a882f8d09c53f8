// Computes the document an update produces: operator updates ($set, $inc, ...)
// through update-operators.ts, aggregation-pipeline updates through mingo, and
// replacement documents; plus
// the seed document an upsert starts from. Pure functions on typed documents:
// the input is never modified, the result is a fresh tree.

import { BSON } from 'bson';

import { ERRORS } from './command-errors';
import type { Doc } from './bson-values';
import {
  canonicalKey,
  cloneDoc,
  isPlainObject,
  restoreTypes,
  setOwn,
  toQueryDoc,
  withIdFirst,
} from './bson-values';
import type { QueryOptions } from './mingo-adapter';
import { applyPipelineUpdate } from './mingo-adapter';
import { applyOperatorUpdate } from './update-operators';

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

function rethrowMingoUpdateError(error: unknown): never {
  if (error instanceof Error && error.constructor.name === 'MingoError') {
    throw ERRORS.badValue(error.message);
  }
  throw error;
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
