/**
 * What authentication reads, kept in each API process for a bounded time so
 * a request costs no MongoDB round trip: stored tokens by id and
 * organizations by id, each entry for at most AUTH_CACHE_MS, at most
 * `maxEntries` of each (least recently used first out). Revocations, scope
 * and quota changes and deletions arrive through Redis pub/sub
 * (shared/queue/invalidations.ts) and drop entries at once; while Redis is
 * away the lifetime bounds how stale an entry can be.
 *
 * A read from MongoDB that was in flight when an invalidation arrived is not
 * cached (the generation counter): it may predate the change.
 */
import type { Invalidation } from '@shared/queue/invalidations';
import type { Organization } from '@shared/repositories/organizations.repository';
import type { StoredToken } from '@shared/repositories/tokens.repository';

/** A map bounded in size (least recently used out first) and in age. */
export class BoundedCache<K, V> {
  private readonly entries = new Map<K, { value: V; expiresAt: number }>();

  constructor(
    private readonly maxEntries: number,
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  get(key: K): V | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    this.entries.delete(key);
    if (entry.expiresAt <= this.now()) return undefined;
    this.entries.set(key, entry); // most recently used last
    return entry.value;
  }

  set(key: K, value: V): void {
    this.entries.delete(key);
    this.entries.set(key, { value, expiresAt: this.now() + this.ttlMs });
    while (this.entries.size > this.maxEntries) {
      this.entries.delete(this.entries.keys().next().value as K);
    }
  }

  delete(key: K): void {
    this.entries.delete(key);
  }

  /** Drops every entry whose value matches. */
  deleteWhere(matches: (value: V) => boolean): void {
    for (const [key, { value }] of this.entries) if (matches(value)) this.entries.delete(key);
  }

  clear(): void {
    this.entries.clear();
  }

  get size(): number {
    return this.entries.size;
  }
}

/** Entries of each kind an API process keeps at most. */
export const AUTH_CACHE_ENTRIES = 10_000;

export class AuthCache {
  private readonly tokens: BoundedCache<string, StoredToken>;
  private readonly organizations: BoundedCache<number, Organization>;
  private generation = 0;

  constructor(ttlMs: number, maxEntries = AUTH_CACHE_ENTRIES, now: () => number = Date.now) {
    this.tokens = new BoundedCache(maxEntries, ttlMs, now);
    this.organizations = new BoundedCache(maxEntries, ttlMs, now);
  }

  /** Reads through the cache: `load` on a miss, its answer kept unless an invalidation came meanwhile. */
  async token(
    tokenId: string,
    load: () => Promise<StoredToken | null>,
  ): Promise<StoredToken | null> {
    const cached = this.tokens.get(tokenId);
    if (cached) return cached;
    const generation = this.generation;
    const loaded = await load();
    if (loaded && generation === this.generation) this.tokens.set(tokenId, loaded);
    return loaded;
  }

  async organization(
    id: number,
    load: () => Promise<Organization | null>,
  ): Promise<Organization | null> {
    const cached = this.organizations.get(id);
    if (cached) return cached;
    const generation = this.generation;
    const loaded = await load();
    if (loaded && generation === this.generation) this.organizations.set(id, loaded);
    return loaded;
  }

  invalidate(message: Invalidation): void {
    if ('key' in message) return; // a key's disappearance: nothing of authentication
    this.generation++;
    if ('tokenId' in message) {
      this.tokens.delete(message.tokenId);
    } else {
      this.organizations.delete(message.organizationId);
      this.tokens.deleteWhere((t) => t.organizationId === message.organizationId);
    }
  }

  clear(): void {
    this.generation++;
    this.tokens.clear();
    this.organizations.clear();
  }
}
