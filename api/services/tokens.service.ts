/**
 * API tokens: random, shown once, stored only as a SHA-256 hash, bound to one
 * organization, optionally expiring, revocable.
 *
 * A token reads `mst_<tokenId>_<secret>`: the public `tokenId` (64 random bits,
 * hex) finds the stored hash in one indexed lookup, and the hash of the whole
 * presented token is compared with it in constant time. The secret (32 bytes,
 * base64url) is 192 random bits and a 64-bit check: the first 8 bytes of
 * HMAC-SHA256, under a key the service keeps in MongoDB (`settings`), of
 * `mst_<tokenId>_` and the random bytes. The check tells a token this service
 * issued from a guessed one without a database lookup, so guesses can be
 * limited (`verify`'s `beforeLookup`) without ever refusing a real token.
 * Tokens issued before the check existed (32 random bytes) still verify; they
 * are looked up like guesses when not cached. 192 random bits are enough for a
 * fast hash (no password-style stretching needed).
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { SCOPES, type Scope } from '@shared/db/models';
import { Errors } from '@shared/errors';
import type {
  Organization,
  OrganizationsRepository,
} from '@shared/repositories/organizations.repository';
import type { StoredToken, TokensRepository } from '@shared/repositories/tokens.repository';
import type { InvalidationPublisher } from '@shared/queue/invalidations';
import type { AuthCache } from '../domain/auth-cache';

const TOKEN_PATTERN = /^mst_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/;

export type { Scope };
export { SCOPES };

export interface IssuedToken {
  token: string;
  tokenId: string;
  scopes: Scope[];
  expiresAt: string | null;
}

export interface TokenInfo {
  tokenId: string;
  name: string | null;
  organizationId: number;
  scopes: Scope[];
  createdAt: string;
  expiresAt: string | null;
  revokedAt: string | null;
  lastUsedAt: string | null;
  status: 'active' | 'expired' | 'revoked';
}

export interface Principal {
  organization: Organization;
  tokenId: string;
  /** What the token may do. */
  scopes: ReadonlySet<Scope>;
}

/** A token's scopes; tokens made before scopes existed may do everything. */
const scopesOf = (t: StoredToken): Scope[] => t.scopes ?? [...SCOPES];

const hashToken = (token: string) => createHash('sha256').update(token).digest('hex');

/** A secret's bytes: this many random ones, then the check. */
const RANDOM_BYTES = 24;
const SECRET_BYTES = 32;

/** The check of a token: the first 8 bytes of HMAC-SHA256(key, `mst_<tokenId>_` + random bytes). */
const checkOf = (key: Buffer, tokenId: string, random: Buffer): Buffer =>
  createHmac('sha256', key)
    .update(`mst_${tokenId}_`)
    .update(random)
    .digest()
    .subarray(0, SECRET_BYTES - RANDOM_BYTES);

/**
 * Called before a token without a valid check, and not cached, is looked up
 * in MongoDB: may refuse (reject) so that no lookup is made; otherwise
 * resolves to a function told whether the token was then refused (unknown,
 * wrong secret, expired, revoked; not when the lookup itself failed).
 */
export type BeforeLookup = () => Promise<(refused: boolean) => void>;

/** `lastUsedAt` is written at most this often per token (and API process). */
export const TOUCH_EVERY_MS = 60_000;

export class TokensService {
  /** The check's key, read (or made) once per process. */
  private checkKey: Promise<Buffer> | undefined;

  constructor(
    private readonly tokens: TokensRepository,
    private readonly organizations: OrganizationsRepository,
    private readonly now: () => Date = () => new Date(),
    private readonly options: {
      /** Tokens and organizations kept in this process (the API's; none in the CLI). */
      cache?: AuthCache | undefined;
      /** Tells every API replica of a revocation or a scope change. */
      invalidations?: InvalidationPublisher | undefined;
    } = {},
  ) {}

  async issue(
    organizationId: number,
    options: { name?: string | null; expiresInMs?: number | null; scopes?: Scope[] } = {},
  ): Promise<IssuedToken> {
    const scopes = SCOPES.filter((s) => (options.scopes ?? SCOPES).includes(s));
    if (scopes.length === 0) throw Errors.badRequest('A token needs at least one scope');
    const tokenId = randomBytes(8).toString('hex');
    const random = randomBytes(RANDOM_BYTES);
    const check = checkOf(await this.key(), tokenId, random);
    const token = `mst_${tokenId}_${Buffer.concat([random, check]).toString('base64url')}`;
    const expiresAt = options.expiresInMs
      ? new Date(this.now().getTime() + options.expiresInMs)
      : null;
    await this.tokens.insert({
      tokenId,
      organizationId,
      name: options.name ?? null,
      hash: hashToken(token),
      scopes,
      expiresAt,
    });
    return { token, tokenId, scopes, expiresAt: expiresAt?.toISOString() ?? null };
  }

  private key(): Promise<Buffer> {
    this.checkKey ??= this.tokens.checkKey().catch((err: unknown) => {
      this.checkKey = undefined; // asked again next time
      throw err;
    });
    return this.checkKey;
  }

  /** Whether the token carries a valid check: this service issued it (it may be revoked since). */
  private async checked(tokenId: string, secret: string): Promise<boolean> {
    const bytes = Buffer.from(secret, 'base64url');
    if (bytes.length !== SECRET_BYTES) return false;
    let key: Buffer;
    try {
      key = await this.key();
    } catch {
      return false; // MongoDB is away: the lookup that follows says so
    }
    const expected = checkOf(key, tokenId, bytes.subarray(0, RANDOM_BYTES));
    return timingSafeEqual(bytes.subarray(RANDOM_BYTES), expected);
  }

  /**
   * The principal a token stands for, or null when it is malformed, unknown,
   * expired or revoked. A token found in the cache needs no lookup; one with
   * a valid check is looked up at once; any other passes `beforeLookup`
   * first (which may refuse it).
   */
  async verify(
    token: string,
    guard: { beforeLookup?: BeforeLookup | undefined } = {},
  ): Promise<Principal | null> {
    const match = TOKEN_PATTERN.exec(token);
    if (!match) return null;
    const { cache } = this.options;
    const tokenId = match[1]!;
    let settle: ((refused: boolean) => void) | undefined;
    const findToken = async () => {
      const { beforeLookup } = guard;
      if (beforeLookup && !(await this.checked(tokenId, match[2]!))) settle = await beforeLookup();
      return this.tokens.findByTokenId(tokenId);
    };
    try {
      const stored = await (cache ? cache.token(tokenId, findToken) : findToken());
      const principal = await this.principalOf(token, stored);
      settle?.(principal === null);
      return principal;
    } catch (err) {
      settle?.(false); // MongoDB failed, not the token
      throw err;
    }
  }

  private async principalOf(token: string, stored: StoredToken | null): Promise<Principal | null> {
    const { cache } = this.options;
    // Hash even when nothing is stored, so an unknown id costs the same time.
    const presented = Buffer.from(hashToken(token), 'hex');
    const expected = Buffer.from(stored?.hash ?? '0'.repeat(64), 'hex');
    const equal = expected.length === presented.length && timingSafeEqual(presented, expected);
    if (!stored || !equal || this.statusOf(stored) !== 'active') return null;
    const findOrganization = () => this.organizations.findById(stored.organizationId);
    const organization = await (cache
      ? cache.organization(stored.organizationId, findOrganization)
      : findOrganization());
    if (!organization) return null;
    this.touch(stored);
    return { organization, tokenId: stored.tokenId, scopes: new Set(scopesOf(stored)) };
  }

  /** Records the token's use, at most once per TOUCH_EVERY_MS; never fails the request. */
  private touch(stored: StoredToken): void {
    const now = this.now();
    if (stored.lastUsedAt && now.getTime() - stored.lastUsedAt.getTime() < TOUCH_EVERY_MS) return;
    // The cached copy remembers it, so the next requests skip the write.
    stored.lastUsedAt = now;
    void this.tokens.touch(stored.tokenId, now).catch(() => undefined);
  }

  async revoke(tokenId: string): Promise<TokenInfo> {
    const stored = await this.tokens.revoke(tokenId, this.now());
    if (!stored) throw Errors.notFound(`No token with id "${tokenId}"`);
    await this.changed(tokenId);
    return this.info(stored);
  }

  /** Replaces a token's scopes (at least one). */
  async setScopes(tokenId: string, scopes: Scope[]): Promise<TokenInfo> {
    const kept = SCOPES.filter((s) => scopes.includes(s));
    if (kept.length === 0) throw Errors.badRequest('A token needs at least one scope');
    const stored = await this.tokens.setScopes(tokenId, kept);
    if (!stored) throw Errors.notFound(`No token with id "${tokenId}"`);
    await this.changed(tokenId);
    return this.info(stored);
  }

  /** Drops the token from this process's cache and every replica's. */
  private async changed(tokenId: string): Promise<void> {
    this.options.cache?.invalidate({ tokenId });
    await this.options.invalidations?.publish({ tokenId });
  }

  async list(organizationId: number): Promise<TokenInfo[]> {
    return (await this.tokens.listByOrganization(organizationId)).map((t) => this.info(t));
  }

  private statusOf(t: StoredToken): TokenInfo['status'] {
    if (t.revokedAt) return 'revoked';
    if (t.expiresAt && t.expiresAt.getTime() <= this.now().getTime()) return 'expired';
    return 'active';
  }

  private info(t: StoredToken): TokenInfo {
    return {
      tokenId: t.tokenId,
      name: t.name ?? null,
      organizationId: t.organizationId,
      scopes: scopesOf(t),
      createdAt: t.createdAt.toISOString(),
      expiresAt: t.expiresAt?.toISOString() ?? null,
      revokedAt: t.revokedAt?.toISOString() ?? null,
      lastUsedAt: t.lastUsedAt?.toISOString() ?? null,
      status: this.statusOf(t),
    };
  }
}
