import type { ApiTokenDoc, Models } from '../db/models';
import { db } from '../db/errors';

export type StoredToken = Pick<
  ApiTokenDoc,
  | 'tokenId'
  | 'organizationId'
  | 'name'
  | 'hash'
  | 'scopes'
  | 'expiresAt'
  | 'revokedAt'
  | 'lastUsedAt'
  | 'createdAt'
>;

export class TokensRepository {
  constructor(private readonly models: Pick<Models, 'ApiToken'>) {}

  async insert(
    token: Omit<StoredToken, 'revokedAt' | 'lastUsedAt' | 'createdAt'>,
  ): Promise<StoredToken> {
    const doc = await db(() =>
      this.models.ApiToken.create({ ...token, revokedAt: null, lastUsedAt: null }),
    );
    return doc.toObject();
  }

  async findByTokenId(tokenId: string): Promise<StoredToken | null> {
    return db(() => this.models.ApiToken.findOne({ tokenId }).lean().exec());
  }

  /** Marks a token revoked; false when there is no such token. Revoking twice keeps the first time. */
  async revoke(tokenId: string, at = new Date()): Promise<StoredToken | null> {
    return db(async () => {
      await this.models.ApiToken.updateOne(
        { tokenId, revokedAt: null },
        { $set: { revokedAt: at } },
      ).exec();
      return this.models.ApiToken.findOne({ tokenId }).lean().exec();
    });
  }

  /** Replaces a token's scopes; null when there is no such token. */
  async setScopes(tokenId: string, scopes: StoredToken['scopes']): Promise<StoredToken | null> {
    return db(() =>
      this.models.ApiToken.findOneAndUpdate(
        { tokenId },
        { $set: { scopes } },
        { returnDocument: 'after', lean: true },
      ).exec(),
    );
  }

  async listByOrganization(organizationId: number): Promise<StoredToken[]> {
    return db(() =>
      this.models.ApiToken.find({ organizationId }).sort({ createdAt: 1 }).lean().exec(),
    );
  }

  /** Revokes every token of an organization not revoked yet; how many. */
  async revokeAllOf(organizationId: number, at = new Date()): Promise<number> {
    const result = await db(() =>
      this.models.ApiToken.updateMany(
        { organizationId, revokedAt: null },
        { $set: { revokedAt: at } },
      ).exec(),
    );
    return result.modifiedCount;
  }

  async removeAllOf(organizationId: number): Promise<number> {
    const result = await db(() => this.models.ApiToken.deleteMany({ organizationId }).exec());
    return result.deletedCount;
  }

  /** Best effort; a failure here must never fail the request. */
  async touch(tokenId: string, at = new Date()): Promise<void> {
    await this.models.ApiToken.updateOne({ tokenId }, { $set: { lastUsedAt: at } }).exec();
  }
}
