/**
 * Renders kept on their source's record (`variants`): looked up with the
 * record in one query (a stored variant is served at the cost of a
 * download), added atomically by the worker that rendered it. Variants do
 * not count in the organization's usage or quota (docs/renders.md).
 */
import type { Models } from '../db/models';
import { db } from '../db/errors';
import type { StoredVariant } from '../jobs';
import { LIVE, toRecord, type MediaRecord } from './media.repository';

export interface RecordWithVariant {
  record: MediaRecord;
  /** The variant asked for, when it is stored. */
  variant: StoredVariant | null;
  /** How many variants the record has. */
  variants: number;
}

export type AddVariantOutcome = 'added' | 'present' | 'gone';

export class VariantsRepository {
  constructor(private readonly models: Pick<Models, 'Media'>) {}

  /** The live record of `key` in the organization, and its variant `variantId` if stored. */
  async find(
    organizationId: number,
    key: string,
    variantId: string,
  ): Promise<RecordWithVariant | null> {
    const doc = await db(() =>
      this.models.Media.findOne({ organizationId, key, ...LIVE })
        .lean()
        .exec(),
    );
    if (!doc) return null;
    const v = doc.variants?.find((x) => x.id === variantId);
    return {
      record: toRecord(doc),
      variant: v
        ? {
            id: v.id,
            key: v.key,
            mimetype: v.mimetype,
            bytes: v.bytes,
            width: v.width,
            height: v.height,
          }
        : null,
      variants: doc.variants?.length ?? 0,
    };
  }

  /**
   * Adds a variant to its live source record (its `updatedAt` is left alone:
   * the file did not change). `present`: an earlier attempt added it; `gone`:
   * the record is deleted or being deleted (the caller removes the object).
   */
  async add(
    organizationId: number,
    key: string,
    variant: StoredVariant,
  ): Promise<AddVariantOutcome> {
    const result = await db(() =>
      this.models.Media.updateOne(
        { organizationId, key, ...LIVE, 'variants.id': { $ne: variant.id } },
        { $push: { variants: { ...variant, createdAt: new Date() } } },
        { timestamps: false },
      ).exec(),
    );
    if (result.matchedCount > 0) return 'added';
    const doc = await db(() =>
      this.models.Media.findOne({ organizationId, key, ...LIVE }, { variants: 1 })
        .lean()
        .exec(),
    );
    return doc?.variants?.some((x) => x.id === variant.id) ? 'present' : 'gone';
  }

  /**
   * Takes a variant off its record (a render whose job failed as it was
   * added); true when it was there. The record's `updatedAt` is left alone.
   */
  async remove(organizationId: number, key: string, variantId: string): Promise<boolean> {
    const result = await db(() =>
      this.models.Media.updateOne(
        { organizationId, key, 'variants.id': variantId },
        { $pull: { variants: { id: variantId } } },
        { timestamps: false },
      ).exec(),
    );
    return result.modifiedCount > 0;
  }
}
