/**
 * What each organization has recorded (bytes and files), kept beside the
 * records: reserved before records are written, released when they are
 * deleted. It is what the quota is checked against, atomically: a reservation
 * that would pass the quota is refused, so the recorded bytes never exceed it.
 * A crash between a record write and its counter leaves the counter off;
 * `reconcile` compares it with the records and `--fix` sets it right.
 */
import type { Models } from '../db/models';
import { db, isDuplicateKey } from '../db/errors';

export interface Usage {
  bytes: number;
  files: number;
}

export class UsageRepository {
  constructor(private readonly models: Pick<Models, 'Usage'>) {}

  async get(organizationId: number): Promise<Usage> {
    const doc = await db(() => this.models.Usage.findById(organizationId).lean().exec());
    return { bytes: doc?.bytes ?? 0, files: doc?.files ?? 0 };
  }

  /**
   * Counts `bytes` and `files` more for the organization, unless that would
   * pass `quota` (then nothing changes and the answer is false).
   */
  async reserve(organizationId: number, add: Usage, quota: number | null): Promise<boolean> {
    if (quota !== null && add.bytes > quota) return false;
    const inc = { $inc: { bytes: add.bytes, files: add.files } };
    const filter =
      quota === null
        ? { _id: organizationId }
        : { _id: organizationId, bytes: { $lte: quota - add.bytes } };
    for (let attempt = 0; attempt < 2; attempt++) {
      const result = await db(() => this.models.Usage.updateOne(filter, inc).exec());
      if (result.matchedCount === 1) return true;
      // No counter yet (its first record), or over the quota. Of concurrent first
      // records one creates the counter; the others find it made and try again.
      try {
        await db(() => this.models.Usage.create({ _id: organizationId, bytes: 0, files: 0 }));
      } catch (err) {
        if (!isDuplicateKey(err)) throw err;
      }
    }
    return false;
  }

  async release(organizationId: number, remove: Usage): Promise<void> {
    await db(() =>
      this.models.Usage.updateOne(
        { _id: organizationId },
        { $inc: { bytes: -remove.bytes, files: -remove.files } },
      ).exec(),
    );
  }

  /** Sets the counter (reconciliation, from the records themselves). */
  async set(organizationId: number, usage: Usage): Promise<void> {
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

  async remove(organizationId: number): Promise<void> {
    await db(() => this.models.Usage.deleteOne({ _id: organizationId }).exec());
  }
}
