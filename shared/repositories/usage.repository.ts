/**
 * What each organization has stored (bytes and files), kept beside the
 * records: reserved before records (and rendered variants) are written,
 * released when they are deleted. It is what the quota is checked against,
 * atomically: a reservation that would pass the quota is refused, so the
 * counted bytes never exceed it. `bytes` counts the files and their variants
 * (`variantBytes` is the variants' share); job results stored until read
 * (`resultBytes`) are counted apart, against a bound of their own.
 * A crash between a write and its counter leaves the counter off;
 * `reconcile` compares it with the records and `--fix` sets it right.
 */
import type { Models } from '../db/models';
import { db, isDuplicateKey } from '../db/errors';

export interface Usage {
  bytes: number;
  files: number;
}

/** A change of the counters: `variantBytes`, when given, is the variants' share of `bytes`. */
export interface UsageChange extends Usage {
  variantBytes?: number;
}

/** Every counter of an organization. */
export interface UsageCounters extends Usage {
  variantBytes: number;
  resultBytes: number;
}

export class UsageRepository {
  constructor(private readonly models: Pick<Models, 'Usage'>) {}

  async get(organizationId: number): Promise<Usage> {
    const doc = await db(() => this.models.Usage.findById(organizationId).lean().exec());
    return { bytes: doc?.bytes ?? 0, files: doc?.files ?? 0 };
  }

  /** Every counter of the organization (reconcile, the usage report). */
  async counters(organizationId: number): Promise<UsageCounters> {
    const doc = await db(() => this.models.Usage.findById(organizationId).lean().exec());
    return {
      bytes: doc?.bytes ?? 0,
      files: doc?.files ?? 0,
      variantBytes: doc?.variantBytes ?? 0,
      resultBytes: doc?.resultBytes ?? 0,
    };
  }

  /**
   * Counts `bytes` and `files` more for the organization, unless that would
   * pass `quota` (then nothing changes and the answer is false).
   */
  async reserve(organizationId: number, add: UsageChange, quota: number | null): Promise<boolean> {
    if (quota !== null && add.bytes > quota) return false;
    const inc = { $inc: { bytes: add.bytes, files: add.files, ...variantShare(add) } };
    const filter =
      quota === null
        ? { _id: organizationId }
        : { _id: organizationId, bytes: { $lte: quota - add.bytes } };
    for (let attempt = 0; attempt < 2; attempt++) {
      const result = await db(() => this.models.Usage.updateOne(filter, inc).exec());
      if (result.matchedCount === 1) return true;
      // No counter yet (its first record), or over the quota.
      try {
        await db(() => this.models.Usage.create({ _id: organizationId, bytes: 0, files: 0 }));
      } catch (err) {
        if (!isDuplicateKey(err)) throw err;
        if (quota !== null) return false; // it exists: the quota is what stopped it
      }
    }
    return false;
  }

  async release(organizationId: number, remove: UsageChange): Promise<void> {
    const variantBytes = remove.variantBytes ? { variantBytes: -remove.variantBytes } : {};
    await db(() =>
      this.models.Usage.updateOne(
        { _id: organizationId },
        { $inc: { bytes: -remove.bytes, files: -remove.files, ...variantBytes } },
      ).exec(),
    );
  }

  /**
   * Counts `bytes` more of stored job results for the organization, unless
   * its results would then pass `max` (false: nothing changes).
   */
  async reserveResult(organizationId: number, bytes: number, max: number): Promise<boolean> {
    if (bytes > max) return false;
    // Counters made before results were counted have no `resultBytes`: none stored.
    const filter = {
      _id: organizationId,
      $or: [{ resultBytes: { $lte: max - bytes } }, { resultBytes: { $exists: false } }],
    };
    for (let attempt = 0; attempt < 3; attempt++) {
      const result = await db(() =>
        this.models.Usage.updateOne(filter, { $inc: { resultBytes: bytes } }).exec(),
      );
      if (result.matchedCount === 1) return true;
      if (await db(() => this.models.Usage.exists({ _id: organizationId }).exec())) return false;
      try {
        await db(() => this.models.Usage.create({ _id: organizationId, bytes: 0, files: 0 }));
      } catch (err) {
        // Another request made it meanwhile: try the update again.
        if (!isDuplicateKey(err)) throw err;
      }
    }
    return false;
  }

  async releaseResult(organizationId: number, bytes: number): Promise<void> {
    await db(() =>
      this.models.Usage.updateOne(
        { _id: organizationId },
        { $inc: { resultBytes: -bytes } },
      ).exec(),
    );
  }

  /** Sets the counters (reconciliation, from the records themselves). */
  async set(organizationId: number, usage: Usage | UsageCounters): Promise<void> {
    await db(() =>
      this.models.Usage.updateOne(
        { _id: organizationId },
        { $set: usage },
        { upsert: true },
      ).exec(),
    );
  }

  /** Every organization's counter. */
  async all(): Promise<Map<number, Usage>> {
    const docs = await db(() => this.models.Usage.find().lean().exec());
    return new Map(docs.map((d) => [d._id, { bytes: d.bytes, files: d.files }]));
  }

  /** Every organization's counters, results and variants included. */
  async allCounters(): Promise<Map<number, UsageCounters>> {
    const docs = await db(() => this.models.Usage.find().lean().exec());
    return new Map(
      docs.map((d) => [
        d._id,
        {
          bytes: d.bytes,
          files: d.files,
          variantBytes: d.variantBytes ?? 0,
          resultBytes: d.resultBytes ?? 0,
        },
      ]),
    );
  }

  async remove(organizationId: number): Promise<void> {
    await db(() => this.models.Usage.deleteOne({ _id: organizationId }).exec());
  }
}

function variantShare(change: UsageChange): { variantBytes?: number } {
  return change.variantBytes ? { variantBytes: change.variantBytes } : {};
}
