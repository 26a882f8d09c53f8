// MongoDB's update operators ($set, $unset, $inc, $mul, $min, $max, $rename,
// $push, $addToSet, $pull, $pullAll, $pop, $currentDate, $bit, $setOnInsert)
// on typed documents, written after MongoDB's update system rather than
// through mingo, whose update is more lenient than MongoDB in ways that hide
// bugs. What it does as MongoDB does:
// - paths: positional `$` (from the filter), `$[]`, `$[<id>]` with
//   arrayFilters; two paths conflict only when one is a prefix of the other
//   component by component (`arr.$.a` and `arr.$.b` do not; code 40), and
//   `$[]`/`$[id]` paths that reach the same element field conflict when applied;
// - fields are applied in MongoDB 5's order (lexicographic, numbers numerically);
// - refusals with MongoDB's codes: a path through a scalar or a non-numeric
//   field of an array (PathNotViable, 28), $inc/$mul on a non-number
//   (TypeMismatch, 14), $push/$addToSet on a non-array, $pull on a non-array
//   (BadValue, 2), `$`-prefixed top-level fields when not inserting (52);
// - the BSON type of numbers: $inc/$mul widen int → long → double as MongoDB
//   does (an int that overflows becomes a long).
// $inc/$mul/$bit on Decimal128 are refused (NotImplemented) rather than
// computed approximately.

import { Double, Int32, Long, Timestamp } from 'bson';

import type { Doc } from './bson-values';
import {
  bsonTag,
  canonicalKey,
  cloneBson,
  cloneDoc,
  formatValue,
  isPlainObject,
  numericKind,
  setOwn,
  toQueryForm,
  withIdFirst,
} from './bson-values';
import type { StringComparer } from './bson-compare';
import { bsonEquals, bsonTypeAlias, compareBson, stringComparer } from './bson-compare';
import { ERRORS, MongoCommandError } from './command-errors';
import type { Matcher, QueryOptions } from './mingo-adapter';
import { compileFilter } from './mingo-adapter';
import { matchedIndex } from './positional';

export interface OperatorUpdateContext {
  /** True when the update builds a new document for an upsert ($setOnInsert applies). */
  insert: boolean;
  /** The typed filter of the update (for the positional `$` operator). */
  filter?: Doc;
  arrayFilters?: Doc[];
  options?: QueryOptions;
}

type Container = Doc | unknown[];

const OPERATORS = new Set([
  '$set',
  '$unset',
  '$inc',
  '$mul',
  '$min',
  '$max',
  '$rename',
  '$push',
  '$addToSet',
  '$pull',
  '$pullAll',
  '$pop',
  '$currentDate',
  '$bit',
  '$setOnInsert',
]);

const pathNotViable = (message: string) => new MongoCommandError('PathNotViable', message);
const conflict = (message: string) => new MongoCommandError('ConflictingUpdateOperators', message);

function typeName(value: unknown): string {
  return bsonTypeAlias(value);
}

// --- paths -------------------------------------------------------------------

type Component =
  | { kind: 'field'; name: string }
  | { kind: 'positional' }
  | { kind: 'all' }
  | { kind: 'filtered'; id: string };

interface Statement {
  op: string;
  path: string;
  components: Component[];
  operand: unknown;
  /** For $rename: the source path (the statement's path is the destination). */
  from?: string;
}

const IDENTIFIER = /^[a-z][a-zA-Z0-9]*$/;

function parsePath(path: string, insert: boolean): Component[] {
  if (path === '')
    throw new MongoCommandError('EmptyFieldName', 'An empty update path is not valid.');
  const parts = path.split('.');
  let positionals = 0;
  return parts.map((part, i): Component => {
    if (part === '') {
      throw new MongoCommandError(
        'EmptyFieldName',
        `The update path '${path}' contains an empty field name, which is not allowed.`,
      );
    }
    if (part === '$') {
      if (++positionals > 1) {
        throw ERRORS.badValue(`Too many positional (i.e. '$') elements found in path '${path}'`);
      }
      if (i === 0) {
        throw ERRORS.badValue(
          `Cannot have positional (i.e. '$') element in the first position in path '${path}'`,
        );
      }
      return { kind: 'positional' };
    }
    if (part === '$[]') return { kind: 'all' };
    const filtered = /^\$\[(.*)\]$/.exec(part);
    if (filtered) {
      const id = filtered[1]!;
      if (!IDENTIFIER.test(id)) {
        throw ERRORS.badValue(
          `The array filter identifier must begin with a lowercase letter and contain only alphanumeric characters: '${id}'`,
        );
      }
      return { kind: 'filtered', id };
    }
    if (i === 0 && part.startsWith('$') && !insert) {
      throw new MongoCommandError(
        'DollarPrefixedFieldName',
        `The dollar ($) prefixed field '${part}' in '${path}' is not valid for storage.`,
      );
    }
    return { kind: 'field', name: part };
  });
}

const componentText = (c: Component): string =>
  c.kind === 'field'
    ? c.name
    : c.kind === 'positional'
      ? '$'
      : c.kind === 'all'
        ? '$[]'
        : `$[${c.id}]`;

function isPrefix(a: readonly string[], b: readonly string[]): boolean {
  return a.length <= b.length && a.every((part, i) => part === b[i]);
}

/** MongoDB 5's order of applying fields: by component, numbers numerically, else by string. */
function comparePaths(a: readonly string[], b: readonly string[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const x = a[i]!;
    const y = b[i]!;
    if (x === y) continue;
    if (/^\d+$/.test(x) && /^\d+$/.test(y)) return Number(x) - Number(y) || (x < y ? -1 : 1);
    return x < y ? -1 : 1;
  }
  return a.length - b.length;
}

// --- locating values ---------------------------------------------------------

interface Found {
  container: Container;
  key: string;
  value: unknown;
}

/** The value at a concrete path, or undefined when some part of it is missing or not viable. */
function locate(root: Doc, path: readonly string[]): Found | undefined {
  let container: Container = root;
  for (let i = 0; i < path.length; i++) {
    const key = path[i]!;
    let value: unknown;
    if (Array.isArray(container)) {
      if (!/^\d+$/.test(key)) return undefined;
      value = container[Number(key)];
    } else if (Object.prototype.hasOwnProperty.call(container, key)) {
      value = container[key];
    } else {
      return undefined;
    }
    if (value === undefined) return undefined;
    if (i === path.length - 1) return { container, key, value };
    if (!Array.isArray(value) && !isPlainObject(value)) return undefined;
    container = value as Container;
  }
  return undefined;
}

function setIn(container: Container, key: string, value: unknown): void {
  if (Array.isArray(container)) {
    const index = Number(key);
    while (container.length < index) container.push(null);
    container[index] = value;
  } else {
    setOwn(container, key, value);
  }
}

/**
 * The container and key where a value at `path` goes, creating the missing
 * documents on the way (PathNotViable where a scalar or an array's
 * non-numeric field is in the way).
 */
function ensurePath(root: Doc, path: readonly string[]): { container: Container; key: string } {
  let container: Container = root;
  let parentKey = '';
  for (let i = 0; i < path.length - 1; i++) {
    const key = path[i]!;
    if (Array.isArray(container) && !/^\d+$/.test(key)) {
      throw pathNotViable(
        `Cannot create field '${key}' in element {${parentKey}: ${formatValue(container)}}`,
      );
    }
    let next: unknown = Array.isArray(container)
      ? container[Number(key)]
      : Object.prototype.hasOwnProperty.call(container, key)
        ? container[key]
        : undefined;
    if (next === undefined) {
      const created: Doc = {};
      setIn(container, key, created);
      next = created;
    } else if (!Array.isArray(next) && !isPlainObject(next)) {
      throw pathNotViable(
        `Cannot create field '${path[i + 1]}' in element {${key}: ${formatValue(next)}}`,
      );
    }
    container = next as Container;
    parentKey = key;
  }
  const last = path[path.length - 1]!;
  if (Array.isArray(container) && !/^\d+$/.test(last)) {
    throw pathNotViable(
      `Cannot create field '${last}' in element {${parentKey}: ${formatValue(container)}}`,
    );
  }
  return { container, key: last };
}

/** The first array met along a concrete path, for $rename's checks. */
function arrayOnPath(root: Doc, path: readonly string[]): string | undefined {
  let node: unknown = root;
  for (const key of path) {
    if (Array.isArray(node)) return key;
    if (!isPlainObject(node) || !Object.prototype.hasOwnProperty.call(node, key)) return undefined;
    node = node[key];
    if (Array.isArray(node)) return key;
  }
  return undefined;
}

// --- numbers -----------------------------------------------------------------

const INT32_MIN = -2_147_483_648;
const INT32_MAX = 2_147_483_647;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

function isNumeric(value: unknown): boolean {
  return numericKind(value) !== undefined || bsonTag(value) === 'Decimal128';
}

function numberKind(value: unknown): 'int' | 'long' | 'double' | 'decimal' {
  if (bsonTag(value) === 'Decimal128') return 'decimal';
  return numericKind(value) ?? 'double';
}

function asBigInt(value: unknown): bigint {
  if (bsonTag(value) === 'Long') return (value as Long).toBigInt();
  return BigInt((value as Int32).value);
}

function asNumber(value: unknown): number {
  if (bsonTag(value) === 'Long') return (value as Long).toNumber();
  return (value as { value: number }).value;
}

function arithmetic(
  op: '$inc' | '$mul',
  current: unknown,
  operand: unknown,
  describe: () => string,
): unknown {
  const kinds = [numberKind(current), numberKind(operand)];
  if (kinds.includes('decimal')) throw ERRORS.notImplemented(`${op} on a Decimal128 value`);
  if (kinds.includes('double')) {
    const a = asNumber(current);
    const b = asNumber(operand);
    return new Double(op === '$inc' ? a + b : a * b);
  }
  const a = asBigInt(current);
  const b = asBigInt(operand);
  const result = op === '$inc' ? a + b : a * b;
  if (!kinds.includes('long') && result >= BigInt(INT32_MIN) && result <= BigInt(INT32_MAX)) {
    return new Int32(Number(result));
  }
  if (result < INT64_MIN || result > INT64_MAX) {
    throw ERRORS.badValue(
      `Failed to apply ${op} operations to current value (${formatValue(current)}) for document ${describe()}`,
    );
  }
  return Long.fromBigInt(result);
}

// --- the update --------------------------------------------------------------

class OperatorUpdate {
  private readonly statements: Statement[] = [];
  private readonly arrayFilters = new Map<string, Matcher>();
  private readonly usedIdentifiers = new Set<string>();
  private readonly strings: StringComparer | undefined;
  private doc!: Doc;
  private original!: Doc;

  constructor(
    private readonly update: Doc,
    private readonly ctx: OperatorUpdateContext,
  ) {
    this.strings = stringComparer(ctx.options?.collation);
    this.parse();
  }

  private parse(): void {
    const seen: string[][] = [];
    const addPath = (path: string, components: Component[]): void => {
      const text = components.map(componentText);
      for (const other of seen) {
        if (isPrefix(other, text) || isPrefix(text, other)) {
          const shorter = other.length <= text.length ? other : text;
          throw conflict(
            `Updating the path '${path}' would create a conflict at '${shorter.join('.')}'`,
          );
        }
      }
      seen.push(text);
    };
    for (const [op, fields] of Object.entries(this.update)) {
      if (!OPERATORS.has(op)) {
        throw ERRORS.failedToParse(
          `Unknown modifier: ${op}. Expected a valid update modifier or pipeline-style update specified as an array`,
        );
      }
      if (!isPlainObject(fields)) {
        throw ERRORS.failedToParse(
          `Modifiers operate on fields but we found type ${typeName(fields)} instead. For example: {$mod: {<field>: ...}} not {${op}: ${formatValue(fields)}}`,
        );
      }
      for (const [path, operand] of Object.entries(fields)) {
        if (op === '$rename') {
          this.parseRename(path, operand, addPath);
          continue;
        }
        const components = parsePath(path, this.ctx.insert);
        this.validateOperand(op, path, operand);
        addPath(path, components);
        if (op === '$setOnInsert' && !this.ctx.insert) continue;
        this.statements.push({ op, path, components, operand });
      }
    }
    this.parseArrayFilters();
  }

  private parseRename(
    from: string,
    to: unknown,
    addPath: (path: string, components: Component[]) => void,
  ): void {
    if (typeof to !== 'string') {
      throw ERRORS.badValue(
        `The 'to' field for $rename must be a string: ${from}: ${formatValue(to)}`,
      );
    }
    const source = parsePath(from, false);
    const target = parsePath(to, false);
    if (source.some((c) => c.kind !== 'field')) {
      throw ERRORS.badValue(`The source field for $rename may not be dynamic: ${from}`);
    }
    if (target.some((c) => c.kind !== 'field')) {
      throw ERRORS.badValue(`The destination field for $rename may not be dynamic: ${to}`);
    }
    if (from === to) {
      throw ERRORS.badValue(
        `The source and target field for $rename must differ: ${from}: "${to}"`,
      );
    }
    const a = from.split('.');
    const b = to.split('.');
    if (isPrefix(a, b) || isPrefix(b, a)) {
      throw ERRORS.badValue(
        `The source and target field for $rename must not be on the same path: ${from}: "${to}"`,
      );
    }
    addPath(from, source);
    addPath(to, target);
    this.statements.push({ op: '$rename', path: to, components: target, operand: to, from });
  }

  private validateOperand(op: string, path: string, operand: unknown): void {
    switch (op) {
      case '$inc':
      case '$mul':
        if (!isNumeric(operand)) {
          throw new MongoCommandError(
            'TypeMismatch',
            `Cannot ${op === '$inc' ? 'increment' : 'multiply'} with non-numeric argument: {${path}: ${formatValue(operand)}}`,
          );
        }
        break;
      case '$push':
      case '$addToSet':
        this.eachClause(op, operand);
        break;
      case '$pop': {
        const n = isNumeric(operand) ? asNumber(operand) : Number.NaN;
        if (n !== 1 && n !== -1) {
          throw ERRORS.failedToParse(`$pop expects 1 or -1, found: ${formatValue(operand)}`);
        }
        break;
      }
      case '$pullAll':
        if (!Array.isArray(operand)) {
          throw ERRORS.badValue(
            `$pullAll requires an array argument but was given a ${typeName(operand)}`,
          );
        }
        break;
      case '$currentDate':
        if (typeof operand === 'boolean') break;
        if (isPlainObject(operand) && Object.keys(operand).length === 1 && '$type' in operand) {
          if (operand.$type === 'date' || operand.$type === 'timestamp') break;
          throw ERRORS.badValue(
            "The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: {field : {$type: 'date'}}}",
          );
        }
        throw ERRORS.badValue(
          `${path} is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({$type: 'timestamp/date'}).`,
        );
      case '$bit': {
        if (!isPlainObject(operand)) {
          throw ERRORS.badValue(
            `The $bit modifier is not compatible with a ${typeName(operand)}. You must pass in an embedded document: {$bit: {field: {and/or/xor: #}}`,
          );
        }
        for (const [bitOp, value] of Object.entries(operand)) {
          if (!['and', 'or', 'xor'].includes(bitOp)) {
            throw ERRORS.badValue(
              `The $bit modifier only supports 'and', 'or', and 'xor', not '${bitOp}' which is an unknown operator: {${bitOp}: ${formatValue(value)}}`,
            );
          }
          const kind = numericKind(value);
          if (kind !== 'int' && kind !== 'long') {
            throw ERRORS.badValue(
              `The $bit modifier field must be an Integer(32/64 bit); a '${typeName(value)}' is not supported here: {${bitOp}: ${formatValue(value)}}`,
            );
          }
        }
        break;
      }
      default:
        break;
    }
  }

  /** The items, and $push's modifiers, of a $push or $addToSet operand. */
  private eachClause(
    op: string,
    operand: unknown,
  ): { items: unknown[]; slice?: number; sort?: unknown; position?: number } {
    if (!isPlainObject(operand) || !('$each' in operand)) return { items: [operand] };
    const each = operand.$each;
    if (!Array.isArray(each)) {
      throw ERRORS.badValue(
        `The argument to $each in ${op} must be an array but it was of type: ${typeName(each)}`,
      );
    }
    const out: { items: unknown[]; slice?: number; sort?: unknown; position?: number } = {
      items: each as unknown[],
    };
    for (const [clause, value] of Object.entries(operand)) {
      if (clause === '$each') continue;
      if (op === '$addToSet') {
        throw ERRORS.badValue(
          `Found unexpected fields after $each in $addToSet: ${formatValue(operand)}`,
        );
      }
      const integral =
        numericKind(value) === 'int' ||
        numericKind(value) === 'long' ||
        (numericKind(value) === 'double' && Number.isInteger(asNumber(value)));
      switch (clause) {
        case '$slice':
          if (!integral) {
            throw ERRORS.badValue(
              `The value for $slice must be an integer value but was given type: ${typeName(value)}`,
            );
          }
          out.slice = asNumber(value);
          break;
        case '$position':
          if (!integral) {
            throw ERRORS.badValue(
              `The value for $position must be an integer value, not of type: ${typeName(value)}`,
            );
          }
          out.position = asNumber(value);
          break;
        case '$sort': {
          const direction = (v: unknown) => isNumeric(v) && [1, -1].includes(asNumber(v));
          const valid =
            direction(value) ||
            (isPlainObject(value) &&
              Object.keys(value).length > 0 &&
              Object.values(value).every(direction));
          if (!valid) {
            throw ERRORS.badValue(
              'The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields',
            );
          }
          out.sort = value;
          break;
        }
        default:
          throw ERRORS.badValue(`Unrecognized clause in $push: ${clause}`);
      }
    }
    return out;
  }

  private parseArrayFilters(): void {
    for (const filter of this.ctx.arrayFilters ?? []) {
      const ids = new Set<string>();
      const gather = (clause: Doc): void => {
        for (const [key, value] of Object.entries(clause)) {
          if ((key === '$and' || key === '$or' || key === '$nor') && Array.isArray(value)) {
            for (const inner of value) if (isPlainObject(inner)) gather(inner);
          } else if (!key.startsWith('$')) {
            ids.add(key.split('.')[0]!);
          }
        }
      };
      gather(filter);
      const [id, other] = [...ids];
      if (id === undefined) {
        throw ERRORS.failedToParse(
          'Error parsing array filter :: caused by :: Cannot use an expression without a top-level field name in arrayFilters',
        );
      }
      if (other !== undefined) {
        throw ERRORS.failedToParse(
          `Error parsing array filter :: caused by :: Expected a single top-level field name, found '${id}' and '${other}'`,
        );
      }
      if (!IDENTIFIER.test(id)) {
        throw ERRORS.failedToParse(
          `Error parsing array filter :: caused by :: The top-level field name must be an alphanumeric string beginning with a lowercase letter, found '${id}'`,
        );
      }
      if (this.arrayFilters.has(id)) {
        throw ERRORS.failedToParse(
          `Found multiple array filters with the same top-level field name ${id}`,
        );
      }
      this.arrayFilters.set(id, compileFilter(filter, this.ctx.options));
    }
    for (const statement of this.statements) {
      for (const component of statement.components) {
        if (component.kind !== 'filtered') continue;
        if (!this.arrayFilters.has(component.id)) {
          throw ERRORS.badValue(
            `No array filter found for identifier '${component.id}' in path '${statement.path}'`,
          );
        }
        this.usedIdentifiers.add(component.id);
      }
    }
    for (const id of this.arrayFilters.keys()) {
      if (!this.usedIdentifiers.has(id)) {
        throw ERRORS.failedToParse(
          `The array filter for identifier '${id}' was not used in the update ${formatValue(this.update)}`,
        );
      }
    }
  }

  private describe(): string {
    return this.doc._id === undefined ? '{}' : `{_id: ${formatValue(this.doc._id)}}`;
  }

  /** The concrete paths a statement's path stands for in the document. */
  private expand(statement: Statement): string[][] {
    const out: string[][] = [];
    const walk = (node: unknown, i: number, prefix: string[]): void => {
      if (i === statement.components.length) {
        out.push(prefix);
        return;
      }
      const component = statement.components[i]!;
      if (component.kind === 'field') {
        const next =
          Array.isArray(node) && /^\d+$/.test(component.name)
            ? (node as unknown[])[Number(component.name)]
            : isPlainObject(node) && Object.prototype.hasOwnProperty.call(node, component.name)
              ? node[component.name]
              : undefined;
        walk(next, i + 1, [...prefix, component.name]);
        return;
      }
      if (component.kind === 'positional') {
        const index = this.ctx.insert
          ? undefined
          : matchedIndex(this.original, prefix, this.ctx.filter, this.ctx.options);
        if (index === undefined) {
          throw ERRORS.badValue(
            'The positional operator did not find the match needed from the query.',
          );
        }
        walk(Array.isArray(node) ? (node as unknown[])[index] : undefined, i + 1, [
          ...prefix,
          String(index),
        ]);
        return;
      }
      if (node === undefined) {
        throw ERRORS.badValue(
          `The path '${prefix.join('.')}' must exist in the document in order to apply array updates.`,
        );
      }
      if (!Array.isArray(node)) {
        throw ERRORS.badValue(
          `Cannot apply array updates to non-array element ${prefix[prefix.length - 1]}: ${formatValue(node)}`,
        );
      }
      const matcher =
        component.kind === 'filtered' ? this.arrayFilters.get(component.id) : undefined;
      (node as unknown[]).forEach((element, index) => {
        if (matcher && !matcher({ [(component as { id: string }).id]: toQueryForm(element) }))
          return;
        walk(element, i + 1, [...prefix, String(index)]);
      });
    };
    walk(this.doc, 0, []);
    return out;
  }

  apply(old: Doc): Doc {
    this.original = old;
    this.doc = cloneDoc(old);
    const planned: Array<{ statement: Statement; path: string[] }> = [];
    for (const statement of this.statements) {
      for (const path of this.expand(statement)) planned.push({ statement, path });
      if (statement.from)
        planned.push({
          statement: { ...statement, op: '$rename:from' },
          path: statement.from.split('.'),
        });
    }
    // Two statements that reach the same field ($[] and $[id], or positional and an index).
    const sorted = [...planned].sort((a, b) => comparePaths(a.path, b.path));
    for (let i = 1; i < sorted.length; i++) {
      const previous = sorted[i - 1]!;
      const current = sorted[i]!;
      if (
        previous.statement.path === current.statement.path &&
        previous.statement.op === current.statement.op
      )
        continue;
      if (isPrefix(previous.path, current.path)) {
        throw conflict(`Update created a conflict at '${previous.path.join('.')}'`);
      }
    }
    for (const { statement, path } of sorted) {
      if (statement.op === '$rename:from') continue;
      this.applyOne(statement, path);
    }
    if (
      old._id !== undefined &&
      (this.doc._id === undefined || canonicalKey(this.doc._id) !== canonicalKey(old._id))
    ) {
      throw ERRORS.immutableId();
    }
    return withIdFirst(this.doc);
  }

  private applyOne(statement: Statement, path: string[]): void {
    const { op, operand } = statement;
    const doc = this.doc;
    const key = path[path.length - 1]!;
    switch (op) {
      case '$set':
      case '$setOnInsert': {
        const target = ensurePath(doc, path);
        setIn(target.container, target.key, cloneBson(operand));
        return;
      }
      case '$unset': {
        const found = locate(doc, path);
        if (!found) return;
        if (Array.isArray(found.container)) found.container[Number(found.key)] = null;
        else delete found.container[found.key];
        return;
      }
      case '$inc':
      case '$mul': {
        const found = locate(doc, path);
        if (found) {
          if (!isNumeric(found.value)) {
            throw new MongoCommandError(
              'TypeMismatch',
              `Cannot apply ${op} to a value of non-numeric type. ${this.describe()} has the field '${key}' of non-numeric type ${typeName(found.value)}`,
            );
          }
          setIn(
            found.container,
            found.key,
            arithmetic(op, found.value, operand, () => this.describe()),
          );
          return;
        }
        const target = ensurePath(doc, path);
        let value: unknown = cloneBson(operand);
        if (op === '$mul') {
          const kind = numberKind(operand);
          if (kind === 'decimal') throw ERRORS.notImplemented('$mul on a Decimal128 value');
          value =
            kind === 'int' ? new Int32(0) : kind === 'long' ? Long.fromNumber(0) : new Double(0);
        }
        setIn(target.container, target.key, value);
        return;
      }
      case '$min':
      case '$max': {
        const found = locate(doc, path);
        if (found) {
          const order = compareBson(operand, found.value, this.strings);
          if ((op === '$min' && order < 0) || (op === '$max' && order > 0)) {
            setIn(found.container, found.key, cloneBson(operand));
          }
          return;
        }
        const target = ensurePath(doc, path);
        setIn(target.container, target.key, cloneBson(operand));
        return;
      }
      case '$currentDate': {
        const target = ensurePath(doc, path);
        const now = new Date();
        const value =
          isPlainObject(operand) && operand.$type === 'timestamp'
            ? new Timestamp({ t: Math.floor(now.getTime() / 1000), i: nextIncrement() })
            : now;
        setIn(target.container, target.key, value);
        return;
      }
      case '$bit': {
        const found = locate(doc, path);
        let current: unknown = found?.value;
        if (found && numericKind(current) !== 'int' && numericKind(current) !== 'long') {
          throw ERRORS.badValue(
            `Cannot apply $bit to a value of non-integral type.${this.describe()} has the field ${key} of non-integer type ${typeName(current)}`,
          );
        }
        let long = found ? numericKind(current) === 'long' : false;
        let bits = found ? asBigInt(current) : 0n;
        for (const [bitOp, value] of Object.entries(operand as Doc)) {
          long ||= numericKind(value) === 'long';
          const v = asBigInt(value);
          bits = bitOp === 'and' ? bits & v : bitOp === 'or' ? bits | v : bits ^ v;
        }
        current = long
          ? Long.fromBigInt(BigInt.asIntN(64, bits))
          : new Int32(Number(BigInt.asIntN(32, bits)));
        const target = found ?? ensurePath(doc, path);
        setIn(target.container, target.key, current);
        return;
      }
      case '$push':
      case '$addToSet':
        this.applyPush(op, path, operand);
        return;
      case '$pull':
      case '$pullAll': {
        const found = locate(doc, path);
        if (!found) return;
        if (!Array.isArray(found.value))
          throw ERRORS.badValue('Cannot apply $pull to a non-array value');
        const remove =
          op === '$pull'
            ? this.pullMatcher(operand)
            : (value: unknown) =>
                (operand as unknown[]).some((item) => bsonEquals(value, item, this.strings));
        setIn(
          found.container,
          found.key,
          (found.value as unknown[]).filter((value) => !remove(value)),
        );
        return;
      }
      case '$pop': {
        const found = locate(doc, path);
        if (!found) return;
        if (!Array.isArray(found.value)) {
          throw new MongoCommandError(
            'TypeMismatch',
            `Path '${path.join('.')}' contains an element of non-array type '${typeName(found.value)}'`,
          );
        }
        const array = [...(found.value as unknown[])];
        if (asNumber(operand) === 1) array.pop();
        else array.shift();
        setIn(found.container, found.key, array);
        return;
      }
      case '$rename': {
        const from = statement.from!.split('.');
        const source = locate(doc, from);
        const arrayField = arrayOnPath(doc, from);
        if (arrayField !== undefined) {
          throw ERRORS.badValue(
            `The source field cannot be an array element, '${statement.from}' in doc with _id: ${formatValue(doc._id)} has an array field called '${arrayField}'`,
          );
        }
        if (!source) return;
        const destinationArray = arrayOnPath(doc, path);
        if (destinationArray !== undefined) {
          throw ERRORS.badValue(
            `The destination field cannot be an array element, '${path.join('.')}' in doc with _id: ${formatValue(doc._id)} has an array field called '${destinationArray}'`,
          );
        }
        delete (source.container as Doc)[source.key];
        const target = ensurePath(doc, path);
        setIn(target.container, target.key, source.value);
        return;
      }
      default:
        throw ERRORS.notImplemented(`the update operator ${op}`);
    }
  }

  private applyPush(op: '$push' | '$addToSet', path: string[], operand: unknown): void {
    const clause = this.eachClause(op, operand);
    const found = locate(this.doc, path);
    let array: unknown[];
    if (found) {
      if (!Array.isArray(found.value)) {
        const key = path[path.length - 1];
        throw ERRORS.badValue(
          op === '$push'
            ? `The field '${key}' must be an array but is of type ${typeName(found.value)} in document ${this.describe()}`
            : `Cannot apply $addToSet to non-array field. Field named '${key}' has non-array type ${typeName(found.value)}`,
        );
      }
      array = [...(found.value as unknown[])];
    } else {
      array = [];
    }
    const items = clause.items.map((item) => cloneBson(item));
    if (op === '$addToSet') {
      for (const item of items) {
        if (!array.some((existing) => bsonEquals(existing, item, this.strings))) array.push(item);
      }
    } else {
      let position = clause.position ?? array.length;
      if (position < 0) position = Math.max(0, array.length + position);
      position = Math.min(position, array.length);
      array.splice(position, 0, ...items);
      if (clause.sort !== undefined) this.sortArray(array, clause.sort);
      if (clause.slice !== undefined) {
        array =
          clause.slice >= 0
            ? array.slice(0, clause.slice)
            : array.slice(Math.max(0, array.length + clause.slice));
      }
    }
    const target = found ?? ensurePath(this.doc, path);
    setIn(target.container, target.key, array);
  }

  private sortArray(array: unknown[], spec: unknown): void {
    if (!isPlainObject(spec)) {
      const direction = asNumber(spec);
      array.sort((a, b) => direction * compareBson(a, b, this.strings));
      return;
    }
    const fields = Object.entries(spec).map(([field, direction]) => ({
      segments: field.split('.'),
      direction: asNumber(direction),
    }));
    const at = (value: unknown, segments: string[]): unknown => {
      let node = value;
      for (const segment of segments) {
        if (!isPlainObject(node)) return null;
        node = node[segment];
      }
      return node === undefined ? null : node;
    };
    array.sort((a, b) => {
      for (const { segments, direction } of fields) {
        const order = compareBson(at(a, segments), at(b, segments), this.strings);
        if (order !== 0) return direction * order;
      }
      return 0;
    });
  }

  /** MongoDB's $pull matching: a query on element documents, operators on values, or equality. */
  private pullMatcher(condition: unknown): (value: unknown) => boolean {
    if (isPlainObject(condition)) {
      const keys = Object.keys(condition);
      const first = keys[0];
      const onValue =
        first !== undefined &&
        first.startsWith('$') &&
        !['$and', '$or', '$nor', '$expr', '$where', '$comment'].includes(first);
      if (!onValue) {
        const matches = compileFilter(condition, this.ctx.options);
        return (value) => isPlainObject(value) && matches(toQueryForm(value) as Doc);
      }
      const matches = compileFilter({ v: condition }, this.ctx.options);
      return (value) => matches({ v: toQueryForm(value) });
    }
    if (condition instanceof RegExp || bsonTag(condition) === 'BSONRegExp') {
      const matches = compileFilter({ v: condition }, this.ctx.options);
      return (value) => matches({ v: toQueryForm(value) });
    }
    return (value) => bsonEquals(value, condition, this.strings);
  }
}

let increment = 0;
function nextIncrement(): number {
  increment = (increment + 1) % 0x7fffffff;
  return increment;
}

/** The document an operator update turns `old` into (a fresh tree; `old` is untouched). */
export function applyOperatorUpdate(old: Doc, update: Doc, ctx: OperatorUpdateContext): Doc {
  return new OperatorUpdate(update, ctx).apply(old);
}
