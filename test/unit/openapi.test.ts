/**
 * api/openapi.yaml: a valid OpenAPI 3.1 document, describing exactly the
 * routes the app registers, whose schemas match what the code builds (records,
 * envelopes, every error), and whose examples match its schemas. Also checks
 * that test/support/openapi.ts accepts what it should and rejects drift.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Request, Response } from 'express';
import { createApp, type AppDeps } from '../../api/app';
import { errorHandler } from '../../api/middleware/error-handler';
import { success } from '../../api/respond';
import type { DownloadService } from '../../api/services/download.service';
import { toMediaView } from '../../api/services/media-view';
import type { TokensService } from '../../api/services/tokens.service';
import type { UploadService } from '../../api/services/upload.service';
import { loadConfig } from '../../shared/config';
import { Errors, type AppError } from '../../shared/errors';
import { createLogger } from '../../shared/logger';
import type { MediaRecord } from '../../shared/repositories/media.repository';
import {
  deref,
  describeAjvErrors,
  expectMatchesSpec,
  loadSpec,
  nodeAt,
  pointerOf,
  SPEC_PATH,
  specOperations,
  validatorAt,
} from '../support/openapi';

const root = join(__dirname, '..', '..');
const spec = loadSpec();

type JsonObject = Record<string, unknown>;
const isObject = (v: unknown): v is JsonObject =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Every operation with its JSON pointer. */
function operations(): { method: string; path: string; op: JsonObject; pointer: string }[] {
  return specOperations().map(({ method, path }) => {
    const pointer = pointerOf(['paths', path, method.toLowerCase()]);
    return { method, path, op: nodeAt(pointer) as JsonObject, pointer };
  });
}

/** Every (dereferenced) response of every operation. */
function responses(): {
  where: string;
  status: string;
  path: string;
  response: JsonObject;
  pointer: string;
}[] {
  return operations().flatMap(({ method, path, op, pointer }) =>
    Object.entries(op.responses as JsonObject).map(([status, raw]) => {
      const resolved = deref(raw, `${pointer}${pointerOf(['responses', status])}`);
      return {
        where: `${method} ${path} ${status}`,
        status,
        path,
        response: resolved.node,
        pointer: resolved.pointer,
      };
    }),
  );
}

/** Pointers of every `schema` of a parameter, header or media type, and of every component schema. */
function schemaPointers(): string[] {
  const found = new Set<string>();
  const walk = (node: unknown, pointer: string) => {
    if (Array.isArray(node)) {
      node.forEach((item, i) => walk(item, `${pointer}/${i}`));
      return;
    }
    if (!isObject(node)) return;
    for (const [key, value] of Object.entries(node)) {
      const at = `${pointer}${pointerOf([key])}`;
      if (key === 'schema' && isObject(value)) found.add(at);
      else walk(value, at);
    }
  };
  walk(spec.paths, '/paths');
  walk(spec.components, '/components');
  for (const name of Object.keys(spec.components.schemas as JsonObject)) {
    found.add(pointerOf(['components', 'schemas', name]));
  }
  return [...found].sort();
}

/** The ErrorCode union of shared/errors.ts, read from its source. */
function errorCodesInSource(): string[] {
  const source = readFileSync(join(root, 'shared', 'errors.ts'), 'utf8');
  const union = /export type ErrorCode =([^;]+);/.exec(source)?.[1];
  if (!union) throw new Error('ErrorCode not found in shared/errors.ts');
  return [...union.matchAll(/'([A-Z_]+)'/g)].map((m) => m[1]!);
}

interface StackLayer {
  route?: { path: unknown; methods: Record<string, boolean | undefined> };
  handle?: unknown;
  rawPath?: unknown;
}

/** Every route of an Express router stack, as `METHOD /path` (OpenAPI path syntax). */
function routesOf(stack: StackLayer[], prefix = ''): string[] {
  const found: string[] = [];
  for (const layer of stack) {
    if (layer.route) {
      const { path, methods } = layer.route;
      if (typeof path !== 'string')
        throw new Error(`route with a non-string path: ${String(path)}`);
      for (const [method, on] of Object.entries(methods)) {
        if (!on) continue;
        if (method === '_all') throw new Error(`${path}: router.all() routes cannot be checked`);
        found.push(`${method.toUpperCase()} ${prefix}${path.replace(/:(\w+)/g, '{$1}')}`);
      }
      continue;
    }
    const inner = (layer.handle as { stack?: unknown } | undefined)?.stack;
    if (Array.isArray(inner)) {
      const mount = typeof layer.rawPath === 'string' && layer.rawPath !== '/' ? layer.rawPath : '';
      found.push(...routesOf(inner as StackLayer[], prefix + mount));
    }
  }
  return found;
}

function appRoutes(): string[] {
  const deps: AppDeps = {
    config: loadConfig({}),
    logger: createLogger({ level: 'silent' }),
    tokens: {} as TokensService,
    uploads: {} as UploadService,
    downloads: {} as DownloadService,
  };
  const app = createApp(deps);
  return routesOf(app.router.stack as unknown as StackLayer[]);
}

const sampleRecord = (): MediaRecord => ({
  id: 42,
  organizationId: 3,
  folderId: 7,
  key: 'acme/photos/holiday-ILm6DTZ4Wc-R.jpg',
  name: 'holiday.jpg',
  mimetype: 'image/jpeg',
  bytes: 251505,
  checksum: 'sha256:03d87850d2dd2c31b14aeb15125caefe33ce700feabd79c5c5c0b33ecf075e8f',
  jobId: null,
  createdAt: new Date('2025-11-22T06:52:11.408Z'),
  updatedAt: new Date('2025-11-22T06:52:11.408Z'),
});

const validEnvelope = () => ({
  statusCode: 200,
  message: 'Success',
  data: toMediaView(sampleRecord(), 'http://localhost:3000'),
});

const jsonHeaders = {
  'content-type': 'application/json; charset=utf-8',
  'x-request-id': '5b2f0c8e-9d4f-4a51-a1e3-2c7d9b0f6a14',
};

/** What the error handler answers for an AppError: status, headers and body. */
function errorResponse(error: AppError): {
  status: number;
  headers: Record<string, string>;
  body: unknown;
} {
  const captured = { status: 0, headers: {} as Record<string, string>, body: undefined as unknown };
  const res = {
    headersSent: false,
    setHeader(name: string, value: string) {
      captured.headers[name.toLowerCase()] = value;
      return res;
    },
    status(code: number) {
      captured.status = code;
      return res;
    },
    json(body: unknown) {
      captured.body = body;
      return res;
    },
  };
  const req = { id: 'req-1' };
  errorHandler(error, req as unknown as Request, res as unknown as Response, () => undefined);
  return captured;
}

/** One sample of every error factory (typed: a new factory must be added here). */
const sampleErrors: Record<keyof typeof Errors, () => AppError> = {
  badRequest: () => Errors.badRequest('The request must be multipart/form-data'),
  validation: () => Errors.validation([{ field: 'folderId', message: 'must be an integer' }]),
  invalidDataUrl: () => Errors.invalidDataUrl('the data URL is not valid base64'),
  folderMismatch: () => Errors.folderMismatch('Photos', 8),
  unauthorized: () => Errors.unauthorized(),
  notFound: () => Errors.notFound(),
  mediaNotFound: () => Errors.mediaNotFound('acme/photos/holiday-ILm6DTZ4Wc-R.jpg'),
  folderNotFound: () => Errors.folderNotFound(99),
  jobNotFound: () => Errors.jobNotFound('17'),
  conflict: () => Errors.conflict('already exists'),
  rangeNotSatisfiable: () => Errors.rangeNotSatisfiable(251505),
  fileTooLarge: () => Errors.fileTooLarge(104857600, 'holiday.jpg'),
  tooManyFiles: () => Errors.tooManyFiles(20),
  tooManyParts: () => Errors.tooManyParts('The form has too many parts'),
  payloadTooLarge: () => Errors.payloadTooLarge('The request body is too large'),
  unsupportedType: () =>
    Errors.unsupportedType('not accepted', [{ name: 'logo.svg', message: 'unknown type' }]),
  unreadable: () => Errors.unreadable('corrupt image', [{ index: 0, message: 'truncated' }]),
  encryptedPdf: () => Errors.encryptedPdf('encrypted', [{ index: 1, message: 'encrypted' }]),
  rateLimited: () => Errors.rateLimited(3),
  unavailable: () => Errors.unavailable('storage'),
  jobTimeout: () => Errors.jobTimeout('17', 'http://localhost:3000/jobs/17'),
  internal: () => Errors.internal(new Error('boom')),
};

describe('api/openapi.yaml', () => {
  it('is a valid OpenAPI 3.1 document (@seriousme/openapi-schema-validator)', () => {
    expect(spec.openapi).toMatch(/^3\.1\.\d+$/);
    // The validator is ESM-only; jest runs CommonJS, so it runs in a child process.
    const script = `
      import { createRequire } from 'node:module';
      import { pathToFileURL } from 'node:url';
      const [root, file] = process.argv.slice(1);
      let entry;
      try {
        entry = createRequire(root + '/package.json').resolve('@seriousme/openapi-schema-validator');
      } catch {
        console.log(JSON.stringify({ missing: true }));
        process.exit(0);
      }
      const { Validator } = await import(pathToFileURL(entry).href);
      const validator = new Validator();
      const result = await validator.validate(file);
      console.log(JSON.stringify({ ...result, version: validator.version }));
    `;
    const output = execFileSync(
      process.execPath,
      ['--input-type=module', '-e', script, root, SPEC_PATH],
      { encoding: 'utf8', timeout: 30_000 },
    );
    const result = JSON.parse(output) as {
      missing?: boolean;
      valid?: boolean;
      errors?: unknown;
      version?: string;
    };
    if (result.missing) {
      throw new Error(
        'devDependency @seriousme/openapi-schema-validator is not installed (npm install -D @seriousme/openapi-schema-validator)',
      );
    }
    if (!result.valid) {
      throw new Error(`api/openapi.yaml is not valid:\n${JSON.stringify(result.errors, null, 2)}`);
    }
    expect(result.version).toBe('3.1');
  });

  it('resolves every $ref', () => {
    const broken: string[] = [];
    const walk = (node: unknown, pointer: string) => {
      if (Array.isArray(node)) return node.forEach((n, i) => walk(n, `${pointer}/${i}`));
      if (!isObject(node)) return;
      if (typeof node.$ref === 'string') {
        if (!node.$ref.startsWith('#/') || nodeAt(node.$ref.slice(1)) === undefined) {
          broken.push(`${pointer}: ${node.$ref}`);
        }
      }
      for (const [k, v] of Object.entries(node)) walk(v, `${pointer}${pointerOf([k])}`);
    };
    walk(spec, '');
    expect(broken).toEqual([]);
  });

  it('has schemas that compile under JSON Schema 2020-12 in strict mode', () => {
    const failures: string[] = [];
    for (const pointer of schemaPointers()) {
      try {
        validatorAt(pointer);
      } catch (err) {
        failures.push(`${pointer}: ${(err as Error).message}`);
      }
    }
    expect(failures).toEqual([]);
  });

  it('has examples that match their schemas', () => {
    const failures: string[] = [];
    let checked = 0;
    const check = (value: unknown, schemaPointer: string, where: string) => {
      const validate = validatorAt(schemaPointer);
      checked++;
      if (!validate(value)) failures.push(`${where}:\n${describeAjvErrors(validate.errors)}`);
    };
    // Parameters, headers and media types: `example`, or `examples` of Example Objects.
    for (const pointer of schemaPointers()) {
      if (pointer.startsWith('/components/schemas/')) continue;
      const holderPointer = pointer.slice(0, -'/schema'.length);
      const holder = nodeAt(holderPointer) as JsonObject;
      const schema = deref(holder.schema, pointer);
      if ('example' in holder) check(holder.example, schema.pointer, `${holderPointer}/example`);
      if (isObject(holder.examples)) {
        for (const [name, raw] of Object.entries(holder.examples)) {
          const example = deref(raw, `${holderPointer}${pointerOf(['examples', name])}`);
          check(example.node.value, schema.pointer, example.pointer);
        }
      }
    }
    expect(failures).toEqual([]);
    expect(checked).toBeGreaterThan(30);
  });

  it('describes every operation completely', () => {
    const problems: string[] = [];
    const ids = new Set<string>();
    for (const { method, path, op } of operations()) {
      const where = `${method} ${path}`;
      if (typeof op.operationId !== 'string' || ids.has(op.operationId)) {
        problems.push(`${where}: missing or duplicate operationId`);
      }
      ids.add(String(op.operationId));
      if (typeof op.summary !== 'string' || typeof op.description !== 'string') {
        problems.push(`${where}: summary and description are required`);
      }
      const statuses = Object.keys(op.responses as JsonObject);
      if (!statuses.some((s) => /^2\d\d$/.test(s))) problems.push(`${where}: no 2xx response`);
      if (path.startsWith('/media/')) {
        if (JSON.stringify(op.security) !== JSON.stringify([{ bearerAuth: [] }])) {
          problems.push(`${where}: must require bearerAuth`);
        }
        for (const status of ['400', '401', '500', '503']) {
          if (!statuses.includes(status)) problems.push(`${where}: no ${status} response`);
        }
      } else if (JSON.stringify(op.security) !== '[]') {
        problems.push(`${where}: an unauthenticated operation must say security: []`);
      }
    }
    for (const { where, status, response, pointer } of responses()) {
      if (typeof response.description !== 'string') problems.push(`${where}: no description`);
      const headers = isObject(response.headers) ? response.headers : {};
      if (!('X-Request-Id' in headers)) problems.push(`${where}: no X-Request-Id header`);
      if (status === '401') {
        const header = headers['WWW-Authenticate'];
        const resolved = header === undefined ? undefined : deref(header, pointer).node;
        if (resolved?.required !== true) {
          problems.push(`${where}: 401 must carry a required WWW-Authenticate header`);
        }
      }
      if (Number(status) >= 400 && isObject(response.content)) {
        for (const [mediaType, media] of Object.entries(response.content)) {
          const examples = isObject(media) && isObject(media.examples) ? media.examples : {};
          if (Object.keys(examples).length === 0) {
            problems.push(`${where} ${mediaType}: an error response needs an example`);
          }
        }
      }
    }
    expect(problems).toEqual([]);
  });

  it('requires a bearer token on /media/* (http bearer)', () => {
    const schemes = (spec.components.securitySchemes ?? {}) as JsonObject;
    expect(schemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer' });
  });

  it('lists every error code of shared/errors.ts, and only those', () => {
    const enumCodes = (nodeAt('/components/schemas/ErrorCode') as { enum: string[] }).enum;
    expect([...enumCodes].sort()).toEqual(errorCodesInSource().sort());
  });

  it('describes exactly the routes the app registers', () => {
    const registered = appRoutes();
    const described = specOperations().map((o) => `${o.method} ${o.path}`);
    // Express answers HEAD with a GET route, so a described HEAD needs a registered GET.
    const served = new Set(registered);
    for (const route of registered) {
      if (route.startsWith('GET ')) served.add(`HEAD ${route.slice(4)}`);
    }
    expect(registered).toEqual(
      expect.arrayContaining([
        'GET /healthz',
        'POST /media/upload',
        'POST /media/upload/multiple',
        'POST /media/upload/base64',
        'GET /media/download',
      ]),
    );
    expect(registered.filter((r) => !described.includes(r))).toEqual([]);
    expect(described.filter((d) => !served.has(d))).toEqual([]);
  });

  it('MediaRecord is what toMediaView builds (every field, nothing more)', () => {
    const validate = validatorAt('/components/schemas/MediaRecord');
    const withFolder = toMediaView(sampleRecord(), 'https://media.example.com');
    const noFolder = toMediaView({ ...sampleRecord(), folderId: null, bytes: 70 }, 'http://x:3000');
    for (const view of [withFolder, noFolder]) {
      expect({ valid: validate(view), errors: validate.errors ?? null }).toEqual({
        valid: true,
        errors: null,
      });
    }
    const required = (nodeAt('/components/schemas/MediaRecord') as { required: string[] }).required;
    expect([...required].sort()).toEqual(Object.keys(withFolder).sort());
  });

  it('the Error schema matches what the error handler sends for every error factory', () => {
    const failures: string[] = [];
    const validate = validatorAt('/components/schemas/Error');
    for (const [name, make] of Object.entries(sampleErrors)) {
      const { status, body } = errorResponse(make());
      if (!validate(body))
        failures.push(`${name} (${status}):\n${describeAjvErrors(validate.errors)}`);
    }
    expect(failures).toEqual([]);
  });

  it('each operation describes the errors the code raises for it', () => {
    const downloadHeaders = {
      etag: '"03d87850d2dd2c31b14aeb15125caefe33ce700feabd79c5c5c0b33ecf075e8f"',
      'last-modified': 'Sat, 22 Nov 2025 06:52:11 GMT',
      'accept-ranges': 'bytes',
    };
    const raised: [string, string, AppError, Record<string, string>?][] = [
      ['POST', '/media/upload', Errors.fileTooLarge(104857600, 'holiday.jpg')],
      ['POST', '/media/upload', Errors.tooManyFiles(1)],
      ['POST', '/media/upload', Errors.folderNotFound(99)],
      ['POST', '/media/upload', Errors.folderMismatch('Photos', 8)],
      ['POST', '/media/upload/multiple', Errors.tooManyParts('The form has too many parts')],
      ['POST', '/media/upload/multiple', Errors.unsupportedType('not accepted')],
      ['POST', '/media/upload/base64', Errors.invalidDataUrl('the data URL is not valid base64')],
      ['POST', '/media/upload/base64', Errors.payloadTooLarge('The request body is too large')],
      ['POST', '/media/upload/base64', Errors.unavailable('MongoDB')],
      ['GET', '/media/download', Errors.rangeNotSatisfiable(251505), downloadHeaders],
      ['GET', '/media/download', Errors.mediaNotFound('acme/x-ILm6DTZ4Wc-R.jpg')],
      ['GET', '/media/download', Errors.unauthorized()],
      ['GET', '/media/download', Errors.internal(new Error('boom'))],
    ];
    for (const [method, path, error, routeHeaders] of raised) {
      const { status, headers, body } = errorResponse(error);
      expect(() =>
        expectMatchesSpec(method, path, status, body, {
          ...jsonHeaders,
          ...routeHeaders,
          ...headers,
        }),
      ).not.toThrow();
    }
  });
});

describe('expectMatchesSpec', () => {
  it('accepts a valid record envelope, with or without headers', () => {
    expect(() => expectMatchesSpec('POST', '/media/upload', 201, validEnvelope())).not.toThrow();
    expect(() =>
      expectMatchesSpec('post', '/media/upload', 201, validEnvelope(), new Headers(jsonHeaders)),
    ).not.toThrow();
    expect(() =>
      expectMatchesSpec('POST', '/media/upload/multiple', 201, {
        ...validEnvelope(),
        data: [validEnvelope().data, validEnvelope().data],
      }),
    ).not.toThrow();
  });

  it('accepts what success() sends', () => {
    let body: unknown;
    let status = 0;
    const res = {
      status(code: number) {
        status = code;
        return res;
      },
      json(b: unknown) {
        body = b;
        return res;
      },
    };
    success(res as unknown as Response, validEnvelope().data, 201);
    expect(() => expectMatchesSpec('POST', '/media/upload/base64', status, body)).not.toThrow();
  });

  it('rejects an extra field in the record', () => {
    const body = validEnvelope();
    (body.data as unknown as JsonObject).jobId = null;
    expect(() => expectMatchesSpec('POST', '/media/upload', 201, body)).toThrow(
      /\/data: must NOT have additional properties "jobId"/,
    );
  });

  it('rejects an extra field in the envelope', () => {
    const body = { ...validEnvelope(), ok: true };
    expect(() => expectMatchesSpec('POST', '/media/upload', 201, body)).toThrow(/"ok"/);
  });

  it('rejects a field of the wrong type, naming it', () => {
    const body = validEnvelope();
    (body.data as unknown as JsonObject).id = '42';
    (body.data as unknown as JsonObject).size = 245.613;
    const run = () => expectMatchesSpec('POST', '/media/upload', 201, body);
    expect(run).toThrow(/\/data\/id: must be integer/);
    expect(run).toThrow(/\/data\/size: must be multiple of 0.01/);
  });

  it('rejects an error envelope with a code the response does not list', () => {
    const body = {
      statusCode: 404,
      message: 'No media with key "x"',
      error: 'FOLDER_NOT_FOUND',
      requestId: 'r1',
    };
    expect(() => expectMatchesSpec('GET', '/media/download', 404, body)).toThrow(/\/error/);
  });

  it('fails loudly for a status or an operation the spec does not describe', () => {
    expect(() => expectMatchesSpec('POST', '/media/upload', 418, {})).toThrow(
      /describes no 418 response .*described: 201, 400/,
    );
    expect(() => expectMatchesSpec('DELETE', '/media/upload', 200, {})).toThrow(
      /DELETE \/media\/upload is not described/,
    );
  });

  it('checks the headers the spec marks required', () => {
    const { status, headers, body } = errorResponse(Errors.unauthorized());
    expect(() =>
      expectMatchesSpec('POST', '/media/upload', status, body, { ...jsonHeaders, ...headers }),
    ).not.toThrow();
    expect(() => expectMatchesSpec('POST', '/media/upload', status, body, jsonHeaders)).toThrow(
      /required header WWW-Authenticate is missing/,
    );
  });

  it('checks binary downloads by their headers, and bodiless responses', () => {
    const headers = {
      'content-type': 'image/jpeg',
      'content-length': '1024',
      'content-range': 'bytes 0-1023/251505',
      etag: '"03d87850d2dd2c31b14aeb15125caefe33ce700feabd79c5c5c0b33ecf075e8f"',
      'last-modified': 'Sat, 22 Nov 2025 06:52:11 GMT',
      'cache-control': 'private, no-cache',
      'accept-ranges': 'bytes',
      'content-disposition': 'attachment; filename=holiday.jpg',
      'x-content-type-options': 'nosniff',
      'x-request-id': 'r1',
    };
    const bytes = Buffer.alloc(1024);
    expect(() => expectMatchesSpec('GET', '/media/download', 206, bytes, headers)).not.toThrow();
    const { 'content-range': _range, ...withoutRange } = headers;
    expect(() => expectMatchesSpec('GET', '/media/download', 206, bytes, withoutRange)).toThrow(
      /required header Content-Range is missing/,
    );
    expect(() =>
      expectMatchesSpec('GET', '/media/download', 200, bytes, {
        ...headers,
        'content-type': 'text/html',
      }),
    ).toThrow(/Content-Type "text\/html" is not one of image\/\*, application\/pdf/);
    expect(() => expectMatchesSpec('HEAD', '/media/download', 200, '', headers)).not.toThrow();
    expect(() => expectMatchesSpec('GET', '/media/download', 304, 'x', headers)).toThrow(
      /the spec describes none/,
    );
    expect(() =>
      expectMatchesSpec('GET', '/media/download', 200, bytes, { ...headers, etag: 'W/"abc"' }),
    ).toThrow(/header ETag/);
  });
});
