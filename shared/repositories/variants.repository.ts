/**
 * Renders kept on their source's record (`variants`): looked up with the
 * record in one query (a stored variant is served at the cost of a
 * download), added atomically by the worker that rendered it, and only while
 * the record has fewer than RENDER_MAX_VARIANTS (the same update checks
 * it, so concurrent renders never pass it). Their bytes count in the
 * organization's usage and quota (docs/renders.md): the worker reserves them
 * before it writes the object, and whoever removes a variant gives them back.
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

/** `full`: the record has `max` variants already; `gone`: the record is deleted or being deleted. */
export type AddVariantOutcome = 'added' | 'present' | 'gone' | 'full';

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
   * the file did not change), unless the record has `max` variants already.
   * `present`: an earlier attempt added it; `gone`: the record is deleted or
   * being deleted; `full`: at the bound (for `gone` and `full` the caller
   * removes the object it wrote).
   */
  async add(
    organizationId: number,
    key: string,
    variant: StoredVariant,
    max: number,
  ): Promise<AddVariantOutcome> {
    const result = await db(() =>
      this.models.Media.updateOne(
        {
          organizationId,
          key,
          ...LIVE,
          'variants.id': { $ne: variant.id },
          // Fewer than `max` elements: the array has no element at index max - 1.
          [`variants.${max - 1}`]: { $exists: false },
        },
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
    if (!doc) return 'gone';
    return doc.variants?.some((x) => x.id === variant.id) ? 'present' : 'full';
  }

  /**
   * Takes every variant off a live record at once (DELETE /media/variants)
   * and answers them (their objects and bytes are the caller's to remove and
   * give back); null when there is no such record.
   */
  async removeAll(organizationId: number, key: string): Promise<StoredVariant[] | null> {
    const doc = await db(() =>
      this.models.Media.findOneAndUpdate(
        { organizationId, key, ...LIVE },
        { $unset: { variants: 1 } },
        { timestamps: false, projection: { variants: 1 }, returnDocument: 'before' },
      )
        .lean()
        .exec(),
    );
    if (!doc) return null;
    return (doc.variants ?? []).map((v) => ({
      id: v.id,
      key: v.key,
      mimetype: v.mimetype,
      bytes: v.bytes,
      width: v.width,
      height: v.height,
    }));
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
