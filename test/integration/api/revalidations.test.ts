/**
 * Revalidations answered from each API process's memory
 * (api/domain/revalidation-cache.ts): two API replicas on one database, Redis
 * and bucket, and a third with the cache off (REVALIDATION_CACHE_ENTRIES=0,
 * every 304 read from MongoDB as before). Once a replica has served a file or
 * a variant, `If-None-Match` gets 304 with no MongoDB command, with the same
 * headers the replica without the cache answers; a key deleted through the
 * other replica (its record, its variants, its folder through the worker's
 * job) is a 404 on this one, not a 304, as soon as the invalidation arrives
 * (the cache lives 60 s here, so only the invalidation can make that happen
 * in time); another organization never gets a 304 for a key it cannot see;
 * signed URLs (which carry their organization) get their 304s from it too.
 */
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { dependencyCalls } from '../../support/metrics';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

const SIGNING_KEY = 'revalidation-signing-key-0123456789abcdef';
/** Far longer than any wait below: a replica answering 404 in time was told, not timed out. */
const LONG_CACHE = { AUTH_CACHE_MS: '60000', URL_SIGNING_KEYS: SIGNING_KEY };
/** How long the test gives a delete to reach the other replica (pub/sub takes milliseconds). */
const PROPAGATION_MS = 5_000;

let a: TestApi;
let b: TestApi;
let off: TestApi;
let worker: TestWorker;
let org: TestOrg;
let other: TestOrg;
const jpeg = fixture('Canon_40D.jpg');

beforeAll(async () => {
  a = await startApi('revalidate', { env: LONG_CACHE });
  const shared = {
    ...LONG_CACHE,
    MONGODB_URI: a.env.env.MONGODB_URI,
    QUEUE_PREFIX: a.env.queuePrefix,
    S3_BUCKET: a.env.bucket,
  };
  b = await startApi('revalidate-b', { store: a.ctx.store, env: shared });
  off = await startApi('revalidate-off', {
    store: a.ctx.store,
    env: { ...shared, REVALIDATION_CACHE_ENTRIES: '0' },
  });
  worker = await startWorker(a.env.env);
  org = await a.createOrg('reval');
  other = await a.createOrg('reval-other');
}, 60_000);
afterAll(async () => {
  await worker?.close();
  await off?.close();
  await b?.close();
  await a?.close();
});

/** Bearer authentication, or none (a signed URL). */
type Auth = Record<string, string> | null;

/** GET `path` on `api` (bearer `auth`, or none for a signed URL), checked against the spec. */
async function get(
  api: TestApi,
  path: string,
  headers: Record<string, string> = {},
  auth: Auth = org.auth,
) {
  const res = await fetch(`${api.url}${path}`, { headers: { ...(auth ?? {}), ...headers } });
  const bytes = Buffer.from(await res.arrayBuffer());
  const route = new URL(`${api.url}${path}`).pathname;
  expectMatchesSpec('GET', route, res.status, bytes, res.headers);
  return { res, bytes };
}

const download = (key: string) => `/media/download?media=${encodeURIComponent(key)}`;
const render = (key: string, query = 'w=40&format=webp') =>
  `/media/render?media=${encodeURIComponent(key)}&${query}`;

/** The headers a 304 carries, without those that differ by request (Date, request id). */
function validators(res: Response): Record<string, string | null> {
  const names = ['etag', 'last-modified', 'cache-control', 'vary', 'accept-ranges'];
  return Object.fromEntries(names.map((n) => [n, res.headers.get(n)]));
}

const mongoFinds = (api: TestApi) => dependencyCalls(api.url, 'mongodb', 'find');

/** A 304 for `path` with `etag` on `api`, and its headers. */
async function revalidated(
  api: TestApi,
  path: string,
  etag: string,
  auth: Auth = org.auth,
  headers: Record<string, string> = {},
) {
  const { res, bytes } = await get(api, path, { ...headers, 'If-None-Match': etag }, auth);
  expect(res.status).toBe(304);
  expect(bytes.length).toBe(0);
  return validators(res);
}

describe('downloads', () => {
  it('answers 304 from memory once served, with the headers of a 304 read from MongoDB', async () => {
    const key = await org.upload(jpeg, 'cached.jpg');
    const first = await get(b, download(key));
    expect(first.res.status).toBe(200);
    expect(first.bytes.equals(jpeg)).toBe(true);
    const etag = first.res.headers.get('etag')!;

    const finds = await mongoFinds(b);
    const fromMemory = await revalidated(b, download(key), etag);
    await revalidated(b, download(key), `W/${etag}, "other"`);
    await revalidated(b, download(key), '*');
    expect(await mongoFinds(b)).toBe(finds);

    const fromMongo = await revalidated(off, download(key), etag);
    expect(fromMemory).toEqual(fromMongo);
    expect(fromMemory).toMatchObject({
      etag,
      'last-modified': first.res.headers.get('last-modified'),
      'cache-control': 'private, no-cache',
      'accept-ranges': 'bytes',
    });

    // A validator that no longer matches: the bytes again.
    const changed = await get(b, download(key), { 'If-None-Match': '"something-else"' });
    expect(changed.res.status).toBe(200);
    expect(changed.bytes.equals(jpeg)).toBe(true);
  });

  it('a key deleted through another replica is a 404, not a 304, as soon as the news arrives', async () => {
    const key = await org.upload(jpeg, 'deleted.jpg');
    const etag = (await get(b, download(key))).res.headers.get('etag')!;
    await revalidated(b, download(key), etag);

    const deleted = await fetch(`${a.url}/media/record?media=${encodeURIComponent(key)}`, {
      method: 'DELETE',
      headers: org.auth,
    });
    expect(deleted.status).toBe(200);
    await eventually(async () => {
      const { res } = await get(b, download(key), { 'If-None-Match': etag });
      expect(res.status).toBe(404);
    }, PROPAGATION_MS);
    // The replica that deleted it knew at once.
    expect((await get(a, download(key), { 'If-None-Match': etag })).res.status).toBe(404);
  });

  it("a folder deleted by the worker's job: its files are 404s on every replica", async () => {
    const created = await fetch(`${a.url}/media/folders`, {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: 'going' }),
    });
    expect(created.status).toBe(201);
    const folder = ((await created.json()) as { data: { id: number } }).data;
    const key = await org.upload(jpeg, 'in-folder.jpg', { folderId: folder.id });
    const etag = (await get(b, download(key))).res.headers.get('etag')!;
    await revalidated(b, download(key), etag);

    const deleted = await fetch(`${a.url}/media/folders/${folder.id}?recursive=true`, {
      method: 'DELETE',
      headers: org.auth,
    });
    expect([200, 202]).toContain(deleted.status);
    await eventually(async () => {
      const { res } = await get(b, download(key), { 'If-None-Match': etag });
      expect(res.status).toBe(404);
    }, 30_000);
  });

  it('another organization never gets a 304 for a key it cannot see', async () => {
    const key = await org.upload(jpeg, 'mine.jpg');
    const etag = (await get(b, download(key))).res.headers.get('etag')!;
    await revalidated(b, download(key), etag);
    const theirs = await get(b, download(key), { 'If-None-Match': etag }, other.auth);
    expect(theirs.res.status).toBe(404);
    const wildcard = await get(b, download(key), { 'If-None-Match': '*' }, other.auth);
    expect(wildcard.res.status).toBe(404);
  });
});

describe('renders', () => {
  it('answers 304 from memory once rendered, with the headers of a 304 read from MongoDB', async () => {
    const key = await org.upload(jpeg, 'render.jpg');
    for (const query of ['w=40&format=webp', 'w=40&format=auto']) {
      const accept = { Accept: 'image/webp,image/*' };
      const first = await get(b, render(key, query), accept);
      expect(first.res.status).toBe(200);
      const etag = first.res.headers.get('etag')!;

      const finds = await mongoFinds(b);
      const fromMemory = await revalidated(b, render(key, query), etag, org.auth, accept);
      expect(await mongoFinds(b)).toBe(finds);
      const fromMongo = await revalidated(off, render(key, query), etag, org.auth, accept);
      expect(fromMemory).toEqual(fromMongo);
      expect(fromMemory['cache-control']).toBe('private, max-age=86400');
      if (query.includes('auto')) expect(fromMemory.vary).toMatch(/Accept/);
    }
  });

  it('variants deleted through another replica are rendered again, not revalidated', async () => {
    const key = await org.upload(jpeg, 'variants.jpg');
    const etag = (await get(b, render(key))).res.headers.get('etag')!;
    await revalidated(b, render(key), etag);
    const removed = await fetch(`${a.url}/media/variants?media=${encodeURIComponent(key)}`, {
      method: 'DELETE',
      headers: org.auth,
    });
    expect(removed.status).toBe(200);
    const finds = await mongoFinds(b);
    await eventually(async () => {
      // Not from memory any more: the replica reads MongoDB for it (and renders it again).
      await get(b, render(key), { 'If-None-Match': etag });
      expect(await mongoFinds(b)).toBeGreaterThan(finds);
    }, PROPAGATION_MS);
  });

  it('another organization never gets a 304 for a variant of a key it cannot see', async () => {
    const key = await org.upload(jpeg, 'render-mine.jpg');
    const etag = (await get(b, render(key))).res.headers.get('etag')!;
    await revalidated(b, render(key), etag);
    const theirs = await get(b, render(key), { 'If-None-Match': etag }, other.auth);
    expect(theirs.res.status).toBe(404);
  });
});

describe('signed URLs', () => {
  async function sign(body: Record<string, unknown>) {
    const res = await fetch(`${a.url}/media/sign`, {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(200);
    const url = ((await res.json()) as { data: { url: string } }).data.url;
    return url.startsWith('/') ? url : url.slice(new URL(url).origin.length);
  }

  it('a signed download and render get their 304s from memory, and 404 once deleted', async () => {
    const key = await org.upload(jpeg, 'signed.jpg');
    const paths = [
      await sign({ mediaKey: key, expiresIn: 3600 }),
      await sign({ mediaKey: key, expiresIn: 3600, render: { w: 40, format: 'webp' } }),
    ];
    const etags: string[] = [];
    for (const path of paths) {
      const first = await get(b, path, {}, null);
      expect(first.res.status).toBe(200);
      const etag = first.res.headers.get('etag')!;
      etags.push(etag);
      const finds = await mongoFinds(b);
      const fromMemory = await revalidated(b, path, etag, null);
      expect(await mongoFinds(b)).toBe(finds);
      expect(fromMemory['cache-control']).toMatch(/^public, max-age=\d+, immutable$/);
      const fromMongo = await revalidated(off, path, etag, null);
      expect({ ...fromMemory, 'cache-control': null }).toEqual({
        ...fromMongo,
        'cache-control': null,
      });
    }

    const deleted = await fetch(`${a.url}/media/record?media=${encodeURIComponent(key)}`, {
      method: 'DELETE',
      headers: org.auth,
    });
    expect(deleted.status).toBe(200);
    for (const [i, path] of paths.entries()) {
      await eventually(async () => {
        const { res } = await get(b, path, { 'If-None-Match': etags[i]! }, null);
        expect(res.status).toBe(404);
      }, PROPAGATION_MS);
    }
  });
});
