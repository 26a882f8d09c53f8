// The one place that talks to mingo: filters, sorts, projections, update
// operators and aggregation pipelines all run on query-form documents (see
// bson-values.ts). Scripts ($where, $function, $accumulator) stay disabled: the
// stand-in never evaluates code sent by a client.

import {
  Aggregator,
  ProcessingMode,
  Query,
  update as mingoUpdate,
  updateOne as mingoUpdateOne,
} from 'mingo';

import { ERRORS } from './command-errors';
import type { Doc } from './bson-values';
import { cloneDoc, isPlainObject, numericValue, toQueryDoc, valuesAtPath } from './bson-values';

type MingoOptions = NonNullable<ConstructorParameters<typeof Query>[1]>;
type UpdateModifier = Parameters<typeof mingoUpdate>[1];
type PipelineUpdate = Extract<Parameters<typeof mingoUpdateOne>[2], unknown[]>;

export interface QueryOptions {
  /** A MongoDB collation document; passed to mingo for string comparison and sorting. */
  collation?: Doc;
  /** `let` variables of the command. */
  variables?: Doc;
  /** Resolves another collection of the same database (for $lookup, $unionWith, ...). */
  collectionResolver?: (name: string) => Doc[];
}

function mingoOptions(
  options: QueryOptions = {},
  processingMode = ProcessingMode.CLONE_OFF,
): MingoOptions {
  const { collation, variables, collectionResolver } = options;
  return {
    idKey: '_id',
    scriptEnabled: false,
    useStrictMode: true,
    processingMode,
    // A MongoDB collation document has the shape mingo's CollationSpec describes.
    ...(collation && typeof collation.locale === 'string'
      ? { collation: collation as unknown as MingoOptions['collation'] }
      : {}),
    ...(variables ? { variables } : {}),
    ...(collectionResolver ? { collectionResolver } : {}),
  };
}

export type Matcher = (view: Doc) => boolean;

/** Compiles a typed filter document into a predicate over query-form documents. */
export function compileFilter(filter: Doc | undefined, options?: QueryOptions): Matcher {
  if (!filter || Object.keys(filter).length === 0) return () => true;
  const query = new Query(toQueryDoc(filter), mingoOptions(options));
  return (view) => query.test(view);
}

/** Validates a sort document and turns it into mingo's `{ field: 1 | -1 }` form. */
export function normalizeSort(sort: unknown): Record<string, 1 | -1> | undefined {
  if (sort === undefined || sort === null) return undefined;
  if (!isPlainObject(sort)) throw ERRORS.typeMismatch('sort', 'object');
  const spec: Record<string, 1 | -1> = {};
  for (const [field, direction] of Object.entries(sort)) {
    const n = numericValue(direction);
    if (n === 1 || n === -1) {
      spec[field] = n;
    } else if (isPlainObject(direction) && '$meta' in direction) {
      throw ERRORS.notImplemented(`sorting by { $meta: ${JSON.stringify(direction.$meta)} }`);
    } else {
      throw ERRORS.badValue(`$sort key ordering must be 1 (for ascending) or -1 (for descending)`);
    }
  }
  return Object.keys(spec).length ? spec : undefined;
}

/**
 * Sorts query-form documents. The result holds the same object references, so
 * callers can map them back to their stored entries.
 */
export function sortViews(
  views: Doc[],
  sort: Record<string, 1 | -1>,
  options?: QueryOptions,
): Doc[] {
  const natural = sort.$natural;
  if (natural !== undefined) {
    const rest = { ...sort };
    delete rest.$natural;
    const ordered = natural === -1 ? [...views].reverse() : views;
    return Object.keys(rest).length ? sortViews(ordered, rest, options) : ordered;
  }
  // MongoDB sorts an array field by its smallest element ascending and its
  // largest descending (mingo compares whole arrays), and missing like null;
  // so each document is reduced to one key per sort field first. The original
  // position breaks ties, keeping equal keys in insertion order.
  const fields = Object.entries(sort);
  const rows = views.map((view, position) => {
    const row: Doc = { position };
    fields.forEach(([field, direction], i) => {
      row[`k${i}`] = sortKey(view, field, direction, options);
    });
    return row;
  });
  const spec: Record<string, 1 | -1> = {};
  fields.forEach(([, direction], i) => (spec[`k${i}`] = direction));
  spec.position = 1;
  return new Query({}, mingoOptions(options))
    .find<Doc>(rows)
    .sort(spec)
    .all()
    .map((row) => views[row.position as number]!);
}

function sortKey(view: Doc, field: string, direction: 1 | -1, options?: QueryOptions): unknown {
  const values = valuesAtPath(view, field.split('.')).flatMap((value) =>
    Array.isArray(value) ? (value as unknown[]) : [value],
  );
  if (values.length <= 1) return values[0] ?? null;
  const [first] = new Query({}, mingoOptions(options))
    .find<Doc>(values.map((v) => ({ v })))
    .sort({ v: direction })
    .all();
  return first?.v ?? null;
}

/** True when a projection only includes/excludes fields (no $slice, $elemMatch, expressions). */
export function isSimpleProjection(projection: Doc): boolean {
  return Object.values(projection).every(
    (value) => typeof value === 'boolean' || numericValue(value) !== undefined,
  );
}

function mingoProject(doc: Doc, spec: Doc, options?: QueryOptions): Doc {
  // mingo's exclusion projection deletes nested fields from its input: project a copy.
  const [projected] = new Query({}, mingoOptions(options)).find<Doc>([cloneDoc(doc)], spec).all();
  return projected ?? {};
}

const isSliceOnly = (value: unknown): boolean =>
  isPlainObject(value) && Object.keys(value).length === 1 && '$slice' in value;

/** Applies a find-style projection to one document (typed or query form); `doc` is not modified. */
export function projectDoc(doc: Doc, projection: Doc, options?: QueryOptions): Doc {
  const spec = toQueryDoc(projection);
  const entries = Object.entries(spec);
  const slices = entries.filter(([, value]) => isSliceOnly(value));
  const others = entries.filter(([, value]) => !isSliceOnly(value));
  const inclusive = others.some(
    ([field, value]) => field !== '_id' && value !== 0 && value !== false,
  );
  if (slices.length === 0 || inclusive) return mingoProject(doc, spec, options);
  // MongoDB: $slice does not make a projection inclusive (mingo treats it as an
  // inclusion), so exclude the other fields first, then put the sliced arrays back.
  const result = mingoProject(doc, Object.fromEntries(others), options);
  for (const [field] of slices) {
    const sliced = mingoProject(doc, { [field]: spec[field] }, options);
    const segments = field.split('.');
    let from: unknown = sliced;
    let to: unknown = result;
    for (const [i, segment] of segments.entries()) {
      if (!isPlainObject(from) || !isPlainObject(to) || !(segment in from)) break;
      if (i === segments.length - 1) to[segment] = from[segment];
      from = from[segment];
      to = to[segment];
    }
  }
  return result;
}

/** Runs an aggregation pipeline over query-form documents (inputs are never mutated). */
export function runPipeline(views: Doc[], pipeline: Doc[], options?: QueryOptions): Doc[] {
  const stages = pipeline.map((stage) => toQueryDoc(stage));
  const aggregator = new Aggregator(stages, mingoOptions(options, ProcessingMode.CLONE_INPUT));
  return aggregator.run<Doc>(views);
}

/**
 * Applies update operators (`$set`, `$inc`, `$push`, ...) to a query-form document
 * in place. `condition` is the query-form filter, needed by the positional `$`.
 */
export function applyModifier(
  view: Doc,
  modifier: Doc,
  arrayFilters: Doc[] | undefined,
  condition: Doc | undefined,
  options?: QueryOptions,
): void {
  mingoUpdate(view, modifier as UpdateModifier, arrayFilters, condition, {
    cloneMode: 'deep',
    queryOptions: mingoOptions(options),
  });
}

/** Applies an aggregation-pipeline update (`[{ $set: ... }, ...]`) and returns the new document. */
export function applyPipelineUpdate(view: Doc, pipeline: Doc[], options?: QueryOptions): Doc {
  const docs = [view];
  const stages = pipeline.map((stage) => toQueryDoc(stage));
  mingoUpdateOne(docs, {}, stages as PipelineUpdate, {}, mingoOptions(options));
  return docs[0]!;
}
