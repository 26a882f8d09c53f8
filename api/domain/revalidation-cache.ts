/**
 * What a revalidation (`If-None-Match` → 304) needs, kept in each API process
 * so it costs no MongoDB round trip once a key has been served: a file's
 * validators (its ETag and Last-Modified) and the ETags of its variants by
 * render options. The bytes behind a key never change, so an entry stays true
 * until the key disappears; every way a key disappears (a delete, a folder's
 * delete, an organization's offboarding, reconcile, a variants delete)
 * publishes `{ organizationId, key }` on the invalidation channel
 * (shared/queue/invalidations.ts) and every replica drops the key at once; an
 * organization's change or delete drops the organization's entries (its scan
 * policy may have changed). Pub/sub keeps nothing: a replica whose
 * subscription was lost clears everything, and while Redis is away an
 * entry's lifetime (AUTH_CACHE_MS, the bound the token cache lives by too)
 * bounds how long another replica may answer 304 for a deleted key.
 *
 * Entries are keyed by organization and key: another organization's request
 * never finds one (a signed URL's request carries the signing organization).
 * At most REVALIDATION_CACHE_ENTRIES keys (least recently used out first);
 * `0` turns the cache off. A record still waiting for its malware scan is not
 * kept (its verdict changes what is served), nor is a read that was in flight
 * when an invalidation arrived (the generation counter): it may predate it.
 */
import type { Invalidation } from '@shared/queue/invalidations';
import { BoundedCache } from './auth-cache';

/** A file's validators, as its download answers them. */
export interface FileValidators {
  /** The strong ETag, quoted. */
  etag: string;
  /** The `Last-Modified` header. */
  lastModified: string;
}

interface KeyEntry {
  organizationId: number;
  file?: FileValidators;
  /** Variant ETags (quoted) by the variant's options id. */
  variants: Map<string, string>;
}

/** What `begin` hands back, given to `keepFile`/`keepVariant` once the read is done. */
export type Generation = number;

export class RevalidationCache {
  private readonly keys: BoundedCache<string, KeyEntry>;
  private generation = 0;

  constructor(
    readonly maxEntries: number,
    ttlMs: number,
    now: () => number = Date.now,
  ) {
    this.keys = new BoundedCache(maxEntries, ttlMs, now);
  }

  get enabled(): boolean {
    return this.maxEntries > 0;
  }

  /** Taken before reading MongoDB: what is read is kept only if no invalidation came meanwhile. */
  begin(): Generation {
    return this.generation;
  }

  file(organizationId: number, key: string): FileValidators | undefined {
    return this.enabled ? this.keys.get(slot(organizationId, key))?.file : undefined;
  }

  variant(organizationId: number, key: string, variantId: string): string | undefined {
    return this.enabled
      ? this.keys.get(slot(organizationId, key))?.variants.get(variantId)
      : undefined;
  }

  keepFile(generation: Generation, organizationId: number, key: string, file: FileValidators) {
    const entry = this.entry(generation, organizationId, key);
    if (entry) entry.file = file;
  }

  keepVariant(
    generation: Generation,
    organizationId: number,
    key: string,
    variantId: string,
    etag: string,
  ) {
    this.entry(generation, organizationId, key)?.variants.set(variantId, etag);
  }

  invalidate(message: Invalidation): void {
    this.generation++;
    if ('key' in message) this.keys.delete(slot(message.organizationId, message.key));
    else if ('organizationId' in message) {
      this.keys.deleteWhere((e) => e.organizationId === message.organizationId);
    }
  }

  clear(): void {
    this.generation++;
    this.keys.clear();
  }

  get size(): number {
    return this.keys.size;
  }

  private entry(generation: Generation, organizationId: number, key: string) {
    if (!this.enabled || generation !== this.generation) return undefined;
    const at = slot(organizationId, key);
    let entry = this.keys.get(at);
    if (!entry) {
      entry = { organizationId, variants: new Map() };
      this.keys.set(at, entry);
    }
    return entry;
  }
}

// An organization id has no NUL: the first one ends it, so no two pairs share a slot.
const slot = (organizationId: number, key: string) => `${organizationId}\u0000${key}`;
