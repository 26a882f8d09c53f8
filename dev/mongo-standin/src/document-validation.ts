// Schema validation: a collection's `validator` (query operators, and
// `$jsonSchema` with MongoDB's keywords), `validationLevel` (strict, moderate,
// off) and `validationAction` (error, warn), checked on inserts, updates,
// upserts and findAndModify unless the command sets
// bypassDocumentValidation. A refused write is MongoDB's
// DocumentValidationFailure (121, "Document failed validation"). An unknown
// $jsonSchema keyword is refused when the validator is set, as MongoDB does.

import type { Doc } from './bson-values';
import { formatValue, isPlainObject, isTruthy, numericValue, toQueryDoc } from './bson-values';
import { bsonEquals, bsonTypeAlias } from './bson-compare';
import { MongoCommandError } from './command-errors';
import { compileFilter } from './mingo-adapter';
import type { CollectionStore } from './storage-engine';

type Check = (value: unknown) => boolean;

const BSON_TYPES = new Set([
  'double',
  'string',
  'object',
  'array',
  'binData',
  'undefined',
  'objectId',
  'bool',
  'date',
  'null',
  'regex',
  'dbPointer',
  'javascript',
  'symbol',
  'javascriptWithScope',
  'int',
  'timestamp',
  'long',
  'decimal',
  'minKey',
  'maxKey',
  'number',
]);
const NUMERIC = new Set(['int', 'long', 'double', 'decimal']);
const JSON_TYPES: Record<string, (alias: string) => boolean> = {
  object: (a) => a === 'object',
  array: (a) => a === 'array',
  number: (a) => NUMERIC.has(a),
  boolean: (a) => a === 'bool',
  string: (a) => a === 'string',
  null: (a) => a === 'null',
};

const IGNORED_KEYWORDS = new Set(['title', 'description', '$comment']);

const invalid = (message: string) => new MongoCommandError('FailedToParse', message);

const asList = (value: unknown): unknown[] =>
  Array.isArray(value) ? (value as unknown[]) : [value];

function numberOf(value: unknown, keyword: string): number {
  const n = numericValue(value);
  if (n === undefined) throw invalid(`$jsonSchema keyword '${keyword}' must be a number`);
  return n;
}

function schemaOf(value: unknown, keyword: string): Doc {
  if (!isPlainObject(value)) throw invalid(`$jsonSchema keyword '${keyword}' must be an object`);
  return value;
}

/** Compiles a $jsonSchema document into a check on typed values; unknown keywords are refused. */
export function compileJsonSchema(schema: Doc): Check {
  const checks: Check[] = [];
  const isObject = (v: unknown): v is Doc => isPlainObject(v);
  for (const [keyword, spec] of Object.entries(schema)) {
    switch (keyword) {
      case 'bsonType': {
        const types = asList(spec).map(String);
        for (const t of types)
          if (!BSON_TYPES.has(t)) throw invalid(`Unknown type name alias: ${t}`);
        checks.push((v) => {
          const alias = bsonTypeAlias(v);
          return types.some((t) => t === alias || (t === 'number' && NUMERIC.has(alias)));
        });
        break;
      }
      case 'type': {
        const types = asList(spec).map(String);
        for (const t of types) {
          if (t === 'integer') {
            throw invalid("$jsonSchema type 'integer' is not currently supported.");
          }
          if (!JSON_TYPES[t]) throw invalid(`Unknown $jsonSchema type: ${t}`);
        }
        checks.push((v) => types.some((t) => JSON_TYPES[t]!(bsonTypeAlias(v))));
        break;
      }
      case 'enum': {
        if (!Array.isArray(spec)) throw invalid("$jsonSchema keyword 'enum' must be an array");
        checks.push((v) => (spec as unknown[]).some((item) => bsonEquals(v, item)));
        break;
      }
      case 'minimum':
      case 'maximum': {
        const bound = numberOf(spec, keyword);
        const exclusive = isTruthy(
          schema[keyword === 'minimum' ? 'exclusiveMinimum' : 'exclusiveMaximum'],
        );
        checks.push((v) => {
          const n = numericValue(v);
          if (n === undefined) return true;
          if (keyword === 'minimum') return exclusive ? n > bound : n >= bound;
          return exclusive ? n < bound : n <= bound;
        });
        break;
      }
      case 'exclusiveMinimum':
      case 'exclusiveMaximum':
        break;
      case 'multipleOf': {
        const factor = numberOf(spec, keyword);
        checks.push((v) => {
          const n = numericValue(v);
          return n === undefined || Number.isInteger(n / factor);
        });
        break;
      }
      case 'minLength':
      case 'maxLength': {
        const bound = numberOf(spec, keyword);
        checks.push((v) => {
          if (typeof v !== 'string') return true;
          const length = [...v].length;
          return keyword === 'minLength' ? length >= bound : length <= bound;
        });
        break;
      }
      case 'pattern': {
        const re = new RegExp(String(spec), 'u');
        checks.push((v) => typeof v !== 'string' || re.test(v));
        break;
      }
      case 'required': {
        if (!Array.isArray(spec)) throw invalid("$jsonSchema keyword 'required' must be an array");
        const fields = (spec as unknown[]).map(String);
        checks.push(
          (v) => !isObject(v) || fields.every((f) => Object.prototype.hasOwnProperty.call(v, f)),
        );
        break;
      }
      case 'properties':
      case 'patternProperties':
      case 'additionalProperties':
        break;
      case 'minProperties':
      case 'maxProperties': {
        const bound = numberOf(spec, keyword);
        checks.push((v) => {
          if (!isObject(v)) return true;
          const n = Object.keys(v).length;
          return keyword === 'minProperties' ? n >= bound : n <= bound;
        });
        break;
      }
      case 'items': {
        if (Array.isArray(spec)) {
          const positional = (spec as unknown[]).map((s, i) =>
            compileJsonSchema(schemaOf(s, `items.${i}`)),
          );
          const additional = schema.additionalItems;
          const rest =
            additional === undefined || additional === true
              ? () => true
              : additional === false
                ? () => false
                : compileJsonSchema(schemaOf(additional, 'additionalItems'));
          checks.push(
            (v) =>
              !Array.isArray(v) ||
              (v as unknown[]).every((item, i) => (positional[i] ?? rest)(item)),
          );
        } else {
          const each = compileJsonSchema(schemaOf(spec, 'items'));
          checks.push((v) => !Array.isArray(v) || (v as unknown[]).every(each));
        }
        break;
      }
      case 'additionalItems':
        break;
      case 'minItems':
      case 'maxItems': {
        const bound = numberOf(spec, keyword);
        checks.push((v) => {
          if (!Array.isArray(v)) return true;
          return keyword === 'minItems' ? v.length >= bound : v.length <= bound;
        });
        break;
      }
      case 'uniqueItems':
        if (isTruthy(spec)) {
          checks.push(
            (v) =>
              !Array.isArray(v) ||
              (v as unknown[]).every((a, i) =>
                (v as unknown[]).every((b, j) => j <= i || !bsonEquals(a, b)),
              ),
          );
        }
        break;
      case 'allOf':
      case 'anyOf':
      case 'oneOf': {
        if (!Array.isArray(spec))
          throw invalid(`$jsonSchema keyword '${keyword}' must be an array`);
        const subs = (spec as unknown[]).map((s) => compileJsonSchema(schemaOf(s, keyword)));
        checks.push((v) => {
          const passed = subs.filter((sub) => sub(v)).length;
          if (keyword === 'allOf') return passed === subs.length;
          if (keyword === 'anyOf') return passed > 0;
          return passed === 1;
        });
        break;
      }
      case 'not': {
        const sub = compileJsonSchema(schemaOf(spec, 'not'));
        checks.push((v) => !sub(v));
        break;
      }
      case 'dependencies': {
        const deps = Object.entries(schemaOf(spec, 'dependencies')).map(([field, dep]) => ({
          field,
          check: Array.isArray(dep)
            ? (v: Doc) =>
                (dep as unknown[]).every((f) => Object.prototype.hasOwnProperty.call(v, String(f)))
            : compileJsonSchema(schemaOf(dep, `dependencies.${field}`)),
        }));
        checks.push(
          (v) =>
            !isObject(v) ||
            deps.every(
              ({ field, check }) => !Object.prototype.hasOwnProperty.call(v, field) || check(v),
            ),
        );
        break;
      }
      default:
        if (IGNORED_KEYWORDS.has(keyword)) break;
        throw invalid(`Unknown $jsonSchema keyword: ${keyword}`);
    }
  }
  // properties / patternProperties / additionalProperties apply together.
  if (
    schema.properties !== undefined ||
    schema.patternProperties !== undefined ||
    schema.additionalProperties !== undefined
  ) {
    const properties = Object.entries(
      schema.properties === undefined ? {} : schemaOf(schema.properties, 'properties'),
    ).map(([name, sub]) => [name, compileJsonSchema(schemaOf(sub, `properties.${name}`))] as const);
    const patterns = Object.entries(
      schema.patternProperties === undefined
        ? {}
        : schemaOf(schema.patternProperties, 'patternProperties'),
    ).map(([re, sub]) => [new RegExp(re, 'u'), compileJsonSchema(schemaOf(sub, re))] as const);
    const additional = schema.additionalProperties;
    const rest: Check =
      additional === undefined || additional === true
        ? () => true
        : additional === false
          ? () => false
          : compileJsonSchema(schemaOf(additional, 'additionalProperties'));
    const byName = new Map(properties);
    checks.push((v) => {
      if (!isObject(v)) return true;
      return Object.entries(v).every(([key, value]) => {
        const named = byName.get(key);
        const matching = patterns.filter(([re]) => re.test(key));
        if (named && !named(value)) return false;
        if (matching.some(([, check]) => !check(value))) return false;
        return named !== undefined || matching.length > 0 || rest(value);
      });
    });
  }
  return (value) => checks.every((check) => check(value));
}

/** Compiles a collection's validator (query operators and a top-level $jsonSchema). */
export function compileValidator(validator: Doc): (doc: Doc) => boolean {
  const { $jsonSchema: schema, ...rest } = validator;
  const checks: Array<(doc: Doc) => boolean> = [];
  if (schema !== undefined) {
    if (!isPlainObject(schema)) throw invalid('$jsonSchema must be an object');
    const check = compileJsonSchema(schema);
    checks.push((doc) => check(doc));
  }
  if (Object.keys(rest).length) {
    const matches = compileFilter(rest);
    checks.push((doc) => matches(toQueryDoc(doc)));
  }
  return (doc) => checks.every((check) => check(doc));
}

const asText = (value: unknown): string => (typeof value === 'string' ? value : formatValue(value));

/** Checks a validator, validationLevel and validationAction when they are set. */
export function checkValidationOptions(options: Doc): void {
  if (options.validator !== undefined) {
    if (!isPlainObject(options.validator)) {
      throw new MongoCommandError(
        'TypeMismatch',
        "BSON field 'validator' is the wrong type, expected object",
      );
    }
    compileValidator(options.validator);
  }
  if (
    options.validationLevel !== undefined &&
    !['off', 'strict', 'moderate'].includes(asText(options.validationLevel))
  ) {
    throw new MongoCommandError(
      'BadValue',
      `Enumeration value '${asText(options.validationLevel)}' for field 'validationLevel' is not a valid value.`,
    );
  }
  if (
    options.validationAction !== undefined &&
    !['error', 'warn'].includes(asText(options.validationAction))
  ) {
    throw new MongoCommandError(
      'BadValue',
      `Enumeration value '${asText(options.validationAction)}' for field 'validationAction' is not a valid value.`,
    );
  }
}

const compiled = new WeakMap<Doc, (doc: Doc) => boolean>();

/**
 * Refuses a write whose resulting document fails the collection's validator.
 * `old` is the document an update changes (moderate validation skips updates
 * of documents that were already invalid).
 */
export function validateWrite(
  store: CollectionStore,
  doc: Doc,
  old: Doc | undefined,
  bypass: boolean,
): void {
  const { validator, validationLevel = 'strict', validationAction = 'error' } = store.options;
  if (bypass || !isPlainObject(validator) || Object.keys(validator).length === 0) return;
  if (validationLevel === 'off' || validationAction === 'warn') return;
  let check = compiled.get(validator);
  if (!check) {
    check = compileValidator(validator);
    compiled.set(validator, check);
  }
  if (check(doc)) return;
  if (old && validationLevel === 'moderate' && !check(old)) return;
  throw new MongoCommandError('DocumentValidationFailure', 'Document failed validation', {
    errInfo: {
      failingDocumentId: doc._id,
      details: { operatorName: '$jsonSchema' in validator ? '$jsonSchema' : '$and' },
    },
  });
}
