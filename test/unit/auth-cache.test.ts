/**
 * The API's authentication cache (api/domain/auth-cache.ts) under
 * TokensService, over in-memory repositories and a clock the test moves:
 * a token is read once per cache lifetime, `lastUsedAt` is written at most
 * once a minute, expiry stays exact, invalidations drop entries (and a read
 * in flight meanwhile is not kept), and the cache stays bounded. The replicas
 * and Redis are in test/integration/api/auth-cache.test.ts.
 */
import { createHash } from 'node:crypto';
import { AuthCache, BoundedCache } from '../../api/domain/auth-cache';
import { TokensService } from '../../api/services/tokens.service';
import type {
  Organization,
  OrganizationsRepository,
} from '../../shared/repositories/organizations.repository';
import type { StoredToken, TokensRepository } from '../../shared/repositories/tokens.repository';

const TOKEN_ID = '0123456789abcdef';
const TOKEN = `mst_${TOKEN_ID}_${'a'.repeat(43)}`;

function setup(options: { ttlMs?: number; expiresAt?: Date | null } = {}) {
  let now = Date.parse('2026-01-01T00:00:00Z');
  const clock = () => now;
  const stored: StoredToken = {
    tokenId: TOKEN_ID,
    organizationId: 7,
    name: 'test',
    hash: createHash('sha256').update(TOKEN).digest('hex'),
    scopes: ['read'],
    expiresAt: options.expiresAt ?? null,
    revokedAt: null,
    lastUsedAt: null,
    createdAt: new Date(now),
  };
  const organization: Organization = {
    id: 7,
    slug: 'acme',
    name: 'Acme',
    quotaBytes: null,
    rootFolderId: 8,
  };
  const calls = { token: 0, organization: 0, touch: 0 };
  let hold: Promise<void> | undefined;
  const tokens = {
    findByTokenId: async () => {
      calls.token++;
      await hold;
      return { ...stored };
    },
    touch: () => {
      calls.touch++;
      return Promise.resolve();
    },
  } as unknown as TokensRepository;
  const organizations = {
    findById: () => {
      calls.organization++;
      return Promise.resolve({ ...organization });
    },
  } as unknown as OrganizationsRepository;
  const cache = new AuthCache(options.ttlMs ?? 30_000, 100, clock);
  const service = new TokensService(tokens, organizations, () => new Date(now), { cache });
  return {
    service,
    cache,
    calls,
    stored,
    advance: (ms: number) => (now += ms),
    holdReads: () => {
      let release!: () => void;
      hold = new Promise((resolve) => (release = resolve));
      return () => {
        hold = undefined;
        release();
      };
    },
  };
}

it('reads the token and its organization once per cache lifetime', async () => {
  const { service, calls, advance } = setup({ ttlMs: 30_000 });
  for (let i = 0; i < 5; i++) expect(await service.verify(TOKEN)).not.toBeNull();
  expect([calls.token, calls.organization]).toEqual([1, 1]);
  advance(30_000);
  expect(await service.verify(TOKEN)).not.toBeNull();
  expect([calls.token, calls.organization]).toEqual([2, 2]);
});

it('writes lastUsedAt at most once a minute per token', async () => {
  const { service, calls, advance } = setup({ ttlMs: 600_000 });
  await service.verify(TOKEN);
  advance(59_000);
  await service.verify(TOKEN);
  expect(calls.touch).toBe(1);
  advance(1_000);
  await service.verify(TOKEN);
  expect(calls.touch).toBe(2);
});

it('refuses a cached token once it expires, and a wrong secret for a cached id', async () => {
  const { service, advance } = setup({ expiresAt: new Date(Date.parse('2026-01-01T00:00:10Z')) });
  expect(await service.verify(TOKEN)).not.toBeNull();
  expect(await service.verify(`mst_${TOKEN_ID}_${'b'.repeat(43)}`)).toBeNull();
  advance(10_000);
  expect(await service.verify(TOKEN)).toBeNull();
});

it('drops a token, or an organization with its tokens, when told', async () => {
  const { service, cache, calls, stored } = setup();
  await service.verify(TOKEN);
  cache.invalidate({ organizationId: 7 });
  await service.verify(TOKEN);
  expect([calls.token, calls.organization]).toEqual([2, 2]);
  cache.invalidate({ tokenId: TOKEN_ID });
  await service.verify(TOKEN);
  expect([calls.token, calls.organization]).toEqual([3, 2]);
  stored.revokedAt = new Date();
  expect(await service.verify(TOKEN)).not.toBeNull(); // cached: not told yet
  cache.invalidate({ tokenId: TOKEN_ID });
  expect(await service.verify(TOKEN)).toBeNull();
});

it('does not keep a read that was in flight when an invalidation came', async () => {
  const { service, cache, calls, holdReads } = setup();
  const release = holdReads();
  const verifying = service.verify(TOKEN);
  cache.invalidate({ tokenId: TOKEN_ID });
  release();
  expect(await verifying).not.toBeNull();
  await service.verify(TOKEN);
  expect(calls.token).toBe(2);
});

it('keeps at most its bound, the least recently used out first', () => {
  const cache = new BoundedCache<string, number>(2, 1_000);
  cache.set('a', 1);
  cache.set('b', 2);
  expect(cache.get('a')).toBe(1); // a is now the most recent
  cache.set('c', 3);
  expect([cache.get('a'), cache.get('b'), cache.get('c'), cache.size]).toEqual([
    1,
    undefined,
    3,
    2,
  ]);
});
