/**
 * Checks responses against `api/openapi.yaml`, so tests catch drift between
 * the code and its description.
 *
 * The document is loaded once. Its `components` and `paths` are added to one
 * Ajv (JSON Schema 2020-12, the dialect of OpenAPI 3.1) under `SPEC_ID`, so a
 * schema is compiled where it stands in the document and its
 * `#/components/...` references resolve as they do for any OpenAPI tool.
 *
 *   expectMatchesSpec('POST', '/media/upload', res.status, await res.json(), res.headers);
 */
import { createHash } from 'node:crypto';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Ajv2020, { type ErrorObject, type ValidateFunction } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { parse } from 'yaml';

export const SPEC_PATH = join(__dirname, '..', '..', 'api', 'openapi.yaml');
/** The `$id` under which the document's components and paths are known to Ajv. */
export const SPEC_ID = 'urn:media-storage-service:openapi';

export const HTTP_METHODS = [
  'get',
  'put',
  'post',
  'delete',
  'options',
  'head',
  'patch',
  'trace',
] as const;

type JsonObject = Record<string, unknown>;

export interface OpenApiDocument {
  openapi: string;
  paths: Record<string, JsonObject>;
  components: JsonObject;
  [key: string]: unknown;
}

export type HeadersLike = Headers | Record<string, string | string[] | number | undefined>;

const isObject = (v: unknown): v is JsonObject =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

let cached: { doc: OpenApiDocument; ajv: Ajv2020 } | undefined;

/**
 * The document parsed from its YAML, through a JSON copy in the temporary
 * directory named by the YAML's hash: parsing the YAML takes a few hundred
 * milliseconds, which every test file (jest gives each its own modules)
 * would otherwise pay; JSON.parse of the same takes a few.
 */
function parsedSpec(): unknown {
  const text = readFileSync(SPEC_PATH, 'utf8');
  const hash = createHash('sha256').update(text).digest('hex').slice(0, 16);
  const copy = join(tmpdir(), `media-openapi-${hash}.json`);
  try {
    return JSON.parse(readFileSync(copy, 'utf8')) as unknown;
  } catch {
    const doc = parse(text) as unknown;
    // Written whole, then renamed: a file reading it at the same time sees all of it or none.
    const partial = `${copy}.${process.pid}`;
    writeFileSync(partial, JSON.stringify(doc));
    renameSync(partial, copy);
    return doc;
  }
}

function load(): { doc: OpenApiDocument; ajv: Ajv2020 } {
  if (cached) return cached;
  const doc = parsedSpec();
  if (!isObject(doc) || !isObject(doc.paths) || !isObject(doc.components)) {
    throw new Error(`${SPEC_PATH} does not look like an OpenAPI document (no paths or components)`);
  }
  // Strict, so a misspelt keyword fails instead of being ignored; union types (`[integer,
  // string]`) and `required` inside `anyOf` branches are ordinary JSON Schema, so allowed.
  const ajv = new Ajv2020({
    allErrors: true,
    strict: true,
    strictRequired: false,
    allowUnionTypes: true,
  });
  addFormats(ajv);
  // Not schema keywords: they only hold the schemas that JSON pointers reach into.
  ajv.addVocabulary(['components', 'paths']);
  ajv.addSchema({ $id: SPEC_ID, components: doc.components, paths: doc.paths });
  cached = { doc: doc as OpenApiDocument, ajv };
  return cached;
}

/** The parsed document (shared: do not modify it). */
export function loadSpec(): OpenApiDocument {
  return load().doc;
}

/** `['paths', '/media/upload']` → `/paths/~1media~1upload`. */
export function pointerOf(parts: readonly string[]): string {
  return parts.map((p) => `/${p.replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');
}

/** The node at a JSON pointer (`/components/schemas/Error`) of the document. */
export function nodeAt(pointer: string): unknown {
  let node: unknown = load().doc;
  for (const raw of pointer.split('/').slice(1)) {
    const part = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (!isObject(node) && !Array.isArray(node)) return undefined;
    node = (node as Record<string, unknown>)[part];
  }
  return node;
}

/** Follows `$ref`s (local ones only) from a node at `pointer` to the object they name. */
export function deref(node: unknown, pointer: string): { node: JsonObject; pointer: string } {
  const seen = new Set<string>();
  let current = node;
  let at = pointer;
  while (isObject(current) && typeof current.$ref === 'string') {
    const ref = current.$ref;
    if (!ref.startsWith('#/')) throw new Error(`${at}: only local $refs are supported (${ref})`);
    if (seen.has(ref)) throw new Error(`${at}: $ref cycle through ${ref}`);
    seen.add(ref);
    at = ref.slice(1);
    current = nodeAt(at);
    if (current === undefined) throw new Error(`${pointer}: $ref ${ref} resolves to nothing`);
  }
  if (!isObject(current)) throw new Error(`${at}: expected an object`);
  return { node: current, pointer: at };
}

/** An Ajv validator for the schema at a JSON pointer of the document. */
export function validatorAt(pointer: string): ValidateFunction {
  const { ajv } = load();
  const validate = ajv.getSchema(`${SPEC_ID}#${pointer}`);
  if (!validate) throw new Error(`no schema at ${pointer} in ${SPEC_PATH}`);
  return validate;
}

/** Ajv errors, one per line. */
export function describeAjvErrors(errors: ErrorObject[] | null | undefined): string {
  return (errors ?? [])
    .map((e) => {
      const extra =
        e.keyword === 'additionalProperties'
          ? ` "${String((e.params as { additionalProperty?: unknown }).additionalProperty)}"`
          : e.keyword === 'unevaluatedProperties'
            ? ` "${String((e.params as { unevaluatedProperty?: unknown }).unevaluatedProperty)}"`
            : e.keyword === 'enum' || e.keyword === 'const'
              ? ` ${JSON.stringify(e.params)}`
              : '';
      return `  - ${e.instancePath || '(body)'}: ${e.message ?? e.keyword}${extra} (${e.schemaPath})`;
    })
    .join('\n');
}

/** Every operation the document describes, methods upper-case. */
export function specOperations(): { method: string; path: string }[] {
  const ops: { method: string; path: string }[] = [];
  for (const [path, item] of Object.entries(loadSpec().paths)) {
    for (const method of HTTP_METHODS) {
      if (isObject(item[method])) ops.push({ method: method.toUpperCase(), path });
    }
  }
  return ops;
}

function templateMatches(template: string, path: string): boolean {
  const pattern = template
    .split(/(\{[^}]+\})/)
    .map((part) =>
      /^\{[^}]+\}$/.test(part) ? '[^/]+' : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'),
    )
    .join('');
  return new RegExp(`^${pattern}$`).test(path);
}

/** The operation for a method and a path template (a concrete path or a query string also do). */
function findOperation(method: string, path: string): { op: JsonObject; pointer: string } {
  const { paths } = loadSpec();
  const m = method.toLowerCase();
  const bare = path.split('?')[0]!;
  const template = bare in paths ? bare : Object.keys(paths).find((t) => templateMatches(t, bare));
  const op = template === undefined ? undefined : paths[template]?.[m];
  if (template === undefined || !isObject(op)) {
    const known = specOperations()
      .map((o) => `${o.method} ${o.path}`)
      .join(', ');
    throw new Error(
      `${method.toUpperCase()} ${path} is not described in api/openapi.yaml (described: ${known})`,
    );
  }
  return { op, pointer: pointerOf(['paths', template, m]) };
}

function headerValue(headers: HeadersLike, name: string): string | undefined {
  if (typeof Headers !== 'undefined' && headers instanceof Headers) {
    return headers.get(name) ?? undefined;
  }
  const wanted = name.toLowerCase();
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() !== wanted || value === undefined) continue;
    return Array.isArray(value) ? value.join(', ') : String(value);
  }
  return undefined;
}

const isJsonMediaType = (mediaType: string) =>
  /^application\/(?:[\w.+-]+\+)?json$/i.test(mediaType);

/** `image/*` matches `image/png`; parameters (`; charset=utf-8`) are ignored. */
function mediaTypeMatches(range: string, contentType: string): boolean {
  const [type, subtype] = contentType.split(';')[0]!.trim().toLowerCase().split('/');
  const [rangeType, rangeSubtype] = range.toLowerCase().split('/');
  return (
    (rangeType === '*' || rangeType === type) && (rangeSubtype === '*' || rangeSubtype === subtype)
  );
}

function isEmptyBody(body: unknown): boolean {
  if (body === undefined || body === null || body === '') return true;
  if (body instanceof Uint8Array || body instanceof ArrayBuffer) return body.byteLength === 0;
  return false;
}

function parseJsonBody(body: unknown): { value: unknown } | { problem: string } {
  if (typeof body === 'string' || body instanceof Uint8Array) {
    const text = typeof body === 'string' ? body : Buffer.from(body).toString('utf8');
    try {
      return { value: JSON.parse(text) as unknown };
    } catch {
      return { problem: `the body is not JSON: ${text.slice(0, 200)}` };
    }
  }
  return { value: body };
}

/**
 * Fails unless `api/openapi.yaml` describes `status` for this operation, the
 * JSON body matches that response's schema, and every header the response
 * marks `required: true` is present (and matches its schema). Without
 * `headers`, headers are not checked and a body is validated when the
 * response has an `application/json` content.
 */
export function expectMatchesSpec(
  method: string,
  pathTemplate: string,
  status: number,
  body: unknown,
  headers?: HeadersLike,
): void {
  const { op, pointer: opPointer } = findOperation(method, pathTemplate);
  const where = `${method.toUpperCase()} ${pathTemplate} → ${status}`;
  const responses = isObject(op.responses) ? op.responses : {};
  const key = [String(status), `${String(status)[0]}XX`, 'default'].find((k) => k in responses);
  if (key === undefined) {
    throw new Error(
      `${where}: api/openapi.yaml describes no ${status} response for this operation (described: ${Object.keys(responses).join(', ')})`,
    );
  }
  const { node: response, pointer } = deref(
    responses[key],
    `${opPointer}${pointerOf(['responses', key])}`,
  );
  const problems: string[] = [];

  // Headers. (OpenAPI ignores a `Content-Type` header definition; content covers it.)
  const headerSpecs = isObject(response.headers) ? response.headers : {};
  if (headers) {
    for (const [name, raw] of Object.entries(headerSpecs)) {
      if (name.toLowerCase() === 'content-type') continue;
      const { node: spec, pointer: specPointer } = deref(
        raw,
        `${pointer}${pointerOf(['headers', name])}`,
      );
      const value = headerValue(headers, name);
      if (value === undefined) {
        if (spec.required === true) problems.push(`required header ${name} is missing`);
        continue;
      }
      if (!isObject(spec.schema)) continue;
      const schema = deref(spec.schema, `${specPointer}/schema`);
      const validate = validatorAt(schema.pointer);
      const typed = schema.node.type === 'integer' || schema.node.type === 'number';
      const candidate = typed && /^-?\d+(\.\d+)?$/.test(value.trim()) ? Number(value) : value;
      if (!validate(candidate)) {
        problems.push(
          `header ${name}: ${JSON.stringify(value)} does not match its schema\n${describeAjvErrors(validate.errors)}`,
        );
      }
    }
  }

  // Body.
  const content = isObject(response.content) ? response.content : {};
  const mediaTypes = Object.keys(content);
  if (mediaTypes.length === 0) {
    if (!isEmptyBody(body)) problems.push('the response has a body, but the spec describes none');
  } else {
    const contentType = headers ? headerValue(headers, 'content-type') : undefined;
    let mediaType: string | undefined;
    if (contentType !== undefined) {
      mediaType = mediaTypes.find((range) => mediaTypeMatches(range, contentType));
      if (mediaType === undefined) {
        problems.push(`Content-Type "${contentType}" is not one of ${mediaTypes.join(', ')}`);
      }
    } else if (headers) {
      problems.push(`the Content-Type header is missing (expected ${mediaTypes.join(', ')})`);
    } else {
      mediaType = mediaTypes.find(isJsonMediaType);
    }
    if (mediaType !== undefined && isJsonMediaType(mediaType)) {
      const media = content[mediaType];
      const parsed = parseJsonBody(body);
      if ('problem' in parsed) {
        problems.push(parsed.problem);
      } else if (isObject(media) && media.schema !== undefined) {
        const schemaPointer = `${pointer}${pointerOf(['content', mediaType, 'schema'])}`;
        const validate = validatorAt(schemaPointer);
        if (!validate(parsed.value)) {
          problems.push(
            `the body does not match ${schemaPointer}:\n${describeAjvErrors(validate.errors)}\nbody: ${JSON.stringify(parsed.value, null, 2).slice(0, 2000)}`,
          );
        }
      }
    }
  }

  if (problems.length > 0) {
    throw new Error(`${where} does not match api/openapi.yaml:\n${problems.join('\n')}`);
  }
}
