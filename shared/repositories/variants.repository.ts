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
  /** The variant asked for, when it is stored (written: a booked one is not served). */
  variant: StoredVariant | null;
  /**
   * The variant asked for is booked and not yet written (its render has
   * answered; its worker writes it after): until when its writer holds it.
   */
  pendingUntil?: Date;
  /** The booked variant, when it is booked (`pendingUntil`). */
  booked?: StoredVariant;
  /** How many variants the record has (booked ones included: they count in the bound). */
  variants: number;
}

/** A booked variant whose writer's hold has run out (reconcile): its record's key and the variant. */
export interface UnwrittenVariant {
  organizationId: number;
  /** The source's key. */
  key: string;
  variant: StoredVariant;
  pendingUntil: Date;
}

const toStored = (v: StoredVariant): StoredVariant => ({
  id: v.id,
  key: v.key,
  mimetype: v.mimetype,
  bytes: v.bytes,
  width: v.width,
  height: v.height,
});

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
      variant: v && !v.pendingUntil ? toStored(v) : null,
      ...(v?.pendingUntil ? { pendingUntil: v.pendingUntil, booked: toStored(v) } : {}),
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
    /** Booked only (its object is written after, then `settle`d): until when the writer holds it. */
    pendingUntil?: Date,
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
        {
          $push: {
            variants: {
              ...variant,
              createdAt: new Date(),
              ...(pendingUntil ? { pendingUntil } : {}),
            },
          },
        },
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
    return (doc.variants ?? []).map(toStored);
  }

  /**
   * A booked variant's object is written: the booking becomes the variant
   * (served from now on). False when the booking is gone (the source deleted,
   * its variants deleted, or its hold ran out and another render took it
   * over): the object is then the writer's to remove, its bytes are not (they
   * were given back by whoever took the booking).
   */
  async settle(
    organizationId: number,
    key: string,
    variantId: string,
    pendingUntil: Date,
  ): Promise<boolean> {
    const result = await db(() =>
      this.models.Media.updateOne(
        {
          organizationId,
          key,
          variants: { $elemMatch: { id: variantId, pendingUntil } },
        },
        { $unset: { 'variants.$.pendingUntil': 1 } },
        { timestamps: false },
      ).exec(),
    );
    return result.modifiedCount > 0;
  }

  /**
   * Takes a booking off its record, only the one booked until `pendingUntil`
   * (its write failed, or its writer died and its hold ran out); true when it
   * was there (its bytes are then the caller's to give back).
   */
  async dropBooking(
    organizationId: number,
    key: string,
    variantId: string,
    pendingUntil: Date,
  ): Promise<boolean> {
    const result = await db(() =>
      this.models.Media.updateOne(
        { organizationId, key, variants: { $elemMatch: { id: variantId, pendingUntil } } },
        { $pull: { variants: { id: variantId, pendingUntil } } },
        { timestamps: false },
      ).exec(),
    );
    return result.modifiedCount > 0;
  }

  /** Bookings whose writer's hold ran out before `before` (one organization's, or all). */
  async unwrittenBefore(before: Date, organizationId: number | null): Promise<UnwrittenVariant[]> {
    const docs = await db(() =>
      this.models.Media.find(
        {
          ...(organizationId === null ? {} : { organizationId }),
          'variants.pendingUntil': { $lt: before },
        },
        { organizationId: 1, key: 1, variants: 1, _id: 0 },
      )
        .lean()
        .exec(),
    );
    return docs.flatMap((d) =>
      (d.variants ?? [])
        .filter((v) => v.pendingUntil && v.pendingUntil < before)
        .map((v) => ({
          organizationId: d.organizationId,
          key: d.key,
          variant: toStored(v),
          pendingUntil: v.pendingUntil!,
        })),
    );
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
