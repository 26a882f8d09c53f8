/**
 * API tokens: random, shown once, stored only as a SHA-256 hash, bound to one
 * organization, optionally expiring, revocable.
 *
 * A token reads `mst_<tokenId>_<secret>`: the public `tokenId` (64 random bits,
 * hex) finds the stored hash in one indexed lookup, and the hash of the whole
 * presented token is compared with it in constant time. The secret carries 256
 * random bits, so a fast hash is enough (no password-style stretching needed).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { SCOPES, type Scope } from '@shared/db/models';
import { Errors } from '@shared/errors';
import type {
  Organization,
  OrganizationsRepository,
} from '@shared/repositories/organizations.repository';
import type { StoredToken, TokensRepository } from '@shared/repositories/tokens.repository';
import type { InvalidationPublisher } from '@shared/queue/invalidations';
import type { AuthCache } from './auth-cache';

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

/** `lastUsedAt` is written at most this often per token (and API process). */
export const TOUCH_EVERY_MS = 60_000;

export class TokensService {
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
    const token = `mst_${tokenId}_${randomBytes(32).toString('base64url')}`;
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

  /** The principal a token stands for, or null when it is malformed, unknown, expired or revoked. */
  async verify(token: string): Promise<Principal | null> {
    const match = TOKEN_PATTERN.exec(token);
    if (!match) return null;
    const { cache } = this.options;
    const tokenId = match[1]!;
    const findToken = () => this.tokens.findByTokenId(tokenId);
    const stored = await (cache ? cache.token(tokenId, findToken) : findToken());
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
