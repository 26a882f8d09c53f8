// The positional `$` (of updates and of projections): which element of an
// array the query matched. MongoDB records it while matching; here the filter's
// clauses on that array are tried against each element in turn, and the first
// element they all match is the one.

import type { Doc } from './bson-values';
import { isPlainObject, setOwn, toQueryForm } from './bson-values';
import type { QueryOptions } from './mingo-adapter';
import { compileFilter } from './mingo-adapter';

/** The array at a path of plain documents (no traversal of arrays along the way). */
export function arrayAt(doc: unknown, segments: readonly string[]): unknown[] | undefined {
  let node: unknown = doc;
  for (const segment of segments) {
    if (Array.isArray(node) && /^\d+$/.test(segment)) node = (node as unknown[])[Number(segment)];
    else if (isPlainObject(node) && Object.prototype.hasOwnProperty.call(node, segment)) {
      node = node[segment];
    } else return undefined;
  }
  return Array.isArray(node) ? (node as unknown[]) : undefined;
}

function clausesOn(filter: Doc, path: string, out: Doc[]): void {
  for (const [key, value] of Object.entries(filter)) {
    if (key === '$and' && Array.isArray(value)) {
      for (const clause of value) if (isPlainObject(clause)) clausesOn(clause, path, out);
    } else if (key === path || key.startsWith(`${path}.`)) {
      out.push({ [key]: value });
    }
  }
}

function nest(segments: readonly string[], leaf: unknown): Doc {
  const root: Doc = {};
  let node = root;
  segments.forEach((segment, i) => {
    if (i === segments.length - 1) {
      setOwn(node, segment, leaf);
    } else {
      const next: Doc = {};
      setOwn(node, segment, next);
      node = next;
    }
  });
  return root;
}

/**
 * The index of the first element of the array at `segments` (in `doc`, typed
 * or query form) that the filter's conditions on that array match; undefined
 * when the filter has none or no element matches.
 */
export function matchedIndex(
  doc: Doc,
  segments: readonly string[],
  filter: Doc | undefined,
  options?: QueryOptions,
): number | undefined {
  const array = arrayAt(doc, segments);
  if (!array || !filter) return undefined;
  const clauses: Doc[] = [];
  clausesOn(filter, segments.join('.'), clauses);
  if (clauses.length === 0) return undefined;
  const matches = compileFilter({ $and: clauses }, options);
  for (let i = 0; i < array.length; i++) {
    if (matches(nest(segments, toQueryForm([array[i]])))) return i;
  }
  return undefined;
}
