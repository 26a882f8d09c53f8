/**
 * api/openapi.yaml: a valid OpenAPI 3.1 document, describing exactly the
 * routes the app registers, whose schemas match what the code builds (records,
 * envelopes, every error), and whose examples match its schemas. Also checks
 * that test/support/openapi.ts accepts what it should and rejects drift, and
 * that the job endpoints (metadata, convert, merge-pdfs, jobs/{id}) answer as
 * described: their examples, the image adapter's metadata, and the real routes
 * and JobsService run in-process against a stand-in queue.
 */
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Request, Response } from 'express';
import { createApp, type AppDeps } from '../../api/app';
import { errorHandler } from '../../api/middleware/error-handler';
import { success } from '../../api/respond';
import type { DownloadService } from '../../api/services/download.service';
import { JobsService } from '../../api/services/jobs.service';
import type { FoldersService } from '../../api/services/folders.service';
import type { IngestService } from '../../api/services/ingest.service';
import { MediaJobsService } from '../../api/services/media-jobs.service';
import { SCOPES } from '../../api/services/tokens.service';
import type { MediaService } from '../../api/services/media.service';
import { toMediaView } from '../../api/services/media-view';
import type { TokensService } from '../../api/services/tokens.service';
import type { UploadService } from '../../api/services/upload.service';
import { loadConfig } from '../../shared/config';
import { Errors, type AppError } from '../../shared/errors';
import { decodeJobError, encodeJobError, newJobId, type JobName } from '../../shared/jobs';
import { createLogger } from '../../shared/logger';
import { createApiMetrics } from '../../shared/metrics';
import { CONVERT_FORMAT_NAMES } from '../../shared/media/formats';
import { ImageAdapter } from '../../worker/image/image.adapter';
import type { JobOutcome, JobQueue, JobSnapshot } from '../../shared/queue/job-queue';
import type { MediaRecord, MediaRepository } from '../../shared/repositories/media.repository';
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
    jobs: {} as JobsService,
    mediaJobs: {} as MediaJobsService,
    mediaService: {} as MediaService,
    folders: {} as FoldersService,
    metrics: createApiMetrics(),
    readiness: {},
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
  metaData: { ipAddress: '::ffff:127.0.0.1', userAgent: 'curl/8.5.0' },
  createdBy: 'f00dfeedf00dfeed',
  deletingAt: null,
  jobId: null,
  createdAt: new Date('2025-11-22T06:52:11.408Z'),
  updatedAt: new Date('2025-11-22T06:52:11.408Z'),
});

const views = { publicBaseUrl: 'http://localhost:3000', bucket: 'media' };

/** An upload's answer (no folderId, as the interface shows it). */
const validEnvelope = () => ({
  statusCode: 200,
  message: 'Success',
  data: toMediaView(sampleRecord(), views, { folderId: false }),
});

const IMAGE_JOB = 'image-0b6f7c1e-2d9a-4c35-8e41-5f3a9b7d2c10';
const PDF_JOB = 'pdf-5c1d8e2f-7a3b-4f90-b6c4-1e2d3f4a5b6c';
const statusUrl = (jobId: string) => `http://localhost:3000/media/jobs/${jobId}`;

/** An error as a failed job reports it: through the queue's encoding, with its job id. */
const fromJob = (error: AppError, jobId = error.status === 413 ? PDF_JOB : IMAGE_JOB) =>
  decodeJobError(encodeJobError(error))!.withExtra({ jobId });

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
  insufficientScope: () => Errors.insufficientScope('write'),
  mediaIdNotFound: () => Errors.mediaIdNotFound(42),
  folderNameNotFound: () => Errors.folderNameNotFound('Photos'),
  folderNotEmpty: () => Errors.folderNotEmpty(7, 3),
  idempotencyKeyInUse: () => Errors.idempotencyKeyInUse(),
  idempotencyKeyReused: () => Errors.idempotencyKeyReused(),
  quotaExceeded: () => Errors.quotaExceeded(10 * 1024 * 1024 * 1024),
  methodNotAllowed: () => Errors.methodNotAllowed('GET'),
  mediaNotFound: () => Errors.mediaNotFound('acme/photos/holiday-ILm6DTZ4Wc-R.jpg'),
  folderNotFound: () => Errors.folderNotFound(99),
  jobNotFound: () => Errors.jobNotFound('17'),
  conflict: () => Errors.conflict('already exists'),
  rangeNotSatisfiable: () => Errors.rangeNotSatisfiable(251505),
  fileTooLarge: () => Errors.fileTooLarge(104857600, 'holiday.jpg'),
  tooManyFiles: () => Errors.tooManyFiles(20),
  tooManyParts: () => Errors.tooManyParts('The form has too many parts'),
  payloadTooLarge: () => Errors.payloadTooLarge('The request body is too large'),
  headersTooLarge: () => Errors.headersTooLarge(16384),
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
      if (path === '/media' || path.startsWith('/media/')) {
        // The scope an operation needs follows its method: reads, deletes, the rest writes.
        const scope =
          method === 'GET' || method === 'HEAD' ? 'read' : method === 'DELETE' ? 'delete' : 'write';
        if (JSON.stringify(op.security) !== JSON.stringify([{ bearerAuth: [scope] }])) {
          problems.push(`${where}: must require bearerAuth with the "${scope}" scope`);
        }
        // A 400 is possible only where the client sends something besides its request id.
        const params = ((op.parameters ?? []) as JsonObject[]).filter(
          (p) => p.$ref !== '#/components/parameters/RequestId',
        );
        const takesInput = params.length > 0 || op.requestBody !== undefined;
        for (const status of [...(takesInput ? ['400'] : []), '401', '403', '500', '503']) {
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
        'GET /readyz',
        'GET /metrics',
        'POST /media/upload',
        'POST /media/upload/multiple',
        'POST /media/upload/base64',
        'GET /media/download',
        'GET /media/metadata',
        'POST /media/convert',
        'POST /media/merge-pdfs',
        'GET /media/jobs/{id}',
      ]),
    );
    expect(registered.filter((r) => !described.includes(r))).toEqual([]);
    expect(described.filter((d) => !served.has(d))).toEqual([]);
  });

  it('MediaRecord and UploadedMediaRecord are what toMediaView builds (every field, nothing more)', () => {
    const settings = { publicBaseUrl: 'https://media.example.com', bucket: 'media' };
    const withFolder = toMediaView(sampleRecord(), settings, { folderId: true });
    const noFolder = toMediaView({ ...sampleRecord(), folderId: null, bytes: 70 }, settings, {
      folderId: true,
    });
    const uploaded = toMediaView(sampleRecord(), settings, { folderId: false });
    const validate = validatorAt('/components/schemas/MediaRecord');
    const validateUploaded = validatorAt('/components/schemas/UploadedMediaRecord');
    for (const view of [withFolder, noFolder]) {
      expect({ valid: validate(view), errors: validate.errors ?? null }).toEqual({
        valid: true,
        errors: null,
      });
      // folderId is not part of an upload's answer.
      expect(validateUploaded(view)).toBe(false);
    }
    expect(validateUploaded(uploaded)).toBe(true);
    expect(validate(uploaded)).toBe(false);
    const required = (nodeAt('/components/schemas/MediaRecordFields') as { required: string[] })
      .required;
    expect([...required, 'folderId'].sort()).toEqual(Object.keys(withFolder).sort());
    expect([...required].sort()).toEqual(Object.keys(uploaded).sort());
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
      ['GET', '/media/metadata', Errors.validation([{ field: 'mediaKey', message: 'required' }])],
      ['GET', '/media/metadata', Errors.mediaNotFound('acme/x-ILm6DTZ4Wc-R.jpg')],
      ['GET', '/media/metadata', Errors.unsupportedType('"k" is application/pdf, not an image')],
      ['GET', '/media/metadata', Errors.payloadTooLarge('The request body is too large')],
      ['GET', '/media/metadata', Errors.unavailable('Redis')],
      ['GET', '/media/metadata', fromJob(Errors.unreadable('damaged header'))],
      ['GET', '/media/metadata', Errors.jobTimeout(IMAGE_JOB, statusUrl(IMAGE_JOB))],
      ['POST', '/media/convert', Errors.tooManyParts('At most 20 fields are accepted per request')],
      ['POST', '/media/convert', fromJob(Errors.folderNotFound(7))],
      ['POST', '/media/convert', fromJob(Errors.notFound('No organization with id 3'))],
      [
        'POST',
        '/media/convert',
        fromJob(
          Errors.unreadable('too many pixels', [
            { message: 'too many pixels', width: 20000, height: 20000, limit: 100000000 },
          ]),
        ),
      ],
      ['POST', '/media/convert', fromJob(Errors.unavailable('storage'))],
      ['POST', '/media/convert', fromJob(Errors.internal(new Error('boom')))],
      ['POST', '/media/convert', Errors.jobTimeout(IMAGE_JOB, statusUrl(IMAGE_JOB))],
      ['POST', '/media/merge-pdfs', Errors.badRequest('The request must be multipart/form-data')],
      ['POST', '/media/merge-pdfs', Errors.tooManyFiles(50, 'merge inputs')],
      ['POST', '/media/merge-pdfs', Errors.fileTooLarge(104857600, 'a.pdf').forInput(0, 'a.pdf')],
      ['POST', '/media/merge-pdfs', Errors.mediaNotFound('acme/k.pdf').forInput(1, 'acme/k.pdf')],
      ['POST', '/media/merge-pdfs', Errors.unsupportedType('not a PDF').forInput(0, 'a.jpg')],
      ['POST', '/media/merge-pdfs', Errors.folderMismatch('Contracts', 8)],
      ['POST', '/media/merge-pdfs', fromJob(Errors.payloadTooLarge('over 10,000 pages'))],
      [
        'POST',
        '/media/merge-pdfs',
        fromJob(Errors.encryptedPdf('encrypted', [{ index: 1, name: 's.pdf', message: 'x' }])),
      ],
      ['POST', '/media/merge-pdfs', Errors.jobTimeout(PDF_JOB, statusUrl(PDF_JOB))],
      ['GET', '/media/jobs/{id}', Errors.jobNotFound('nonsense')],
      ['GET', '/media/jobs/{id}', Errors.unavailable('Redis')],
      ['GET', '/media/jobs/{id}', Errors.internal(new Error('record gone'))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.badRequest('unknown job "image.x"'))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.mediaNotFound('acme/k.jpg'))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.fileTooLarge(104857600, 'acme/k.jpg'))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.unsupportedType('not a PDF'))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.unreadable('damaged', [{ message: 'x' }]))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.unavailable('MongoDB'))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.internal(new Error('boom')))],
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
        data: { media: [validEnvelope().data, validEnvelope().data] },
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
    success(
      res as unknown as Response,
      toMediaView(sampleRecord(), views, { folderId: true }),
      201,
    );
    expect(() => expectMatchesSpec('POST', '/media/upload/base64', status, body)).not.toThrow();
  });

  it('rejects an extra field in the record', () => {
    const body = validEnvelope();
    (body.data as unknown as JsonObject).jobId = null;
    expect(() => expectMatchesSpec('POST', '/media/upload', 201, body)).toThrow(
      /\/data: must NOT have unevaluated properties "jobId"/,
    );
  });

  it('rejects an extra field in the envelope', () => {
    const body = { ...validEnvelope(), ok: true };
    expect(() => expectMatchesSpec('POST', '/media/upload', 201, body)).toThrow(/"ok"/);
  });

  it('rejects a field of the wrong type, naming it', () => {
    const body = validEnvelope();
    (body.data as unknown as JsonObject).id = '42';
    (body.data as unknown as JsonObject).size = '245.61';
    const run = () => expectMatchesSpec('POST', '/media/upload', 201, body);
    expect(run).toThrow(/\/data\/id: must be integer/);
    expect(run).toThrow(/\/data\/size: must be number/);
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

const JOB_OPERATIONS = [
  ['GET', '/media/metadata'],
  ['POST', '/media/convert'],
  ['POST', '/media/merge-pdfs'],
  ['GET', '/media/jobs/{id}'],
] as const;

describe('the job endpoints in api/openapi.yaml', () => {
  it.each(JOB_OPERATIONS)(
    '%s %s: every response has examples, and each passes expectMatchesSpec',
    (method, path) => {
      const pointer = pointerOf(['paths', path, method.toLowerCase()]);
      const op = nodeAt(pointer) as JsonObject;
      const failures: string[] = [];
      let checked = 0;
      for (const [status, raw] of Object.entries(op.responses as JsonObject)) {
        const { node: response } = deref(raw, `${pointer}${pointerOf(['responses', status])}`);
        const media = (response.content as JsonObject)['application/json'] as JsonObject;
        const examples = isObject(media.examples) ? media.examples : {};
        if (Object.keys(examples).length === 0) failures.push(`${status}: no example`);
        for (const [name, ref] of Object.entries(examples)) {
          const { node: example } = deref(ref, `${pointer}/responses/${status}/examples/${name}`);
          const value = example.value as JsonObject;
          // The headers the code sends with it (Location on 202 and 504, Retry-After with `dependency`).
          const headers: Record<string, string> = { ...jsonHeaders };
          const data = value.data as JsonObject | undefined;
          if (status === '202') headers.location = String(data?.statusUrl);
          if (status === '504') headers.location = statusUrl(String(value.jobId));
          if (status === '401') headers['www-authenticate'] = 'Bearer realm="media"';
          if (value.dependency !== undefined) headers['retry-after'] = '5';
          if (status === '429') {
            Object.assign(headers, {
              'retry-after': '42',
              'ratelimit-policy': '600;w=60',
              'ratelimit-limit': '600',
              'ratelimit-remaining': '0',
              'ratelimit-reset': '42',
            });
          }
          try {
            expectMatchesSpec(
              method,
              path.replace('{id}', IMAGE_JOB),
              Number(status),
              value,
              headers,
            );
            checked++;
          } catch (err) {
            failures.push(`${status} ${name}: ${(err as Error).message}`);
          }
        }
      }
      expect(failures).toEqual([]);
      expect(checked).toBeGreaterThanOrEqual(Object.keys(op.responses as JsonObject).length);
    },
  );

  it('accept Prefer: respond-async on the three job-making operations, answering 202 and 504', () => {
    for (const [method, path] of JOB_OPERATIONS.slice(0, 3)) {
      const op = nodeAt(pointerOf(['paths', path, method.toLowerCase()])) as JsonObject;
      const params = (op.parameters as JsonObject[]).map((p) => p.$ref);
      expect(params).toContain('#/components/parameters/Prefer');
      expect(Object.keys(op.responses as JsonObject)).toEqual(
        expect.arrayContaining(['202', '504']),
      );
    }
  });

  it('ImageMetadata matches what the image adapter reads', async () => {
    const validate = validatorAt('/components/schemas/ImageMetadata');
    const adapter = new ImageAdapter({ maxInputPixels: 100_000_000 });
    const fixtures = join(root, 'test', 'fixtures');
    const images = readdirSync(fixtures).filter((f) =>
      /\.(jpe?g|png|webp|gif|tiff?|heic|heif)$/i.test(f),
    );
    expect(images.length).toBeGreaterThan(2);
    const failures: string[] = [];
    for (const file of images) {
      // As the worker sends it: through JSON (Buffers become { type, data }).
      const metadata = JSON.parse(
        JSON.stringify(await adapter.readMetadata(readFileSync(join(fixtures, file)))),
      ) as unknown;
      if (!validate(metadata)) failures.push(`${file}:\n${describeAjvErrors(validate.errors)}`);
    }
    expect(failures).toEqual([]);
  });

  it('ConvertRequest.format accepts the formats in any case, and nothing else', () => {
    const validate = validatorAt('/components/schemas/ConvertRequest');
    const accepts = (format: string) => validate({ mediaKey: 'k', format });
    for (const format of CONVERT_FORMAT_NAMES) {
      expect([format, accepts(format), accepts(format.toUpperCase())]).toEqual([
        format,
        true,
        true,
      ]);
    }
    for (const format of ['svg', 'heic', ' png', 'jpegg', '']) {
      expect([format, accepts(format)]).toEqual([format, false]);
    }
  });
});

/**
 * The real routes and JobsService, with in-memory stand-ins for the queue, the
 * records and the token check: what the code answers matches the document.
 */
describe('the job endpoints answer as api/openapi.yaml says (in-process, stand-in queue)', () => {
  const org = { id: 3, slug: 'acme', name: 'Acme', quotaBytes: null };
  const publicBaseUrl = 'http://localhost:3000';
  const at = new Date('2025-11-22T06:52:11.408Z');
  const record = (id: number, key: string, mimetype: string, name: string): MediaRecord => ({
    id,
    organizationId: org.id,
    folderId: null,
    key,
    name,
    mimetype,
    bytes: 2048,
    checksum: `sha256:${'0'.repeat(64)}`,
    metaData: { ipAddress: '::ffff:127.0.0.1', userAgent: '' },
    createdBy: null,
    deletingAt: null,
    jobId: null,
    createdAt: at,
    updatedAt: at,
  });
  const records = [
    record(1, 'acme/photo-ILm6DTZ4Wc-R.jpg', 'image/jpeg', 'photo.jpg'),
    record(2, 'acme/doc-FxV27-xy8auL.pdf', 'application/pdf', 'doc.pdf'),
    record(3, 'acme/photo-Q2x9LwPz0aB7.webp', 'image/webp', 'photo.jpg'),
    record(
      4,
      'merged_1763795531408.pdf',
      'application/pdf',
      'http://127.0.0.1:9000/media/merged_1763795531408.pdf',
    ),
  ];
  const metadata = {
    format: 'jpeg',
    size: 2048,
    width: 100,
    height: 68,
    space: 'srgb',
    channels: 3,
    depth: 'uchar',
    isProgressive: false,
    hasProfile: false,
    hasAlpha: false,
    exif: { type: 'Buffer', data: [69, 120, 105, 102, 0, 0] },
  };

  /** What the stand-in queue does with the next job, and the jobs it knows. */
  let outcome: JobOutcome<JobName>;
  let addFails: AppError | undefined;
  const jobs = new Map<string, JobSnapshot>();
  const queue: JobQueue = {
    add(name, payload, uuid) {
      if (addFails) return Promise.reject(addFails);
      const id = newJobId(name, uuid);
      jobs.set(id, { id, name, data: payload, state: 'waiting', attemptsMade: 0 });
      return Promise.resolve(id);
    },
    wait: () => Promise.resolve(outcome as never),
    get: (jobId) => Promise.resolve(jobs.get(jobId) ?? null),
    counts: () => Promise.reject(new Error('not used')),
    ping: () => Promise.resolve(),
    close: () => Promise.resolve(),
  };
  const media = {
    findByKey: (orgId: number, key: string) =>
      Promise.resolve(records.find((r) => r.organizationId === orgId && r.key === key) ?? null),
    findByKeys: (orgId: number, keys: string[]) =>
      Promise.resolve(
        new Map(
          records
            .filter((r) => r.organizationId === orgId && keys.includes(r.key))
            .map((r) => [r.key, r]),
        ),
      ),
    findById: (orgId: number, id: number) =>
      Promise.resolve(records.find((r) => r.organizationId === orgId && r.id === id) ?? null),
  } as unknown as MediaRepository;
  const jobsService = new JobsService({ queue, media, publicBaseUrl, bucket: 'media', waitMs: 50 });
  const mediaJobs = new MediaJobsService({
    jobs: jobsService,
    media,
    ingest: { discard: () => Promise.resolve() } as unknown as IngestService,
    folders: { resolve: () => Promise.resolve(null) } as unknown as FoldersService,
    limits: { maxFileSize: 1024 * 1024, maxMergeInputs: 50 },
  });
  const tokens = {
    verify: (token: string) =>
      Promise.resolve(
        token === 'mine'
          ? { organization: org, tokenId: 't1', scopes: new Set(SCOPES) }
          : token === 'theirs'
            ? {
                organization: { id: 4, slug: 'other', name: 'Other', quotaBytes: null },
                tokenId: 't2',
                scopes: new Set(SCOPES),
              }
            : null,
      ),
  } as unknown as TokensService;

  let server: Server;
  let base: string;
  beforeAll(async () => {
    const app = createApp({
      config: loadConfig({}),
      logger: createLogger({ level: 'silent' }),
      tokens,
      uploads: {} as UploadService,
      downloads: {} as DownloadService,
      jobs: jobsService,
      mediaJobs,
      mediaService: {} as MediaService,
      folders: {} as FoldersService,
      metrics: createApiMetrics(),
      readiness: {},
    });
    server = createServer(app);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  beforeEach(() => {
    outcome = { state: 'timeout' };
    addFails = undefined;
  });

  /** Sends a request and checks the answer against the document; returns it. */
  async function call(
    method: string,
    template: string,
    path: string,
    init: { headers?: Record<string, string>; body?: string | FormData; token?: string } = {},
  ) {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { Authorization: `Bearer ${init.token ?? 'mine'}`, ...init.headers },
      body: init.body,
    });
    const body = (await res.json()) as JsonObject;
    expectMatchesSpec(method, template, res.status, body, res.headers);
    return { status: res.status, body, headers: res.headers };
  }
  const json = { 'Content-Type': 'application/json' };
  const convert = (format: string, extra: Record<string, string> = {}) =>
    call('POST', '/media/convert', '/media/convert', {
      headers: { ...json, ...extra },
      body: JSON.stringify({ mediaKey: records[0]!.key, format }),
    });
  const metadataOf = (key: string, headers: Record<string, string> = {}) =>
    call('GET', '/media/metadata', `/media/metadata?mediaKey=${encodeURIComponent(key)}`, {
      headers,
    });
  const status = (jobId: string, token?: string) =>
    call('GET', '/media/jobs/{id}', `/media/jobs/${encodeURIComponent(jobId)}`, { token });

  it('metadata: 200, 202 with Prefer: respond-async, 504, 404, 415, 400, 422 with jobId', async () => {
    outcome = { state: 'completed', result: { metadata } };
    expect((await metadataOf(records[0]!.key)).status).toBe(200);
    const accepted = await metadataOf(records[0]!.key, { Prefer: 'respond-async' });
    expect(accepted.status).toBe(202);
    expect(accepted.headers.get('location')).toBe((accepted.body.data as JsonObject).statusUrl);
    outcome = { state: 'timeout' };
    expect((await metadataOf(records[0]!.key)).status).toBe(504);
    expect((await metadataOf('acme/none-ILm6DTZ4Wc-R.jpg')).status).toBe(404);
    expect((await metadataOf(records[1]!.key)).status).toBe(415);
    expect((await call('GET', '/media/metadata', '/media/metadata')).status).toBe(400);
    outcome = { state: 'failed', error: fromJob(Errors.unreadable('damaged header')) };
    const failed = await metadataOf(records[0]!.key);
    expect([failed.status, typeof failed.body.jobId]).toEqual([422, 'string']);
  });

  it('convert: 201 with the new record, 202, 400, 503 from Redis and from the job', async () => {
    outcome = { state: 'completed', result: { mediaId: 3 } };
    expect((await convert('WEBP')).status).toBe(201);
    expect((await convert('png', { Prefer: 'wait=5, Respond-Async' })).status).toBe(202);
    expect((await convert('bmp')).status).toBe(400);
    addFails = Errors.unavailable('Redis');
    expect((await convert('png')).status).toBe(503);
    addFails = undefined;
    outcome = { state: 'failed', error: fromJob(Errors.unavailable('storage')) };
    expect((await convert('png')).status).toBe(503);
  });

  it('merge-pdfs: 201, 404 and 415 naming the input, 400', async () => {
    const form = (...keys: string[]) => {
      const fd = new FormData();
      for (const key of keys) fd.append('mediaKeys', key);
      return fd;
    };
    const merge = (body: FormData | string) =>
      call('POST', '/media/merge-pdfs', '/media/merge-pdfs', { body });
    outcome = { state: 'completed', result: { mediaId: 4 } };
    expect((await merge(form(records[1]!.key, records[1]!.key))).status).toBe(201);
    const unknown = await merge(form(records[1]!.key, 'acme/none.pdf'));
    expect([unknown.status, unknown.body.details]).toEqual([
      404,
      [expect.objectContaining({ index: 1, name: 'acme/none.pdf' })],
    ]);
    const notPdf = await merge(form(records[0]!.key));
    expect([notPdf.status, notPdf.body.details]).toEqual([
      415,
      [expect.objectContaining({ index: 0 })],
    ]);
    expect((await merge(form())).status).toBe(400);
    expect((await merge('mediaKeys=x')).status).toBe(400);
  });

  it('the status URL: 202 while pending, 200 once done (even for a 201), the error with jobId, 404', async () => {
    const accepted = await convert('png', { Prefer: 'respond-async' });
    const jobId = String((accepted.body.data as JsonObject).jobId);
    const job = jobs.get(jobId)!;
    for (const state of [
      'waiting',
      'active',
      'delayed',
      'prioritized',
      'waiting-children',
    ] as const) {
      job.state = state;
      const pending = await status(jobId);
      expect([pending.status, (pending.body.data as JsonObject).state]).toEqual([202, state]);
    }
    Object.assign(job, { state: 'completed', result: { mediaId: 3 } });
    expect((await status(jobId)).status).toBe(200);
    Object.assign(job, {
      state: 'failed',
      error: decodeJobError(
        encodeJobError(
          Errors.encryptedPdf('encrypted', [{ index: 1, name: 's.pdf', message: 'x' }]),
        ),
      ),
    });
    const failed = await status(jobId);
    expect([failed.status, failed.body.jobId]).toEqual([422, jobId]);
    const meta = await metadataOf(records[0]!.key, { Prefer: 'respond-async' });
    const metaJob = jobs.get(String((meta.body.data as JsonObject).jobId))!;
    Object.assign(metaJob, { state: 'completed', result: { metadata } });
    expect((await status(metaJob.id)).status).toBe(200);
    expect((await status(jobId, 'theirs')).body.error).toBe('JOB_NOT_FOUND');
    expect((await status('nonsense')).status).toBe(404);
    expect((await status(jobId, 'nobody')).status).toBe(401);
  });
});
