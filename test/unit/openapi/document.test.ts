/**
 * api/openapi.yaml as a document: a valid OpenAPI 3.1 description whose
 * $refs resolve, whose schemas compile (JSON Schema 2020-12, strict) and whose
 * examples match them; every operation is described completely (ids,
 * summaries, the shared error responses, X-Request-Id, WWW-Authenticate on
 * 401, an example per error), and the job endpoints' examples pass
 * expectMatchesSpec with the headers the code sends. How the document matches
 * the code is in spec-vs-code.test.ts and errors.test.ts.
 */
import { execFileSync } from 'node:child_process';
import {
  deref,
  describeAjvErrors,
  expectMatchesSpec,
  nodeAt,
  pointerOf,
  SPEC_PATH,
  validatorAt,
} from '../../support/openapi';
import {
  IMAGE_JOB,
  isObject,
  jsonHeaders,
  operations,
  responses,
  root,
  spec,
  statusUrl,
  type JsonObject,
} from './samples';

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

const JOB_OPERATIONS = [
  ['GET', '/media/metadata'],
  ['POST', '/media/convert'],
  ['POST', '/media/merge-pdfs'],
  ['GET', '/media/jobs/{id}'],
] as const;

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

  /** Operations whose scope does not follow their method, and why. */
  const SCOPE_EXCEPTIONS: Record<string, string> = {
    // A signed URL only reads: signing grants nothing a reading token could not do.
    'POST /media/sign': 'read',
    // An archive only reads the files it packs (and may answer a signed URL of itself).
    'POST /media/archive': 'read',
    // A restore undoes a delete: the scope that put the file in the trash takes it out.
    'POST /media/trash/{id}/restore': 'delete',
    // Reading a resumable upload's offset and terminating it are part of uploading (tus clients
    // resume and abort with the token they upload with).
    'HEAD /media/upload/resumable/{id}': 'write',
    'DELETE /media/upload/resumable/{id}': 'write',
    // Cancelling a direct upload is part of uploading the same way (no record exists yet).
    'DELETE /media/upload/direct/{id}': 'write',
  };
  /** Operations that take more than a bearer token: the download, renders and archives also take a signed URL. */
  const SIGNED = [{ bearerAuth: ['read'] }, { signedUrl: [] }];
  const SECURITY_EXCEPTIONS: Record<string, unknown[]> = {
    'GET /media/download': SIGNED,
    'HEAD /media/download': SIGNED,
    'GET /media/render': SIGNED,
    'GET /media/archive': SIGNED,
  };

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
        // Webhook endpoints take a scope of their own, whatever the method.
        const scope =
          SCOPE_EXCEPTIONS[where] ??
          (path.startsWith('/media/webhooks') ? 'webhooks' : undefined) ??
          (method === 'GET' || method === 'HEAD'
            ? 'read'
            : method === 'DELETE'
              ? 'delete'
              : 'write');
        const security = SECURITY_EXCEPTIONS[where] ?? [{ bearerAuth: [scope] }];
        if (JSON.stringify(op.security) !== JSON.stringify(security)) {
          problems.push(`${where}: must require ${JSON.stringify(security)}`);
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
});

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
});
