/**
 * The check a token carries (api/services/tokens.service.ts), over in-memory
 * repositories: a token the service issued is looked up without asking
 * `beforeLookup`; a guess (or a token made before the check existed) asks it
 * first, and a refusal means no lookup at all; a cached token asks nothing;
 * and the guard is told which lookups ended in a refused token.
 */
import { createHash, randomBytes } from 'node:crypto';
import { AuthCache } from '../../api/domain/auth-cache';
import { TokensService } from '../../api/services/tokens.service';
import type { OrganizationsRepository } from '../../shared/repositories/organizations.repository';
import type { StoredToken, TokensRepository } from '../../shared/repositories/tokens.repository';

function setup(options: { cache?: boolean; failLookups?: boolean } = {}) {
  const stored = new Map<string, StoredToken>();
  const calls = { lookups: 0, keys: 0 };
  const key = randomBytes(32);
  const tokens = {
    checkKey: () => {
      calls.keys++;
      return Promise.resolve(key);
    },
    insert: (t: Omit<StoredToken, 'revokedAt' | 'lastUsedAt' | 'createdAt'>) => {
      const full = { ...t, revokedAt: null, lastUsedAt: null, createdAt: new Date() };
      stored.set(t.tokenId, full);
      return Promise.resolve(full);
    },
    findByTokenId: (tokenId: string) => {
      calls.lookups++;
      if (options.failLookups) return Promise.reject(new Error('MongoDB is away'));
      return Promise.resolve(stored.get(tokenId) ?? null);
    },
    touch: () => Promise.resolve(),
  } as unknown as TokensRepository;
  const organizations = {
    findById: (id: number) =>
      Promise.resolve({ id, slug: 'acme', name: 'Acme', quotaBytes: null, rootFolderId: 2 }),
  } as unknown as OrganizationsRepository;
  const service = new TokensService(tokens, organizations, undefined, {
    cache: options.cache ? new AuthCache(60_000) : undefined,
  });
  const guard = {
    asked: 0,
    settled: [] as boolean[],
    refuse: false,
    beforeLookup: () => {
      guard.asked++;
      if (guard.refuse) return Promise.reject(new Error('refused by the guard'));
      return Promise.resolve((refused: boolean) => void guard.settled.push(refused));
    },
  };
  /** A token stored as the service stored them before the check: 32 random bytes. */
  const legacy = async () => {
    const tokenId = randomBytes(8).toString('hex');
    const token = `mst_${tokenId}_${randomBytes(32).toString('base64url')}`;
    await tokens.insert({
      tokenId,
      organizationId: 1,
      name: null,
      hash: createHash('sha256').update(token).digest('hex'),
      scopes: ['read'],
      expiresAt: null,
    });
    return token;
  };
  return { service, calls, guard, legacy };
}

const guess = () =>
  `mst_${randomBytes(8).toString('hex')}_${randomBytes(32).toString('base64url')}`;

it('issues tokens of the documented form, each carrying a check', async () => {
  const { service, guard } = setup();
  const { token } = await service.issue(1);
  expect(token).toMatch(/^mst_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/);
  expect(await service.verify(token, guard)).not.toBeNull();
  expect(guard.asked).toBe(0);
});

it('asks the guard before looking up a token without a valid check, and a refusal means no lookup', async () => {
  const { service, calls, guard } = setup();
  const { token } = await service.issue(1);
  expect(await service.verify(guess(), guard)).toBeNull();
  expect([guard.asked, calls.lookups, guard.settled]).toEqual([1, 1, [true]]);
  // A token whose secret was changed in one character has no valid check any more.
  const flipped = token.slice(0, -2) + (token.at(-2) === 'A' ? 'B' : 'A') + token.at(-1)!;
  expect(await service.verify(flipped, guard)).toBeNull();
  expect([guard.asked, calls.lookups]).toEqual([2, 2]);

  guard.refuse = true;
  await expect(service.verify(guess(), guard)).rejects.toThrow('refused by the guard');
  expect([guard.asked, calls.lookups]).toEqual([3, 2]);
  // An issued token does not ask, so a refusing guard does not refuse it.
  expect(await service.verify(token, guard)).not.toBeNull();
  expect(guard.asked).toBe(3);
});

it('looks up a token made before the check existed through the guard, told it was not refused', async () => {
  const { service, guard, legacy } = setup();
  expect(await service.verify(await legacy(), guard)).not.toBeNull();
  expect([guard.asked, guard.settled]).toEqual([1, [false]]);
});

it('asks nothing for a cached token, whatever the guard says', async () => {
  const { service, calls, guard, legacy } = setup({ cache: true });
  const old = await legacy();
  expect(await service.verify(old, guard)).not.toBeNull();
  guard.refuse = true;
  for (let i = 0; i < 3; i++) expect(await service.verify(old, guard)).not.toBeNull();
  expect([guard.asked, calls.lookups]).toEqual([1, 1]);
});

it('does not hold a failed lookup against the token (MongoDB failed, not the client)', async () => {
  const { service, guard } = setup({ failLookups: true });
  await expect(service.verify(guess(), guard)).rejects.toThrow('MongoDB is away');
  expect(guard.settled).toEqual([false]);
});

it('reads the check key once per process', async () => {
  const { service, calls } = setup();
  for (let i = 0; i < 3; i++) await service.issue(1);
  await service.verify(guess(), { beforeLookup: () => Promise.resolve(() => undefined) });
  expect(calls.keys).toBe(1);
});
