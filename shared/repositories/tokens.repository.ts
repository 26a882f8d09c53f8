import { randomBytes } from 'node:crypto';
import type { ApiTokenDoc, Models } from '../db/models';
import { db, isDuplicateKey } from '../db/errors';

/** The setting (`settings` collection) holding the key of tokens' check. */
export const TOKEN_CHECK_KEY = 'token-check-key';

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
  constructor(private readonly models: Pick<Models, 'ApiToken' | 'Setting'>) {}

  /**
   * The key of the check every token carries (256 random bits): made and
   * stored by the first process that asks, read by every other (the `_id`
   * decides between two first ones).
   */
  async checkKey(): Promise<Buffer> {
    const { Setting } = this.models;
    const made = randomBytes(32).toString('base64url');
    const doc = await db(() =>
      Setting.findOneAndUpdate(
        { _id: TOKEN_CHECK_KEY },
        { $setOnInsert: { value: made } },
        { upsert: true, returnDocument: 'after', lean: true },
      )
        .exec()
        .catch((err: unknown) => {
          if (isDuplicateKey(err)) return Setting.findById(TOKEN_CHECK_KEY).lean().exec();
          throw err;
        }),
    );
    if (!doc) throw new Error(`setting ${TOKEN_CHECK_KEY} was not returned`);
    return Buffer.from(doc.value, 'base64url');
  }

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
