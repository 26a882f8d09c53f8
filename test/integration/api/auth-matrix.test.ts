/**
 * Authentication on every endpoint: each operation of api/openapi.yaml that
 * requires a bearer token, called with each kind of bad credentials, answers
 * 401 in the documented envelope with `WWW-Authenticate: Bearer realm="media"`,
 * and does nothing (no object, no record, no job). The route list is read from
 * the spec, so a new operation is in the table as soon as it is described;
 * operations without `bearerAuth` must be listed in PUBLIC with a reason.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { fixture, form } from '../../support/files';
import { deref, expectMatchesSpec, nodeAt, pointerOf, specOperations } from '../../support/openapi';

/** Operations that take no API token, and why. */
const PUBLIC: Record<string, string> = {
  'GET /healthz':
    'liveness probe for orchestrators; answers before any dependency and tells nothing',
  'GET /readyz': 'readiness probe for orchestrators; reports only whether dependencies answer',
  'GET /metrics':
    'Prometheus scrape; guarded by METRICS_TOKEN (an operator secret), not API tokens',
  'GET /docs': 'the API reference page: public documentation, no tenant data',
  'GET /docs/openapi.yaml': 'the OpenAPI document itself: public, no tenant data',
  'GET /docs/openapi.json': 'the OpenAPI document itself: public, no tenant data',
  'GET /docs/forget-token.js': "a static script of the /docs page (clears the browser's storage)",
};

type Operation = { method: string; path: string };

function requiresBearer({ method, path }: Operation): boolean {
  const op = nodeAt(pointerOf(['paths', path, method.toLowerCase()])) as { security?: unknown };
  const security = Array.isArray(op.security) ? (op.security as Record<string, unknown>[]) : [];
  return security.some((requirement) => 'bearerAuth' in requirement);
}

const operations = specOperations();
const protectedOps = operations.filter(requiresBearer);

let api: TestApi;
let org: TestOrg;
/** Kind of bad credentials → the Authorization header sent (undefined: none). */
const badCredentials: Record<string, string | undefined> = {};

beforeAll(async () => {
  // Many bad credentials from one address: the per-address limit of failures (rate-limit.test.ts) is off here.
  api = await startApi('authmatrix', {
    env: { AUTH_FAILURE_LIMIT: '0', URL_SIGNING_KEYS: 'auth-matrix-signing-key-0123456789abcdef' },
  });
  org = await api.createOrg('authm');
  const { tokens } = api.ctx;
  const orgId = org.organization.id;
  const expired = await api.issueExpiredToken(orgId);
  const revoked = await tokens.issue(orgId, { name: 'revoked' });
  await tokens.revoke(revoked.tokenId);
  Object.assign(badCredentials, {
    'missing Authorization header': undefined,
    'another scheme (Basic)': `Basic ${Buffer.from('user:pass').toString('base64')}`,
    'Bearer without a token': 'Bearer ',
    'malformed token': 'Bearer not-a-media-token',
    'unknown token': `Bearer mst_${randomBytes(8).toString('hex')}_${randomBytes(32).toString('base64url')}`,
    // A real token id with another secret: the hash comparison must fail.
    'known token id, wrong secret': `Bearer mst_${org.tokenId}_${randomBytes(32).toString('base64url')}`,
    'expired token': `Bearer ${expired.token}`,
    'revoked token': `Bearer ${revoked.token}`,
  });
});
afterAll(() => api.close());

const jpeg = fixture('Canon_40D.jpg');
const pdf = fixture('minimal-document.pdf');
const someKey = 'authm/photo-AAAAAAAAAAAA.jpg';

/**
 * A request that, with a valid token, reaches the route and does its work (or
 * fails for its own reasons): so a 401 can only come from authentication.
 * Operations without an entry get their path parameters and required query
 * parameters filled with placeholders and no body (authentication comes first).
 */
const REQUESTS: Record<string, () => { path: string; init: RequestInit }> = {
  'POST /media/upload': () => ({
    path: '/media/upload',
    init: { method: 'POST', body: form([['file', jpeg, 'photo.jpg']]) },
  }),
  'POST /media/upload/multiple': () => ({
    path: '/media/upload/multiple',
    init: {
      method: 'POST',
      body: form([
        ['files', jpeg, 'a.jpg'],
        ['files', pdf, 'b.pdf'],
      ]),
    },
  }),
  'POST /media/upload/base64': () => ({
    path: '/media/upload/base64',
    init: {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ file: `data:image/jpeg;base64,${jpeg.toString('base64')}` }),
    },
  }),
  'GET /media/download': () => ({
    path: `/media/download?media=${encodeURIComponent(someKey)}`,
    init: {},
  }),
  'HEAD /media/download': () => ({
    path: `/media/download?media=${encodeURIComponent(someKey)}`,
    init: { method: 'HEAD' },
  }),
  'GET /media/metadata': () => ({
    path: `/media/metadata?mediaKey=${encodeURIComponent(someKey)}`,
    init: {},
  }),
  'POST /media/convert': () => ({
    path: '/media/convert',
    init: {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKey: someKey, format: 'png' }),
    },
  }),
  // No worker here, nothing fetched: the control asks for the job id at once (202).
  'POST /media/upload/url': () => ({
    path: '/media/upload/url',
    init: {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Prefer: 'respond-async' },
      body: JSON.stringify({ url: 'http://93.184.215.14/photo.jpg' }),
    },
  }),
  'POST /media/merge-pdfs': () => ({
    path: '/media/merge-pdfs',
    // Without a worker the control would wait JOB_WAIT_MS: ask for the job id at once.
    init: {
      method: 'POST',
      headers: { Prefer: 'respond-async' },
      body: form([['files', pdf, 'a.pdf']]),
    },
  }),
  'POST /media/sign': () => ({
    path: '/media/sign',
    init: {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKey: someKey }),
    },
  }),
  'GET /media/jobs/{id}': () => ({ path: `/media/jobs/image-${randomUUID()}`, init: {} }),
  'GET /media/{id}': () => ({ path: '/media/999999', init: {} }),
  'DELETE /media/{id}': () => ({ path: '/media/999999', init: { method: 'DELETE' } }),
  'GET /media/folders/{id}': () => ({ path: '/media/folders/999999', init: {} }),
  'PATCH /media/folders/{id}': () => ({
    path: '/media/folders/999999',
    init: {
      method: 'PATCH',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: 'renamed' }),
    },
  }),
  'DELETE /media/folders/{id}': () => ({
    path: '/media/folders/999999',
    init: { method: 'DELETE' },
  }),
  'POST /media/move': () => ({
    path: '/media/move',
    init: {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKeys: [someKey], folderId: 999999 }),
    },
  }),
  'POST /media/folders': () => ({
    path: '/media/folders',
    init: {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: `folder-${randomUUID()}` }),
    },
  }),
};

/** The scope an operation needs, as its security requirement in the spec names it. */
function scopeOf({ method, path }: Operation): string {
  const op = nodeAt(pointerOf(['paths', path, method.toLowerCase()])) as {
    security?: { bearerAuth?: string[] }[];
  };
  const scopes = op.security?.[0]?.bearerAuth ?? [];
  if (scopes.length !== 1) throw new Error(`${method} ${path} must name exactly one scope`);
  return scopes[0]!;
}

function requestFor({ method, path }: Operation): { path: string; init: RequestInit } {
  const known = REQUESTS[`${method} ${path}`];
  if (known) return known();
  const op = nodeAt(pointerOf(['paths', path, method.toLowerCase()])) as { parameters?: unknown };
  const params = (Array.isArray(op.parameters) ? op.parameters : []).map(
    (p, i) => deref(p, `/params/${i}`).node as { name: string; in: string; required?: boolean },
  );
  const query = params
    .filter((p) => p.in === 'query' && p.required)
    .map((p) => `${encodeURIComponent(p.name)}=x`)
    .join('&');
  return {
    path: path.replace(/\{[^}]+\}/g, 'x') + (query ? `?${query}` : ''),
    init: { method },
  };
}

async function send(op: Operation, authorization: string | undefined) {
  const { path, init } = requestFor(op);
  const headers = new Headers(init.headers);
  if (authorization !== undefined) headers.set('Authorization', authorization);
  const res = await fetch(`${api.url}${path}`, { ...init, headers });
  const text = await res.text();
  return { res, text, body: text ? (JSON.parse(text) as Record<string, unknown>) : undefined };
}

describe('the operations api/openapi.yaml describes', () => {
  it('either require bearerAuth or are listed as public with a reason', () => {
    const unlisted = operations
      .filter((op) => !requiresBearer(op))
      .map((op) => `${op.method} ${op.path}`)
      .filter((name) => !(name in PUBLIC));
    expect(unlisted).toEqual([]);
    // Every /media operation is protected (it is where the tenants' data lives).
    expect(protectedOps.map((o) => o.path)).toEqual(
      operations.filter((o) => o.path.startsWith('/media')).map((o) => o.path),
    );
    expect(protectedOps.length).toBeGreaterThanOrEqual(9);
  });

  it('the public ones answer without a token, as described', async () => {
    for (const op of operations.filter((o) => !requiresBearer(o))) {
      const res = await fetch(`${api.url}${op.path}`, { method: op.method });
      await res.arrayBuffer();
      expect(`${op.method} ${op.path} → ${res.status}`).toMatch(/ → 200$/);
    }
  });
});

describe('bad credentials get 401 on every protected operation', () => {
  const kinds = [
    'missing Authorization header',
    'another scheme (Basic)',
    'Bearer without a token',
    'malformed token',
    'unknown token',
    'known token id, wrong secret',
    'expired token',
    'revoked token',
  ];
  const rows = protectedOps.flatMap((op) =>
    kinds.map((kind): [string, string, string, Operation] => [op.method, op.path, kind, op]),
  );

  it.each(rows)('%s %s with %s → 401', async (_m, _p, kind, operation) => {
    expect(Object.keys(badCredentials)).toContain(kind);
    const { res, text, body } = await send(operation, badCredentials[kind]);
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="media"');
    if (operation.method === 'HEAD') {
      expect(text).toBe('');
    } else {
      expect(body).toMatchObject({ statusCode: 401, error: 'UNAUTHORIZED' });
      expect(body?.requestId).toBe(res.headers.get('x-request-id'));
    }
    // No rate-limit accounting for a caller that is not authenticated.
    expect(res.headers.get('ratelimit-remaining')).toBeNull();
    expectMatchesSpec(operation.method, operation.path, 401, text, res.headers);
  });

  it('an undescribed /media route is a 401 too (authentication comes before routing)', async () => {
    const res = await fetch(`${api.url}/media/does-not-exist`);
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="media"');
  });

  it('none of those requests stored, recorded or queued anything', async () => {
    expect(await api.objectKeys()).toEqual([]);
    expect(await api.ctx.models.Media.countDocuments({})).toBe(0);
    const counts = await api.ctx.queue.counts();
    const jobs = Object.values(counts).flatMap((byState) => Object.values(byState));
    expect(jobs.reduce((a, b) => a + b, 0)).toBe(0);
  });

  it('the same requests with a valid token pass authentication (control)', async () => {
    const answers: Record<string, string> = {};
    for (const op of protectedOps) {
      const { res, body } = await send(op, org.auth.Authorization);
      answers[`${op.method} ${op.path}`] =
        `${res.status} ${typeof body?.error === 'string' ? body.error : ''}`.trim();
    }
    for (const [op, answer] of Object.entries(answers)) {
      // Authenticated, and reached its route (no 401, no "No route for ..." NOT_FOUND, no 5xx).
      expect(`${op} → ${answer}`).not.toMatch(/→ (401|5\d\d|404 NOT_FOUND$)/);
    }
    // The uploads really ran: the control is not vacuous.
    expect(await api.ctx.models.Media.countDocuments({})).toBe(4);
  });
});

describe('scopes: a token without the scope an operation names gets 403 on it', () => {
  const SCOPES = ['read', 'write', 'delete', 'webhooks'] as const;
  /** A token with every scope but one, and one with only that one. */
  const tokens: Record<string, { without: string; only: string }> = {};
  beforeAll(async () => {
    const { tokens: service } = api.ctx;
    const orgId = org.organization.id;
    for (const scope of SCOPES) {
      const without = await service.issue(orgId, { scopes: SCOPES.filter((s) => s !== scope) });
      const only = await service.issue(orgId, { scopes: [scope] });
      tokens[scope] = { without: `Bearer ${without.token}`, only: `Bearer ${only.token}` };
    }
  });

  it('every protected operation names one scope, by its method (webhooks: their own)', () => {
    // Signing only reads: a signed URL grants nothing a reading token could not do.
    const exceptions: Record<string, string> = {
      'POST /media/sign': 'read',
      'POST /media/archive': 'read',
      // A restore undoes a delete: the scope that put the file in the trash takes it out.
      'POST /media/trash/{id}/restore': 'delete',
      // Resumable uploads: reading an upload's offset and terminating it are part of uploading.
      'HEAD /media/upload/resumable/{id}': 'write',
      'DELETE /media/upload/resumable/{id}': 'write',
      'DELETE /media/upload/direct/{id}': 'write',
    };
    for (const op of protectedOps) {
      const byMethod = op.path.startsWith('/media/webhooks')
        ? 'webhooks'
        : ['GET', 'HEAD'].includes(op.method)
          ? 'read'
          : op.method === 'DELETE'
            ? 'delete'
            : 'write';
      const expected = exceptions[`${op.method} ${op.path}`] ?? byMethod;
      expect(`${op.method} ${op.path}: ${scopeOf(op)}`).toBe(
        `${op.method} ${op.path}: ${expected}`,
      );
    }
  });

  it.each(protectedOps.map((op): [string, string, Operation] => [op.method, op.path, op]))(
    '%s %s: 403 INSUFFICIENT_SCOPE without its scope, past the scope check with it alone',
    async (_m, _p, operation) => {
      const scope = scopeOf(operation);
      const denied = await send(operation, tokens[scope]!.without);
      expect(denied.res.status).toBe(403);
      expect(denied.res.headers.get('www-authenticate')).toBe(
        `Bearer realm="media", error="insufficient_scope", scope="${scope}"`,
      );
      if (operation.method !== 'HEAD') {
        expect(denied.body).toMatchObject({ statusCode: 403, error: 'INSUFFICIENT_SCOPE' });
      }
      expectMatchesSpec(operation.method, operation.path, 403, denied.text, denied.res.headers);
      const allowed = await send(operation, tokens[scope]!.only);
      expect(`${operation.method} ${operation.path} → ${allowed.res.status}`).not.toMatch(
        / → (401|403)$/,
      );
    },
  );
});

describe('the Bull dashboard, beyond dashboard.test.ts: its actions need operator credentials', () => {
  let ops: TestApi;
  const operator = `Basic ${Buffer.from('ops:s3cret-pass').toString('base64')}`;
  beforeAll(async () => {
    // Actions allowed (DASHBOARD_WRITE), so the control below can take effect;
    // the read-only default is dashboard.test.ts's.
    ops = await startApi('authmatrixdash', {
      env: {
        DASHBOARD_USER: 'ops',
        DASHBOARD_PASSWORD: 's3cret-pass',
        DASHBOARD_WRITE: 'true',
        // 24 failed logins from one address below; the lockout has its own test (dashboard.test.ts).
        DASHBOARD_AUTH_FAILURE_LIMIT: '100',
      },
    });
  });
  afterAll(() => ops.close());

  /** bull-board's API routes that change or reveal queues and jobs. */
  const actions: [string, string][] = [
    ['PUT', '/admin/queues/api/queues/pause'],
    ['PUT', '/admin/queues/api/queues/image/pause'],
    ['POST', '/admin/queues/api/queues/image/add'],
    ['PUT', '/admin/queues/api/queues/image/clean/completed'],
    ['PUT', '/admin/queues/api/queues/image/empty'],
    ['PUT', '/admin/queues/api/queues/image/obliterate'],
    ['GET', `/admin/queues/api/queues/image/image-${randomUUID()}`],
    ['GET', '/ADMIN/Queues/api/queues'], // routing is case-insensitive: so is the guard
  ];

  it('refuses every action without them (401 Basic), and nothing changes', async () => {
    const org = await ops.createOrg('dash');
    const image = ops.ctx.queue.queue('image');
    for (const [method, path] of actions) {
      for (const authorization of [undefined, org.auth.Authorization, 'Basic b3BzOndyb25n']) {
        const res = await fetch(`${ops.url}${path}`, {
          method,
          headers: {
            'Content-Type': 'application/json',
            ...(authorization ? { Authorization: authorization } : {}),
          },
          ...(method === 'GET' ? {} : { body: JSON.stringify({ name: 'x', data: {} }) }),
        });
        const body = (await res.json()) as { error?: string };
        expect(`${method} ${path} → ${res.status} ${body.error ?? ''}`).toBe(
          `${method} ${path} → 401 UNAUTHORIZED`,
        );
        expect(res.headers.get('www-authenticate')).toMatch(/^Basic /);
      }
    }
    expect(await image.isPaused()).toBe(false);
    expect(Object.values(await image.getJobCounts()).reduce((a, b) => a + b, 0)).toBe(0);

    // Control: with the operator's credentials, the same action takes effect.
    const paused = await fetch(`${ops.url}/admin/queues/api/queues/image/pause`, {
      method: 'PUT',
      headers: { Authorization: operator },
    });
    expect(paused.status).toBe(200);
    expect(await image.isPaused()).toBe(true);
    await image.resume();
  });
});
