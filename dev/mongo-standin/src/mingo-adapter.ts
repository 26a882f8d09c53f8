// The one place that talks to mingo: filters, sorts, projections, update
// operators and aggregation pipelines all run on query-form documents (see
// bson-values.ts). Scripts ($where, $function, $accumulator) stay disabled: the
// stand-in never evaluates code sent by a client.

import { Aggregator, Context, ProcessingMode, Query } from 'mingo';

import { ERRORS, MongoCommandError } from './command-errors';
import type { Doc } from './bson-values';
import {
  cloneDoc,
  isPlainObject,
  numericValue,
  setOwn,
  toQueryDoc,
  valuesAtPath,
  withIdFirst,
} from './bson-values';
import { compareBson, normalizeCollation, stringComparer } from './bson-compare';
import { matchedIndex } from './positional';
import { STANDIN_QUERY_OPERATORS, rewriteFilter, rewritePipeline } from './query-operators';

type MingoOptions = NonNullable<ConstructorParameters<typeof Query>[1]>;

export interface QueryOptions {
  /** A MongoDB collation document (checked with normalizeCollation). */
  collation?: Doc;
  /** `let` variables of the command. */
  variables?: Doc;
  /** Resolves another collection of the same database (for $lookup, $unionWith, ...). */
  collectionResolver?: (name: string) => Doc[];
}

const STANDIN_CONTEXT = Context.init({
  query: STANDIN_QUERY_OPERATORS as unknown as Parameters<typeof Context.init>[0] extends infer T
    ? T extends { query?: infer Q }
      ? Q
      : never
    : never,
});

function mingoOptions(
  options: QueryOptions = {},
  processingMode = ProcessingMode.CLONE_OFF,
): MingoOptions {
  const { collation, variables, collectionResolver } = options;
  let mingoCollation: MingoOptions['collation'] | undefined;
  if (collation) {
    const spec = normalizeCollation(collation);
    // mingo sorts strings with Intl.Collator, which takes BCP 47 locales.
    if (spec.locale !== 'simple') {
      mingoCollation = { ...collation, locale: spec.locale };
    }
  }
  return {
    idKey: '_id',
    scriptEnabled: false,
    useStrictMode: true,
    processingMode,
    context: STANDIN_CONTEXT,
    ...(mingoCollation ? { collation: mingoCollation } : {}),
    ...(variables ? { variables } : {}),
    ...(collectionResolver ? { collectionResolver } : {}),
  };
}

export type Matcher = (view: Doc) => boolean;

const NOT_EMULATED = new Set([
  '$text',
  '$where',
  '$near',
  '$nearSphere',
  '$geoWithin',
  '$geoIntersects',
  '$within',
  '$function',
  '$accumulator',
  '$meta',
]);

/** mingo's refusals of a query, projection or pipeline are MongoDB's BadValue. */
function asBadValue(error: unknown): unknown {
  if (error instanceof Error && error.constructor.name === 'MingoError') {
    let message = error.message;
    // MongoDB operators the stand-in does not emulate: refused as such, not as unknown.
    const named = /(\$[A-Za-z_]+)/.exec(message)?.[1]?.replace(/^\$__/, '$');
    if (named && NOT_EMULATED.has(named)) return ERRORS.notImplemented(`The ${named} operator`);
    const unknownTop = /^unknown top level operator: (\S+)$/.exec(message);
    if (unknownTop) {
      message = `unknown top level operator: ${unknownTop[1]}. If you have a field name that starts with a '$' symbol, consider using $getField or $setField.`;
    }
    const unknownOp = /^unknown query operator (\S+)$/.exec(message);
    if (unknownOp) message = `unknown operator: ${unknownOp[1]!.replace(/^\$__/, '$')}`;
    return new MongoCommandError('BadValue', message);
  }
  return error;
}

/** Compiles a typed filter document into a predicate over query-form documents. */
export function compileFilter(filter: Doc | undefined, options?: QueryOptions): Matcher {
  if (!filter || Object.keys(filter).length === 0) return () => true;
  let query: Query;
  try {
    query = new Query(rewriteFilter(toQueryDoc(filter)), mingoOptions(options));
  } catch (error) {
    throw asBadValue(error);
  }
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
  // largest descending, missing like null, across types in BSON order; so each
  // document is reduced to one key per sort field first. The original position
  // breaks ties, keeping equal keys in insertion order.
  const strings = stringComparer(options?.collation);
  const fields = Object.entries(sort);
  const rows = views.map((view, position) => ({
    view,
    position,
    keys: fields.map(([field, direction]) => sortKey(view, field, direction, strings)),
  }));
  rows.sort((a, b) => {
    for (let i = 0; i < fields.length; i++) {
      const order = compareBson(a.keys[i], b.keys[i], strings);
      if (order !== 0) return order * fields[i]![1];
    }
    return a.position - b.position;
  });
  return rows.map((row) => row.view);
}

function sortKey(
  view: Doc,
  field: string,
  direction: 1 | -1,
  strings: ReturnType<typeof stringComparer>,
): unknown {
  const found = valuesAtPath(view, field.split('.'));
  if (found.length === 0) return null;
  const values = found.flatMap((value) => (Array.isArray(value) ? (value as unknown[]) : [value]));
  // An empty array sorts before null.
  if (values.length === 0) return undefined;
  let best = values[0];
  for (const value of values.slice(1)) {
    const order = compareBson(value, best, strings);
    if (direction === 1 ? order < 0 : order > 0) best = value;
  }
  return best;
}

/** True when a projection only includes/excludes fields (no $slice, $elemMatch, `.$`, expressions). */
export function isSimpleProjection(projection: Doc): boolean {
  return Object.entries(projection).every(
    ([field, value]) =>
      !field.endsWith('.$') && (typeof value === 'boolean' || numericValue(value) !== undefined),
  );
}

function mingoProject(doc: Doc, spec: Doc, options?: QueryOptions): Doc {
  // mingo's exclusion projection deletes nested fields from its input: project a copy.
  try {
    const [projected] = new Query({}, mingoOptions(options)).find<Doc>([cloneDoc(doc)], spec).all();
    return projected ?? {};
  } catch (error) {
    throw asBadValue(error);
  }
}

const isOperatorValue = (value: unknown, operator: string): value is Doc =>
  isPlainObject(value) && Object.keys(value).length === 1 && operator in value;

const isExclusion = (value: unknown): boolean => value === 0 || value === false;

/** The first element of `array` that $elemMatch's criteria match (a value, or a document query). */
function elemMatchFirst(array: unknown[], criteria: Doc, options?: QueryOptions): unknown {
  const keys = Object.keys(criteria);
  const onValue =
    keys.length > 0 && keys.every((k) => k.startsWith('$') && !['$and', '$or', '$nor'].includes(k));
  const matches = compileFilter(onValue ? { v: criteria } : criteria, options);
  return array.find((item) =>
    onValue ? matches({ v: item }) : isPlainObject(item) && matches(item),
  );
}

/** Puts `_id`, then the fields in the order the document has them, first; computed fields after. */
function inDocumentOrder(result: Doc, doc: Doc): Doc {
  const out: Doc = {};
  if ('_id' in result) out._id = result._id;
  for (const key of Object.keys(doc)) {
    if (key !== '_id' && Object.prototype.hasOwnProperty.call(result, key)) {
      setOwn(out, key, result[key]);
    }
  }
  for (const [key, value] of Object.entries(result)) {
    if (!Object.prototype.hasOwnProperty.call(out, key)) setOwn(out, key, value);
  }
  return out;
}

function setPathIn(target: Doc, segments: readonly string[], value: unknown): void {
  let node = target;
  segments.forEach((segment, i) => {
    if (i === segments.length - 1) {
      setOwn(node, segment, value);
      return;
    }
    if (!isPlainObject(node[segment])) setOwn(node, segment, {});
    node = node[segment] as Doc;
  });
}

/**
 * Applies a find-style projection to one document (typed or query form); `doc`
 * is not modified. `filter` is the query's, for the positional `arr.$`.
 */
export function projectDoc(doc: Doc, projection: Doc, options?: QueryOptions, filter?: Doc): Doc {
  const spec = toQueryDoc(projection);
  const entries = Object.entries(spec);
  const positional = entries.filter(([field]) => field.endsWith('.$'));
  const elemMatches = entries.filter(([, value]) => isOperatorValue(value, '$elemMatch'));
  const slices = entries.filter(([, value]) => isOperatorValue(value, '$slice'));
  const others = entries.filter(
    ([field, value]) =>
      !field.endsWith('.$') &&
      !isOperatorValue(value, '$elemMatch') &&
      !isOperatorValue(value, '$slice'),
  );
  if (positional.length > 1) {
    throw ERRORS.badValue('Cannot specify more than one positional proj. per query.');
  }
  for (const [field] of elemMatches) {
    if (field.includes('.'))
      throw ERRORS.badValue('Cannot use $elemMatch projection on a nested field.');
  }
  const exclusive = others.some(([field, value]) => field !== '_id' && isExclusion(value));
  if (exclusive && positional.length) {
    throw ERRORS.badValue('positional projection cannot be used with exclusion');
  }
  const inclusive =
    others.some(([field, value]) => field !== '_id' && !isExclusion(value)) ||
    ((positional.length > 0 || elemMatches.length > 0) && !exclusive);

  const base: Doc = Object.fromEntries(others);
  for (const [field] of positional) base[field.slice(0, -2)] = 1;
  let result: Doc;
  if (Object.keys(base).length === 0 && !inclusive) {
    result = cloneDoc(doc);
  } else if (
    Object.keys(base).length === 0 ||
    (inclusive && !Object.keys(base).some((f) => f !== '_id' && !isExclusion(base[f])))
  ) {
    // Only $elemMatch (and _id settings): _id plus those fields.
    result = base._id !== undefined && isExclusion(base._id) ? {} : { _id: doc._id };
    if (result._id === undefined) delete result._id;
  } else {
    result = mingoProject(doc, base, options);
  }

  if (slices.length) {
    // MongoDB: $slice does not make a projection inclusive (mingo treats it as
    // an inclusion), so the other fields are projected first and the sliced
    // arrays put back (into what that projection kept).
    for (const [field, value] of slices) {
      const sliced = mingoProject(doc, { [field]: value }, options);
      const segments = field.split('.');
      let from: unknown = sliced;
      let to: unknown = result;
      for (const [i, segment] of segments.entries()) {
        if (!isPlainObject(from) || !(segment in from)) break;
        if (i === segments.length - 1) {
          if (isPlainObject(to)) to[segment] = from[segment];
          break;
        }
        if (isPlainObject(to) && !(segment in to) && !inclusive) break;
        if (isPlainObject(to) && !(segment in to)) to[segment] = {};
        from = from[segment];
        to = isPlainObject(to) ? to[segment] : undefined;
      }
    }
  }

  for (const [field] of positional) {
    const segments = field.slice(0, -2).split('.');
    const index = matchedIndex(doc, segments, filter, options);
    if (index === undefined) {
      throw ERRORS.badValue(
        "Executor error during find command :: caused by :: positional operator '.$' couldn't find a matching element in the array",
      );
    }
    let array: unknown = doc;
    for (const segment of segments) array = isPlainObject(array) ? array[segment] : undefined;
    setPathIn(result, segments, [(array as unknown[])[index]]);
  }

  for (const [field, value] of elemMatches) {
    const criteria = (value as Doc).$elemMatch;
    if (!isPlainObject(criteria))
      throw ERRORS.badValue('elemMatch: Invalid argument, object required.');
    const array = doc[field];
    const found = Array.isArray(array) ? elemMatchFirst(array, criteria, options) : undefined;
    if (found === undefined) delete result[field];
    else setOwn(result, field, [found]);
  }
  return inclusive ? inDocumentOrder(result, doc) : withIdFirst(result);
}

const UPDATE_PIPELINE_STAGES = new Set([
  '$addFields',
  '$set',
  '$project',
  '$unset',
  '$replaceRoot',
  '$replaceWith',
]);

/** Runs an aggregation pipeline over query-form documents (inputs are never mutated). */
export function runPipeline(views: Doc[], pipeline: Doc[], options?: QueryOptions): Doc[] {
  const stages = rewritePipeline(pipeline.map((stage) => toQueryDoc(stage)));
  try {
    const aggregator = new Aggregator(stages, mingoOptions(options, ProcessingMode.CLONE_INPUT));
    return aggregator.run<Doc>(views);
  } catch (error) {
    if (
      error instanceof Error &&
      /^unregistered pipeline operator (\S+?)\.?$/.test(error.message)
    ) {
      const name = /^unregistered pipeline operator (\S+?)\.?$/.exec(error.message)![1];
      throw new MongoCommandError('Location40324', `Unrecognized pipeline stage name: '${name}'`);
    }
    throw asBadValue(error);
  }
}

/** Applies an aggregation-pipeline update (`[{ $set: ... }, ...]`) and returns the new document. */
export function applyPipelineUpdate(view: Doc, pipeline: Doc[], options?: QueryOptions): Doc {
  for (const stage of pipeline) {
    const name = Object.keys(stage)[0] ?? '';
    if (!UPDATE_PIPELINE_STAGES.has(name)) {
      throw new MongoCommandError(
        'InvalidOptions',
        `${name} is not allowed to be used within an update`,
      );
    }
  }
  const [next] = runPipeline([view], pipeline, options);
  return next ?? {};
}
