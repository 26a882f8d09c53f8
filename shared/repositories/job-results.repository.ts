/**
 * Job results stored until read (`job_results`): one document per stored
 * result, written before its object and removed after it, so that no
 * result object exists without its document; the workers' sweep finds
 * those whose expiry has passed. Removing the document is the claim that
 * gives its bytes back: of the reader and the sweep (or two sweeps), only
 * the one whose delete removed it does.
 */
import type { JobResultDoc, Models } from '../db/models';
import { db } from '../db/errors';

export type StoredResultEntry = Omit<JobResultDoc, '_id'> & { key: string };

const toEntry = (doc: JobResultDoc): StoredResultEntry => ({
  key: doc._id,
  jobId: doc.jobId,
  organizationId: doc.organizationId,
  bytes: doc.bytes,
  createdAt: doc.createdAt,
  expiresAt: doc.expiresAt,
});

export class JobResultsRepository {
  constructor(private readonly models: Pick<Models, 'JobResult'>) {}

  /**
   * Adds the entry; false when it is there already (an earlier attempt of
   * the same job stored it: its bytes are counted once).
   */
  async add(entry: StoredResultEntry): Promise<boolean> {
    const { key, ...rest } = entry;
    const result = await db(() =>
      this.models.JobResult.updateOne(
        { _id: key },
        { $setOnInsert: rest },
        { upsert: true },
      ).exec(),
    );
    return result.upsertedCount === 1;
  }

  /** Removes the entry: answered when this call removed it (the caller gives its bytes back). */
  async remove(key: string): Promise<StoredResultEntry | null> {
    const doc = await db(() => this.models.JobResult.findOneAndDelete({ _id: key }).lean().exec());
    return doc ? toEntry(doc) : null;
  }

  /** Entries whose expiry is past `now`, oldest first, at most `limit`. */
  async expired(now: Date, limit: number): Promise<StoredResultEntry[]> {
    const docs = await db(() =>
      this.models.JobResult.find({ expiresAt: { $lte: now } })
        .sort({ expiresAt: 1 })
        .limit(limit)
        .lean()
        .exec(),
    );
    return docs.map(toEntry);
  }

  /** When the organization's first stored result expires (null: none stored). */
  async nextExpiry(organizationId: number): Promise<Date | null> {
    const doc = await db(() =>
      this.models.JobResult.findOne({ organizationId }, { expiresAt: 1 })
        .sort({ expiresAt: 1 })
        .lean()
        .exec(),
    );
    return doc?.expiresAt ?? null;
  }

  /** Bytes of stored results per organization (one, or all): what reconcile compares the counters with. */
  async bytesByOrganization(organizationId: number | null): Promise<Map<number, number>> {
    const rows = await db(() =>
      this.models.JobResult.aggregate<{ _id: number; bytes: number }>([
        { $match: organizationId === null ? {} : { organizationId } },
        { $group: { _id: '$organizationId', bytes: { $sum: '$bytes' } } },
      ]).exec(),
    );
    return new Map(rows.map((r) => [r._id, r.bytes]));
  }

  /** Removes an organization's entries (offboarding, once its objects are gone). */
  async removeAllOf(organizationId: number): Promise<void> {
    await db(() => this.models.JobResult.deleteMany({ organizationId }).exec());
  }
}
