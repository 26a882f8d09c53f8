/**
 * Guessed tokens are limited where they cost a MongoDB lookup, and nowhere
 * else: an address past AUTH_FAILURE_LIMIT failed lookups gets 429 for the
 * tokens it would have to look up (no lookup made, counted through the
 * dependency metrics), also when the client rotates the X-Forwarded-For it
 * sends (TRUST_PROXY=true: the address the proxy appended counts); and from
 * that same address a token the API has cached, a token never used before
 * (it carries the service's check) and a valid signed URL are still served,
 * bad signatures being no reason to refuse anything. AUTH_LOOKUPS_PER_SECOND
 * bounds the lookups of all addresses together, and valid tokens pass it.
 */
import { createHash, randomBytes } from 'node:crypto';
import { eventually } from '../../support/eventually';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { dependencyCalls } from '../../support/metrics';

const LIMIT = 30;
const env = {
  TRUST_PROXY: 'true',
  AUTH_FAILURE_LIMIT: String(LIMIT),
  AUTH_LOOKUPS_PER_SECOND: '0', // this describe is about addresses; the global bound has its own
  AUTH_CACHE_MS: '600000', // a cached token stays cached however slow the machine
  RATE_LIMIT_MAX: '100000',
  URL_SIGNING_KEYS: 'auth-failures-signing-key-0123456789abcdef',
};

const octet = () => randomBytes(1)[0]!;
/**
 * Headers of a request that came through the proxy in front of the API: the
 * client wrote the left part of X-Forwarded-For (a new one each time here),
 * the proxy appended the address it saw.
 */
const via = (address: string) => ({
  'X-Forwarded-For': `198.18.${octet()}.${octet()}, 100.64.${octet()}.${octet()}, ${address}`,
});
/** A token of the right form that nobody issued. */
const guess = () =>
  `mst_${randomBytes(8).toString('hex')}_${randomBytes(32).toString('base64url')}`;

async function get(api: TestApi, path: string, headers: Record<string, string>) {
  const res = await fetch(`${api.url}${path}`, { headers });
  await res.arrayBuffer();
  return res;
}

/**
 * A token as the service issued them before tokens carried a check (32 random
 * bytes): stored by its hash, as `TokensService.issue` stored them.
 */
async function legacyToken(api: TestApi, org: TestOrg): Promise<string> {
  const tokenId = randomBytes(8).toString('hex');
  const token = `mst_${tokenId}_${randomBytes(32).toString('base64url')}`;
  await api.ctx.repositories.tokens.insert({
    tokenId,
    organizationId: org.organization.id,
    name: 'legacy',
    hash: createHash('sha256').update(token).digest('hex'),
    scopes: ['read', 'write', 'delete'],
    expiresAt: null,
  });
  return token;
}

const bearer = (token: string) => ({ Authorization: `Bearer ${token}` });

describe('failed lookups, per client address', () => {
  let api: TestApi;
  let org: TestOrg;
  let key: string;
  let download: string;

  /** Fails LIMIT lookups from `address` (each with another spoofed X-Forwarded-For): then it is locked out. */
  async function lockOut(address: string): Promise<void> {
    for (let i = 0; i < LIMIT; i++) {
      const res = await get(api, download, { ...bearer(guess()), ...via(address) });
      expect([i, res.status]).toEqual([i, 401]);
    }
    const refused = await get(api, download, { ...bearer(guess()), ...via(address) });
    expect(refused.status).toBe(429);
  }

  beforeAll(async () => {
    api = await startApi('authfailures', { env });
    org = await api.createOrg('authfail');
    key = await org.upload('Canon_40D.jpg', 'photo.jpg');
    download = `/media/download?media=${encodeURIComponent(key)}`;
    // The upload's event is recorded off the answer's path (reads of its own): done before
    // any test counts the API's MongoDB reads.
    await eventually(async () =>
      expect(
        await api.ctx.models.Media.countDocuments({ 'pendingEvents.0': { $exists: true } }),
      ).toBe(0),
    );
  });
  afterAll(() => api.close());

  it('refuses guesses past the limit without a MongoDB lookup, however the client rotates X-Forwarded-For', async () => {
    await lockOut('203.0.113.9');
    const finds = await dependencyCalls(api.url, 'mongodb', 'find');
    for (let i = 0; i < 10; i++) {
      const res = await get(api, download, { ...bearer(guess()), ...via('203.0.113.9') });
      expect(res.status).toBe(429);
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    }
    expect(await dependencyCalls(api.url, 'mongodb', 'find')).toBe(finds);
    // Another address is looked up as before.
    const elsewhere = await get(api, download, { ...bearer(guess()), ...via('198.51.100.4') });
    expect(elsewhere.status).toBe(401);
    expect(await dependencyCalls(api.url, 'mongodb', 'find')).toBe(finds + 1);
  });

  it('still serves, from that address, a cached token, a token never used before and a valid signed URL', async () => {
    // Used once before the lockout (from elsewhere), so this API process has it cached.
    const cached = await legacyToken(api, org);
    expect((await get(api, download, { ...bearer(cached), ...via('198.51.100.5') })).status).toBe(
      200,
    );
    const signing = await fetch(`${api.url}/media/sign`, {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKey: key, expiresIn: 600 }),
    });
    expect(signing.status).toBe(200);
    const signedUrl = ((await signing.json()) as { data: { url: string } }).data.url;
    const signed = signedUrl.slice(new URL(signedUrl).origin.length);

    const locked = '203.0.113.50';
    await lockOut(locked);
    // Bad signatures from it: refused as bad signatures (403), never a reason to lock anything.
    const tampered = signed.replace(/signature=[^&]+/, `signature=${'A'.repeat(43)}`);
    for (let i = 0; i < LIMIT + 5; i++) {
      expect((await get(api, tampered, via(locked))).status).toBe(403);
    }

    const issued = await api.ctx.tokens.issue(org.organization.id, { name: 'new' });
    for (const [what, headers] of [
      ['cached token', { ...bearer(cached), ...via(locked) }],
      ['token never used', { ...bearer(issued.token), ...via(locked) }],
      ['signed URL', via(locked)],
    ] as const) {
      const res = await get(api, what === 'signed URL' ? signed : download, headers);
      expect([what, res.status]).toEqual([what, 200]);
    }
    // And the guesses from it are still refused.
    expect((await get(api, download, { ...bearer(guess()), ...via(locked) })).status).toBe(429);
  });

  it('looks up a token issued before tokens carried a check like a guess while it is not cached', async () => {
    const locked = '203.0.113.77';
    await lockOut(locked);
    const legacy = await legacyToken(api, org);
    // Not cached, no check: from the locked address it is refused like a guess (docs/hardening/auth.md) …
    expect((await get(api, download, { ...bearer(legacy), ...via(locked) })).status).toBe(429);
    // … served from any other, and once cached, from the locked one too.
    expect((await get(api, download, { ...bearer(legacy), ...via('198.51.100.6') })).status).toBe(
      200,
    );
    expect((await get(api, download, { ...bearer(legacy), ...via(locked) })).status).toBe(200);
  });
});

describe('lookups of unknown tokens, across addresses (AUTH_LOOKUPS_PER_SECOND)', () => {
  it('bounds them whatever addresses they come from, and valid tokens pass meanwhile', async () => {
    const api = await startApi('authlookups', {
      env: { ...env, AUTH_FAILURE_LIMIT: '0', AUTH_LOOKUPS_PER_SECOND: '2' },
    });
    try {
      const org = await api.createOrg('lookups');
      /** 40 guesses at once, each from an address of its own; and `also`, among them. */
      const flood = (also?: Record<string, string>) =>
        Promise.all(
          Array.from({ length: 41 }, async (_, i) => {
            if (i === 20) return also ? (await get(api, '/media', also)).status : 0;
            const headers = { ...bearer(guess()), ...via(`192.0.2.${i + 1}`) };
            return (await get(api, '/media', headers)).status;
          }),
        );
      const finds = await dependencyCalls(api.url, 'mongodb', 'find');
      const statuses = (await flood()).filter((s) => s !== 0);
      const looked = statuses.filter((s) => s === 401).length;
      expect(statuses.filter((s) => s !== 401 && s !== 429)).toEqual([]);
      expect(looked).toBeLessThan(40);
      // Each 401 took one lookup; each 429 none.
      expect(await dependencyCalls(api.url, 'mongodb', 'find')).toBe(finds + looked);

      // Within another flood, a valid token never used before (so not cached) is served.
      const [valid, ...guesses] = await flood({ ...org.auth, ...via('192.0.2.200') }).then(
        (all) => [all[20]!, ...all.filter((_, i) => i !== 20)],
      );
      expect(guesses).toContain(429);
      expect(valid).toBe(200);
    } finally {
      await api.close();
    }
  });
});
