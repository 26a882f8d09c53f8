/**
 * Authentication from each API process's memory (AUTH_CACHE_MS), with
 * changes reaching every replica through Redis pub/sub: two API replicas on
 * one database and Redis, each holding a token it has accepted, refuse it
 * as soon as the operator revokes it, narrows its scopes or deletes its
 * organization (through the CLI's commands, as operators do: one after
 * another in one CLI process, `cliSession()`), and show a new quota; the
 * cache lives 60 s here, so only the invalidation can make that happen in
 * time. A third replica reaching Redis through a proxy that the test cuts
 * misses the message and refuses the revoked token once its (short) cache
 * bound has passed.
 */
import { cliSession, type CliSession } from '../../support/cli';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { redisUrl } from '../../support/context';
import { eventually } from '../../support/eventually';
import { hostPortOf, startTcpProxy, type TcpProxy } from '../../support/tcp-proxy';

/** Far longer than any wait below: a replica refusing in time was told, not timed out. */
const LONG_CACHE = { AUTH_CACHE_MS: '60000' };
/** How long the test gives a change to reach both replicas (pub/sub takes milliseconds). */
const PROPAGATION_MS = 5_000;

let a: TestApi;
let b: TestApi;
let starting: Promise<CliSession> | undefined;
let session: CliSession;

beforeAll(async () => {
  a = await startApi('authcache', { env: LONG_CACHE });
  // The CLI process starts while the second replica does.
  starting = cliSession(a.env.env);
  starting.catch(() => undefined);
  // The same database, queue prefix (so the same channel) and bucket: another replica.
  b = await startApi('authcache-b', {
    store: a.ctx.store,
    env: {
      ...LONG_CACHE,
      MONGODB_URI: a.env.env.MONGODB_URI,
      QUEUE_PREFIX: a.env.queuePrefix,
      S3_BUCKET: a.env.bucket,
    },
  });
  session = await starting;
});
afterAll(async () => {
  await (await starting?.catch(() => undefined))?.close();
  await b?.close();
  await a?.close();
});

const cli = (...args: string[]) => session.run(...args);

const get = (api: TestApi, token: string, path = '/media') =>
  fetch(`${api.url}${path}`, { headers: { Authorization: `Bearer ${token}` } });

/** The status each replica answers, [a, b]. */
const statuses = async (token: string, path?: string) =>
  Promise.all([a, b].map(async (api) => (await get(api, token, path)).status));

async function expectBoth(token: string, status: number, path?: string) {
  await eventually(
    async () => expect(await statuses(token, path)).toEqual([status, status]),
    PROPAGATION_MS,
  );
}

let org: TestOrg;
beforeAll(async () => {
  org = await a.createOrg('cached');
});

it('a revoked token is refused by every replica at once', async () => {
  const { token, tokenId } = await a.ctx.tokens.issue(org.organization.id, { name: 'revoked' });
  expect(await statuses(token)).toEqual([200, 200]); // both hold it now
  const revoked = await cli('token:revoke', '--id', tokenId);
  expect(revoked.code).toBe(0);
  await expectBoth(token, 401);
});

it('narrowed scopes apply on every replica at once', async () => {
  const { token, tokenId } = await a.ctx.tokens.issue(org.organization.id, {
    name: 'narrowed',
    scopes: ['read', 'write'],
  });
  expect(await statuses(token)).toEqual([200, 200]);
  const updated = await cli('token:update', '--id', tokenId, '--scopes', 'write');
  expect(updated.code).toBe(0);
  expect(JSON.parse(updated.stdout)).toMatchObject({ token: { tokenId, scopes: ['write'] } });
  await expectBoth(token, 403);
  const body = (await (await get(b, token)).json()) as { error: string };
  expect(body.error).toBe('INSUFFICIENT_SCOPE');
});

it('a new quota shows on every replica at once', async () => {
  const quotaOf = async (api: TestApi) =>
    (
      (await (await get(api, org.token, '/media/usage')).json()) as {
        data: { quota: { bytes: unknown } };
      }
    ).data.quota.bytes;
  expect(await Promise.all([a, b].map(quotaOf))).toEqual([null, null]);
  const updated = await cli('org:update', '--org', 'cached', '--quota', '1MB');
  expect(updated.code).toBe(0);
  await eventually(
    async () => expect(await Promise.all([a, b].map(quotaOf))).toEqual([1_048_576, 1_048_576]),
    PROPAGATION_MS,
  );
});

it("a deleted organization's tokens are refused by every replica at once", async () => {
  const leaving = await a.createOrg('leaving');
  expect(await statuses(leaving.token)).toEqual([200, 200]);
  const deleted = await cli('org:delete', '--org', 'leaving', '--confirm', 'leaving');
  expect(deleted.code).toBe(0);
  await expectBoth(leaving.token, 401);
});

describe('with Redis out of reach', () => {
  let c: TestApi;
  let proxy: TcpProxy;
  const BOUND_MS = 2_000;

  beforeAll(async () => {
    const { host, port } = hostPortOf(redisUrl());
    proxy = await startTcpProxy(host, port);
    c = await startApi('authcache-c', {
      store: a.ctx.store,
      env: {
        AUTH_CACHE_MS: String(BOUND_MS),
        // Nothing of the request path needs Redis then.
        RATE_LIMIT_MAX: '0',
        REDIS_URL: proxy.via(redisUrl()),
        MONGODB_URI: a.env.env.MONGODB_URI,
        QUEUE_PREFIX: a.env.queuePrefix,
        S3_BUCKET: a.env.bucket,
      },
    });
  });
  afterAll(async () => {
    await proxy?.restore();
    // Closed once it has Redis back (its queue's connections close cleanly then).
    if (c) await eventually(async () => expect((await fetch(`${c.url}/readyz`)).status).toBe(200));
    await c?.close();
    await proxy?.close();
  });

  it('a revoked token is refused once the cache bound has passed', async () => {
    const { token, tokenId } = await a.ctx.tokens.issue(org.organization.id, { name: 'cut' });
    await proxy.cut();
    // Held by a replica that cannot hear of the revocation.
    expect((await get(c, token)).status).toBe(200);
    await a.ctx.tokens.revoke(tokenId);
    expect((await get(a, token)).status).toBe(401);
    await eventually(
      async () => expect((await get(c, token)).status).toBe(401),
      BOUND_MS + PROPAGATION_MS,
    );
  });
});
