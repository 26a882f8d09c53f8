/**
 * Per-token rate limiting by cost (RATE_LIMIT_MAX cost units per
 * RATE_LIMIT_WINDOW_MS), counted in Redis: a token over its budget gets 429
 * RATE_LIMITED with Retry-After while other tokens are served; each
 * operation is charged its cost (an upload 5, a merge 50); two API instances
 * on the same Redis and QUEUE_PREFIX share the count; the budget comes back
 * after the window; requests that fail authentication spend nothing of the
 * token's budget (the limits on failed token lookups are in
 * auth-failures.test.ts); and when Redis is down or stops answering,
 * requests are served (fail open) without waiting long.
 */
import { randomBytes } from 'node:crypto';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { redisUrl } from '../../support/context';
import { eventually } from '../../support/eventually';
import { fixture, form } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { hostPortOf, startTcpProxy } from '../../support/tcp-proxy';

const MAX = 10; // cost units: ten downloads, or two uploads
const WINDOW_MS = 6_000; // long enough for a slow machine to send a few requests within one window
const limits = {
  RATE_LIMIT_MAX: String(MAX),
  RATE_LIMIT_WINDOW_MS: String(WINDOW_MS),
  // Every test here sends from one address; the limits of failed lookups have their own tests.
  AUTH_FAILURE_LIMIT: '0',
};

let api: TestApi;
let acme: TestOrg;
let other: TestOrg;
let key: string;

/** A fresh token of an organization (each test starts with a full budget). */
async function newToken(on: TestApi, org: TestOrg): Promise<{ id: string; auth: string }> {
  const issued = await on.ctx.tokens.issue(org.organization.id);
  return { id: issued.tokenId, auth: `Bearer ${issued.token}` };
}

async function upload(on: TestApi, auth: string, file = 'Canon_40D.jpg') {
  const res = await fetch(`${on.url}/media/upload`, {
    method: 'POST',
    headers: { Authorization: auth },
    body: form([['file', fixture(file), file]]),
  });
  const body = (await res.json()) as { data: { key: string }; error?: string };
  return { res, body };
}

async function download(on: TestApi, auth: string, media = key, method = 'GET') {
  const started = Date.now();
  const res = await fetch(`${on.url}/media/download?media=${encodeURIComponent(media)}`, {
    method,
    headers: { Authorization: auth },
  });
  const bytes = Buffer.from(await res.arrayBuffer());
  return { res, bytes, ms: Date.now() - started };
}

const remaining = (res: Response) => res.headers.get('ratelimit-remaining');

beforeAll(async () => {
  api = await startApi('ratelimit', { env: limits });
  acme = await api.createOrg('acme');
  other = await api.createOrg('other');
  const setup = await newToken(api, acme);
  const stored = await upload(api, setup.auth);
  expect(stored.res.status).toBe(201);
  key = stored.body.data.key;
});
afterAll(() => api.close());

describe('a render’s cost', () => {
  // Of a key no record has (404, no job): a request is charged when it arrives, answered or not.
  it('follows the pixels and the format it asks for', async () => {
    const cases: [string, number | 'refused'][] = [
      ['w=400', 1], // a thumbnail (0.16 MP, WebP or AVIF by Accept)
      ['w=1000&h=1000&format=webp', 2], // 1 MP of WebP
      ['w=1000&h=1000&format=gif', 5], // 1 MP of GIF: four units per megapixel
      ['w=1000&h=1000&format=jpeg', 1], // half a unit per megapixel, rounded down
      ['format=avif', 'refused'], // no size: the render maxima, 16.8 MP of AVIF: 50
    ];
    for (const [query, cost] of cases) {
      const token = await newToken(api, acme);
      const res = await fetch(`${api.url}/media/render?media=acme/none.jpg&${query}`, {
        headers: { Authorization: token.auth, Accept: 'image/webp' },
      });
      await res.arrayBuffer();
      if (cost === 'refused') {
        expect({ query, status: res.status }).toEqual({ query, status: 429 });
      } else {
        expect({ query, status: res.status, remaining: remaining(res) }).toEqual({
          query,
          status: 404,
          remaining: String(MAX - cost),
        });
      }
    }
  });
});

describe('a token over its budget', () => {
  it('gets 429 RATE_LIMITED with Retry-After, while other tokens are served', async () => {
    const token = await newToken(api, acme);
    for (let i = 1; i <= MAX; i++) {
      const { res } = await download(api, token.auth);
      expect(res.status).toBe(200);
      expect(res.headers.get('ratelimit-limit')).toBe(String(MAX));
      expect(res.headers.get('ratelimit-policy')).toBe(`${MAX};w=${WINDOW_MS / 1000}`);
      expect(remaining(res)).toBe(String(MAX - i));
    }

    const { res, bytes } = await download(api, token.auth);
    expect(res.status).toBe(429);
    const retryAfter = Number(res.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(WINDOW_MS / 1000);
    expect(remaining(res)).toBe('0');
    const body = JSON.parse(bytes.toString('utf8')) as Record<string, unknown>;
    expect(body).toMatchObject({ statusCode: 429, error: 'RATE_LIMITED' });
    expect(body.message).toMatch(new RegExp(`at most ${MAX} per ${WINDOW_MS / 1000} s`));
    expect(body.requestId).toBe(res.headers.get('x-request-id'));
    expectMatchesSpec('GET', '/media/download', 429, body, res.headers);

    // Every /media endpoint is limited, HEAD included, and a refused upload stores nothing.
    const head = await download(api, token.auth, key, 'HEAD');
    expect(head.res.status).toBe(429);
    expectMatchesSpec('HEAD', '/media/download', 429, '', head.res.headers);
    const before = await api.objectKeys();
    const refused = await upload(api, token.auth, 'minimal-document.pdf');
    expect([refused.res.status, refused.body.error]).toEqual([429, 'RATE_LIMITED']);
    expectMatchesSpec('POST', '/media/upload', 429, refused.body, refused.res.headers);
    expect(await api.objectKeys()).toEqual(before);

    // Another token of the same organization, and another organization's token, are served.
    const sibling = await newToken(api, acme);
    const siblingAnswer = await download(api, sibling.auth);
    expect(siblingAnswer.res.status).toBe(200);
    expect(remaining(siblingAnswer.res)).toBe(String(MAX - 1));
    const stranger = await newToken(api, other);
    expect((await download(api, stranger.auth)).res.status).toBe(404); // not its key; not limited
  });

  it('is served again once the window has passed', async () => {
    const token = await newToken(api, acme);
    for (let i = 0; i < MAX; i++) expect((await download(api, token.auth)).res.status).toBe(200);
    const limited = await download(api, token.auth);
    expect(limited.res.status).toBe(429);
    const retryAfter = Number(limited.res.headers.get('retry-after'));
    // The window is Redis's: its count expires on Redis's own clock, which no
    // test can move, so this waits the Retry-After the answer gave (whole seconds).
    await new Promise((resolve) => setTimeout(resolve, retryAfter * 1000 + 250));
    const again = await download(api, token.auth);
    expect(again.res.status).toBe(200);
    expect(remaining(again.res)).toBe(String(MAX - 1));
  });

  it('is not charged for requests that fail authentication, even with its token id', async () => {
    const token = await newToken(api, acme);
    const forged = `Bearer mst_${token.id}_${randomBytes(32).toString('base64url')}`;
    for (let i = 0; i < MAX * 3; i++) {
      const { res } = await download(api, forged);
      expect(res.status).toBe(401);
      expect(remaining(res)).toBeNull();
    }
    const { res } = await download(api, token.auth);
    expect(res.status).toBe(200);
    expect(remaining(res)).toBe(String(MAX - 1));
  });
});

describe('two API instances on the same Redis and QUEUE_PREFIX', () => {
  let twin: TestApi;
  beforeAll(async () => {
    twin = await startApi('ratelimit-twin', {
      store: api.ctx.store,
      env: {
        ...limits,
        QUEUE_PREFIX: api.env.queuePrefix,
        MONGODB_URI: api.env.env.MONGODB_URI,
        S3_BUCKET: api.env.bucket,
      },
    });
  });
  afterAll(() => twin.close());

  it('share one count per token', async () => {
    const token = await newToken(api, acme);
    const seen: (string | null)[] = [];
    for (const on of [api, twin, api]) {
      const { res } = await download(on, token.auth);
      expect(res.status).toBe(200);
      seen.push(remaining(res));
    }
    expect(seen).toEqual([String(MAX - 1), String(MAX - 2), String(MAX - 3)]);
    for (let i = 3; i < MAX; i++) expect((await download(twin, token.auth)).res.status).toBe(200);
    const { res } = await download(twin, token.auth);
    expect(res.status).toBe(429);
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  });
});

describe('when Redis is unreachable, the limit fails open', () => {
  it('serves downloads and uploads at once while Redis refuses connections, and limits again after', async () => {
    const target = hostPortOf(redisUrl());
    const proxy = await startTcpProxy(target.host, target.port);
    const down = await startApi('ratelimit-down', {
      env: { REDIS_URL: proxy.via(redisUrl()), RATE_LIMIT_MAX: '6', RATE_LIMIT_WINDOW_MS: '60000' },
    });
    try {
      const org = await down.createOrg('down');
      const stored = await upload(down, org.auth.Authorization);
      expect(stored.res.status).toBe(201);
      const token = await newToken(down, org);
      const media = stored.body.data.key;
      for (let i = 0; i < 6; i++) {
        expect((await download(down, token.auth, media)).res.status).toBe(200);
      }
      expect((await download(down, token.auth, media)).res.status).toBe(429);

      await proxy.cut();
      const served = await download(down, token.auth, media);
      expect(served.res.status).toBe(200);
      expect(served.bytes.equals(fixture('Canon_40D.jpg'))).toBe(true);
      expect(served.ms).toBeLessThan(2_000);
      expect(served.res.headers.get('ratelimit-limit')).toBeNull(); // not counted
      const started = Date.now();
      const uploaded = await upload(down, token.auth, 'minimal-document.pdf');
      expect(uploaded.res.status).toBe(201);
      expect(Date.now() - started).toBeLessThan(5_000);

      // Redis back: the count it kept applies again (after the reconnect backoff, at most 2 s).
      await proxy.restore();
      await eventually(
        async () => expect((await download(down, token.auth, media)).res.status).toBe(429),
        15_000,
        200,
      );
    } finally {
      await proxy.restore();
      await down.close();
      await proxy.close();
    }
  });

  it('does not hang when Redis accepts the connection but stops answering', async () => {
    const target = hostPortOf(redisUrl());
    const proxy = await startTcpProxy(target.host, target.port);
    const hung = await startApi('ratelimit-hung', {
      env: {
        REDIS_URL: proxy.via(redisUrl()),
        RATE_LIMIT_MAX: '20',
      },
    });
    try {
      const org = await hung.createOrg('hung');
      const stored = await upload(hung, org.auth.Authorization);
      expect(stored.res.status).toBe(201);
      const before = await download(hung, org.auth.Authorization, stored.body.data.key);
      expect(before.res.headers.get('ratelimit-limit')).toBe('20');

      proxy.freeze();
      const served = await download(hung, org.auth.Authorization, stored.body.data.key);
      expect(served.res.status).toBe(200);
      expect(served.res.headers.get('ratelimit-limit')).toBeNull();
      // The limiter gives up on Redis after 1 s; allow for a loaded machine.
      expect(served.ms).toBeLessThan(3_000);
    } finally {
      proxy.thaw();
      await hung.close();
      await proxy.close();
    }
  });
});

describe('costs', () => {
  it('charges each operation its cost: an upload 5, a merge 50 (refused at once, nothing stored)', async () => {
    const token = await newToken(api, acme);
    const stored = await upload(api, token.auth);
    expect(stored.res.status).toBe(201);
    expect(remaining(stored.res)).toBe(String(MAX - 5));
    for (let i = 1; i <= 5; i++) {
      const { res } = await download(api, token.auth);
      expect([i, res.status, remaining(res)]).toEqual([i, 200, String(MAX - 5 - i)]);
    }
    expect((await download(api, token.auth)).res.status).toBe(429);

    const fresh = await newToken(api, acme);
    const before = await api.objectKeys();
    const merge = await fetch(`${api.url}/media/merge-pdfs`, {
      method: 'POST',
      headers: { Authorization: fresh.auth },
      body: form([['files', fixture('minimal-document.pdf'), 'a.pdf']]),
    });
    expect(merge.status).toBe(429);
    expect(await api.objectKeys()).toEqual(before);
  });
});

describe('the per-process stage ahead of Redis (units taken 1% of the budget at a time)', () => {
  const BIG = 200; // batches of 2 units
  const bigLimits = { ...limits, RATE_LIMIT_MAX: String(BIG), RATE_LIMIT_WINDOW_MS: '60000' };
  let one: TestApi;
  let two: TestApi;
  let org: TestOrg;
  beforeAll(async () => {
    one = await startApi('ratelimit-lease', { env: bigLimits });
    two = await startApi('ratelimit-lease-twin', {
      store: one.ctx.store,
      env: {
        ...bigLimits,
        QUEUE_PREFIX: one.env.queuePrefix,
        MONGODB_URI: one.env.env.MONGODB_URI,
        S3_BUCKET: one.env.bucket,
      },
    });
    org = await one.createOrg('lease');
  });
  afterAll(async () => {
    await two.close();
    await one.close();
  });

  /** A render of a key no record has, at the render maxima in AVIF: 404, cost 50. */
  const spend50 = (on: TestApi, auth: string) =>
    fetch(`${on.url}/media/render?media=lease/none.jpg&format=avif`, {
      headers: { Authorization: auth },
    }).then(async (res) => ({ res, body: await res.text() }));

  it('counts exactly with one replica and refuses past the limit with 429 and the documented headers', async () => {
    const token = await newToken(one, org);
    for (const left of [150, 100, 50]) {
      const { res } = await spend50(one, token.auth);
      expect([res.status, remaining(res)]).toEqual([404, String(left)]);
    }
    for (let left = 49; left >= 0; left--) {
      const { res } = await download(one, token.auth, 'lease/none.jpg', 'HEAD');
      expect([res.status, remaining(res)]).toEqual([404, String(left)]);
    }
    const { res, bytes } = await download(one, token.auth, 'lease/none.jpg');
    expect(res.status).toBe(429);
    expect(remaining(res)).toBe('0');
    expect(res.headers.get('ratelimit-limit')).toBe(String(BIG));
    expect(res.headers.get('ratelimit-policy')).toBe(`${BIG};w=60`);
    const retryAfter = Number(res.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(JSON.parse(bytes.toString('utf8'))).toMatchObject({ error: 'RATE_LIMITED' });
    // Another token is not held back by this one's batches.
    const other = await newToken(one, org);
    expect((await spend50(one, other.auth)).res.status).toBe(404);
  });

  it('never lets a token past its budget across replicas, and refuses it at most a batch early', async () => {
    const token = await newToken(one, org);
    for (let i = 0; i < 3; i++) expect((await spend50(one, token.auth)).res.status).toBe(404);
    // 50 units left in all: alternate replicas, one unit at a time, until both refuse.
    let served = 0;
    const refusedBy = new Set<TestApi>();
    for (let i = 0; refusedBy.size < 2 && i < 200; i++) {
      const on = i % 2 ? two : one;
      const { res } = await download(on, token.auth, 'lease/none.jpg', 'HEAD');
      if (res.status === 429) {
        refusedBy.add(on);
        expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      } else {
        expect(res.status).toBe(404);
        served++;
      }
    }
    expect(refusedBy.size).toBe(2);
    expect(served).toBeLessThanOrEqual(50);
    expect(served).toBeGreaterThanOrEqual(50 - 2);
  });
});
