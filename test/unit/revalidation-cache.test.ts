/**
 * What the API keeps for revalidations (api/domain/revalidation-cache.ts),
 * with a clock the test moves: entries by organization and key, a key's
 * invalidation dropping its file and its variants, an organization's
 * dropping all of its keys and no other's, a read in flight during an
 * invalidation not kept, the bound and the lifetime; and the token cache
 * ignoring a key's invalidation. The replicas and Redis are in
 * test/integration/api/revalidations.test.ts.
 */
import { AuthCache } from '../../api/domain/auth-cache';
import { RevalidationCache } from '../../api/domain/revalidation-cache';

const FILE = { etag: '"abc"', lastModified: 'Thu, 01 Jan 2026 00:00:00 GMT' };

function setup(maxEntries = 100, ttlMs = 60_000) {
  let now = 0;
  const cache = new RevalidationCache(maxEntries, ttlMs, () => now);
  return { cache, advance: (ms: number) => (now += ms) };
}

it('keeps a file and its variants by organization and key', () => {
  const { cache } = setup();
  cache.keepFile(cache.begin(), 1, 'acme/a.jpg', FILE);
  cache.keepVariant(cache.begin(), 1, 'acme/a.jpg', 'w40.webp', '"v1"');
  expect(cache.file(1, 'acme/a.jpg')).toEqual(FILE);
  expect(cache.variant(1, 'acme/a.jpg', 'w40.webp')).toBe('"v1"');
  expect(cache.variant(1, 'acme/a.jpg', 'w80.webp')).toBeUndefined();
  // Another organization asking for the same key finds nothing.
  expect(cache.file(2, 'acme/a.jpg')).toBeUndefined();
  expect(cache.variant(2, 'acme/a.jpg', 'w40.webp')).toBeUndefined();
});

it("drops a key's file and variants on its invalidation, and only that key", () => {
  const { cache } = setup();
  cache.keepFile(cache.begin(), 1, 'acme/a.jpg', FILE);
  cache.keepVariant(cache.begin(), 1, 'acme/a.jpg', 'w40.webp', '"v1"');
  cache.keepFile(cache.begin(), 1, 'acme/b.jpg', FILE);
  cache.invalidate({ organizationId: 1, key: 'acme/a.jpg' });
  expect(cache.file(1, 'acme/a.jpg')).toBeUndefined();
  expect(cache.variant(1, 'acme/a.jpg', 'w40.webp')).toBeUndefined();
  expect(cache.file(1, 'acme/b.jpg')).toEqual(FILE);
});

it("drops every key of an organization on its invalidation, no other's", () => {
  const { cache } = setup();
  cache.keepFile(cache.begin(), 1, 'acme/a.jpg', FILE);
  cache.keepFile(cache.begin(), 1, 'acme/b.jpg', FILE);
  cache.keepFile(cache.begin(), 2, 'beta/a.jpg', FILE);
  cache.invalidate({ organizationId: 1 });
  expect(cache.file(1, 'acme/a.jpg')).toBeUndefined();
  expect(cache.file(1, 'acme/b.jpg')).toBeUndefined();
  expect(cache.file(2, 'beta/a.jpg')).toEqual(FILE);
  cache.invalidate({ tokenId: 'x' }); // a token's: nothing of this cache, but kept reads restart
  expect(cache.file(2, 'beta/a.jpg')).toEqual(FILE);
  cache.clear();
  expect(cache.size).toBe(0);
});

it('does not keep a read that was in flight when an invalidation arrived', () => {
  const { cache } = setup();
  const generation = cache.begin();
  cache.invalidate({ organizationId: 1, key: 'acme/a.jpg' });
  cache.keepFile(generation, 1, 'acme/a.jpg', FILE);
  cache.keepVariant(generation, 1, 'acme/a.jpg', 'w40.webp', '"v1"');
  expect(cache.file(1, 'acme/a.jpg')).toBeUndefined();
  expect(cache.variant(1, 'acme/a.jpg', 'w40.webp')).toBeUndefined();
});

it('stays bounded (least recently used out first) and forgets after its lifetime', () => {
  const { cache, advance } = setup(2, 1_000);
  cache.keepFile(cache.begin(), 1, 'a', FILE);
  cache.keepFile(cache.begin(), 1, 'b', FILE);
  expect(cache.file(1, 'a')).toEqual(FILE); // a used last: b goes first
  cache.keepFile(cache.begin(), 1, 'c', FILE);
  expect(cache.size).toBe(2);
  expect(cache.file(1, 'b')).toBeUndefined();
  expect(cache.file(1, 'a')).toEqual(FILE);
  advance(1_001);
  expect(cache.file(1, 'a')).toBeUndefined();
  expect(cache.file(1, 'c')).toBeUndefined();
});

it('keeps nothing when off (0 entries)', () => {
  const { cache } = setup(0);
  cache.keepFile(cache.begin(), 1, 'a', FILE);
  expect(cache.file(1, 'a')).toBeUndefined();
  expect(cache.size).toBe(0);
});

it("the token cache ignores a key's invalidation (its organization's tokens stay)", async () => {
  const auth = new AuthCache(60_000);
  const organization = { id: 1 } as Parameters<AuthCache['organization']>[1] extends () => Promise<
    infer O
  >
    ? NonNullable<O>
    : never;
  let reads = 0;
  const load = () => {
    reads++;
    return Promise.resolve(organization);
  };
  await auth.organization(1, load);
  auth.invalidate({ organizationId: 1, key: 'acme/a.jpg' });
  await auth.organization(1, load);
  expect(reads).toBe(1);
  auth.invalidate({ organizationId: 1 });
  await auth.organization(1, load);
  expect(reads).toBe(2);
});
