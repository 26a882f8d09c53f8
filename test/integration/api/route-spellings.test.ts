/**
 * Limits belong to routes, not to spellings. Express routes a path whatever
 * its case and with or without a trailing slash, so `/MEDIA/MERGE-PDFS` and
 * `/media/upload/` reach the merge and upload handlers: they must be charged
 * the route's documented cost (docs/api.md, "Rate limits"), and an upload
 * route keeps its in-flight cap (429 TOO_MANY_UPLOADS) and its idle timeout
 * (408) under every spelling. Every `/media` operation of api/openapi.yaml
 * is tried as written, with a trailing slash and in upper case.
 */
import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { specOperations } from '../../support/openapi';

const MAX = 1_000; // room for the guard tests, whose merges cost 50 each
const IDLE_MS = 1_000;
const CAP = 2;

/** The documented cost of each /media operation (docs/api.md, "Rate limits"). */
const COSTS: Record<string, number> = {
  'POST /media/upload': 5,
  'POST /media/upload/multiple': 10,
  'POST /media/upload/base64': 5,
  'POST /media/upload/url': 10,
  'POST /media/upload/resumable': 5,
  'HEAD /media/upload/resumable/{id}': 1,
  'PATCH /media/upload/resumable/{id}': 5,
  'DELETE /media/upload/resumable/{id}': 1,
  'DELETE /media/upload/direct/{id}': 1,
  'POST /media/upload/direct': 5,
  'POST /media/upload/direct/{id}/complete': 5,
  'GET /media/download': 1,
  'HEAD /media/download': 1,
  'POST /media/sign': 2,
  'POST /media/archive': 10,
  'GET /media/archive': 10,
  'GET /media/render': 1,
  'GET /media/metadata': 5,
  'POST /media/convert': 20,
  'POST /media/merge-pdfs': 50,
  'GET /media/jobs/{id}': 1,
  'GET /media': 2,
  'GET /media/usage': 1,
  'GET /media/record': 1,
  'DELETE /media/record': 2,
  'DELETE /media/variants': 2,
  'GET /media/{id}': 1,
  'DELETE /media/{id}': 2,
  'GET /media/trash': 2,
  'POST /media/trash/{id}/restore': 2,
  'DELETE /media/trash/{id}': 2,
  'GET /media/folders': 1,
  'POST /media/folders': 2,
  'GET /media/folders/{id}': 1,
  'PATCH /media/folders/{id}': 2,
  'DELETE /media/folders/{id}': 2,
  'POST /media/move': 2,
  'POST /media/webhooks': 2,
  'GET /media/webhooks': 1,
  'GET /media/webhooks/{id}': 1,
  'PATCH /media/webhooks/{id}': 2,
  'DELETE /media/webhooks/{id}': 2,
  'GET /media/webhooks/{id}/deliveries': 1,
  'POST /media/webhooks/{id}/replay': 5,
  'POST /media/webhooks/{id}/rotate': 2,
  'POST /media/webhooks/{id}/test': 2,
};

/** The routes whose multipart bodies stream to storage (in-flight cap, idle timeout). */
const UPLOADS = ['/media/upload', '/media/upload/multiple', '/media/merge-pdfs'];

/** A path as written, with a trailing slash, and in upper case. */
const spellings = (path: string) => [path, `${path}/`, path.toUpperCase()];

/** A concrete path for a template (`{id}` becomes an id no record or folder has). */
const concrete = (template: string) =>
  template.replace('{id}', template.startsWith('/media/jobs/') ? 'no-such-job' : '987654');

/** What the request needs to be routed (its answer may be a 4xx: it is charged all the same). */
const QUERIES: Record<string, string> = {
  '/media/download': '?media=acme/none.jpg',
  '/media/render': '?media=acme/none.jpg&w=10',
  '/media/metadata': '?mediaKey=acme/none.jpg',
  '/media/record': '?media=acme/none.jpg',
  '/media/variants': '?media=acme/none.jpg',
};

let api: TestApi;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('route-spellings', {
    env: {
      RATE_LIMIT_MAX: String(MAX),
      RATE_LIMIT_WINDOW_MS: '60000',
      AUTH_FAILURE_LIMIT: '0',
      UPLOAD_IDLE_TIMEOUT_MS: String(IDLE_MS),
      MAX_UPLOADS_IN_FLIGHT: String(CAP),
    },
  });
  org = await api.createOrg('spellings');
}, 60_000);
afterAll(() => api?.close(), 30_000);

/** A fresh token (a full budget, no upload in flight). */
async function freshToken(): Promise<string> {
  const issued = await api.ctx.tokens.issue(org.organization.id);
  return `Bearer ${issued.token}`;
}

describe('the cost of every /media operation, however its path is spelled', () => {
  const operations = specOperations()
    .filter((op) => op.path === '/media' || op.path.startsWith('/media/'))
    .map((op) => `${op.method} ${op.path}`);

  it('covers every /media operation of api/openapi.yaml', () => {
    expect([...operations].sort()).toEqual(Object.keys(COSTS).sort());
  });

  const cases = Object.entries(COSTS).flatMap(([operation, cost]) => {
    const [method, template] = operation.split(' ') as [string, string];
    return spellings(concrete(template)).map((path) => [method, path, cost] as const);
  });

  it.each(cases)('%s %s costs %d', async (method, path, cost) => {
    const template = path.replace(/\/$/, '').toLowerCase();
    const res = await fetch(`${api.url}${path}${QUERIES[template] ?? ''}`, {
      method,
      headers: { Authorization: await freshToken() },
    });
    await res.arrayBuffer();
    expect(res.status).not.toBe(429);
    expect(res.headers.get('ratelimit-remaining')).toBe(String(MAX - cost));
  });
});

/** An upload over a raw socket to `path` that sends the start of its body and then waits. */
async function stalledUpload(path: string, auth: string) {
  const boundary = 'spelling-boundary';
  const field = path.toLowerCase().startsWith('/media/upload/multiple') ? 'files' : 'file';
  const name = path.toLowerCase().startsWith('/media/merge-pdfs') ? 'files' : field;
  const file = Buffer.concat([fixture('minimal-document.pdf'), randomBytes(64 * 1024)]);
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="${name}"; filename="slow.pdf"\r\n` +
      'Content-Type: application/pdf\r\n\r\n',
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const { port } = new URL(api.url);
  const socket: Socket = connect({ port: Number(port), host: '127.0.0.1' });
  await new Promise((resolve) => socket.once('connect', resolve));
  let response = '';
  socket.on('data', (chunk: Buffer) => (response += chunk.toString('latin1')));
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.write(
    `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${auth}\r\n` +
      `Content-Type: multipart/form-data; boundary=${boundary}\r\n` +
      `Content-Length: ${head.length + file.length + tail.length}\r\n\r\n`,
  );
  socket.write(head);
  let at = 1024;
  socket.write(file.subarray(0, at));
  return {
    closed,
    status: () => /^HTTP\/1\.1 (\d{3}) /.exec(response)?.[1],
    /** Sends one more byte (keeps the upload from going idle). */
    trickle: () => socket.write(file.subarray(at, ++at)),
    destroy: () => socket.destroy(),
  };
}

describe('the upload guard, however the path is spelled', () => {
  const cases = UPLOADS.flatMap((path) => spellings(path).map((spelled) => [spelled] as const));

  it.each(cases)(
    'POST %s: past MAX_UPLOADS_IN_FLIGHT is 429, and a stalled body is cut with 408',
    async (path) => {
      const auth = await freshToken();
      const slow = [await stalledUpload(path, auth), await stalledUpload(path, auth)];
      const keepAlive = setInterval(() => slow.forEach((s) => s.trickle()), 100);
      try {
        // Both are counted once charged (the guard follows the charge at once): wait for that.
        const cost = COSTS[`POST ${path.replace(/\/$/, '').toLowerCase()}`]!;
        let probes = 0;
        await eventually(async () => {
          const probe = await fetch(`${api.url}/media/usage`, { headers: { Authorization: auth } });
          await probe.arrayBuffer();
          probes++; // each costs 1
          const spent = MAX - Number(probe.headers.get('ratelimit-remaining'));
          expect(spent - probes).toBe(2 * cost);
        });
        const third = await fetch(`${api.url}${path}`, {
          method: 'POST',
          headers: { Authorization: auth },
          body: new FormData(),
        });
        const body = (await third.json()) as Record<string, unknown>;
        expect([third.status, body.error, body.limit]).toEqual([429, 'TOO_MANY_UPLOADS', CAP]);
        clearInterval(keepAlive);
        // Left idle, each is cut with 408 (without the timeout they would hang until destroyed).
        const started = Date.now();
        await Promise.race([Promise.all(slow.map((s) => s.closed)), sleep(IDLE_MS + 5_000)]);
        expect(slow.map((s) => s.status())).toEqual(['408', '408']);
        expect(Date.now() - started).toBeLessThan(IDLE_MS + 5_000);
      } finally {
        clearInterval(keepAlive);
        slow.forEach((s) => s.destroy());
      }
      // Nothing left behind.
      await eventually(async () => {
        expect(await api.ctx.store.listIncompleteUploads('')).toEqual([]);
      });
      await api.expectNoObjects(`${org.organization.slug}/`);
    },
    30_000,
  );
});
