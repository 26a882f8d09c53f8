/**
 * What each organization has stored (bytes and files), kept beside the
 * records: the quota's count, checked atomically (a count that would pass the
 * quota is refused, so what is counted never exceeds it). `bytes` counts the
 * files and their rendered variants (`variantBytes` is the variants' share,
 * counted by `reserve` and given back by `release`); job results stored
 * until read (`resultBytes`) are counted apart, against a bound of their own.
 *
 * A writer books each file before writing its record (`book`, with the id the
 * record will carry): counted at once, and held as a pending booking until the
 * record is in (`settle`: still counted, no longer pending) or given back
 * when the write fails (`cancel`). A booking whose writer died between the
 * booking and the insert (a killed worker or API) expires: past its `until`
 * (USAGE_BOOKING_TTL_MS after it was made) with no record of its id, it is
 * given back by the next read of the count (`get`, `all`, `counts`, or a
 * booking the quota would refuse), so no reader sees it counted past its
 * expiry and no `reconcile --fix` is needed. A writer renews its bookings
 * before the insert once half their life has gone (`keep`), so none expires
 * under a writer still at work. Deleting a record gives its bytes back
 * (`release`). `reconcile` compares the count with the records and the
 * bookings in flight, and `--fix` sets it.
 */
import type { Models, PendingBookingDoc, UsageDoc } from '../db/models';
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

/** A file counted ahead of its record: given back on its own if no record of `id` comes by `until`. */
export interface Booking {
  organizationId: number;
  /** The id the record will carry. */
  id: number;
  usage: Usage;
  /** When it expires unless settled; `keep` moves it on. */
  until: Date;
}

/** USAGE_BOOKING_TTL_MS's default: far longer than any write takes from its booking to its record. */
export const DEFAULT_BOOKING_TTL_MS = 10 * 60_000;

export class UsageRepository {
  private readonly ttlMs: number;
  private readonly clock: () => Date;

  constructor(
    private readonly models: Pick<Models, 'Usage' | 'Media'>,
    options: { bookingTtlMs?: number; now?: () => Date } = {},
  ) {
    this.ttlMs = options.bookingTtlMs ?? DEFAULT_BOOKING_TTL_MS;
    this.clock = options.now ?? (() => new Date());
  }

  /** The organization's count (bookings past their expiry given back first). */
  async get(organizationId: number): Promise<Usage> {
    const { bytes, files } = await this.counters(organizationId);
    return { bytes, files };
  }

  /** Every counter of the organization (bookings past their expiry given back first). */
  async counters(organizationId: number): Promise<UsageCounters> {
    let doc = await this.read(organizationId);
    if (doc && (await this.expire(doc))) doc = await this.read(organizationId);
    return countersOf(doc);
  }

  /**
   * Counts a file whose record will carry `id`, unless that would pass
   * `quota` (then nothing changes and the answer is null); held as a pending
   * booking until `settle` or `cancel`, or its expiry.
   */
  async book(
    organizationId: number,
    id: number,
    usage: Usage,
    quota: number | null,
    /** When it expires, if not USAGE_BOOKING_TTL_MS from now (a direct upload's expiry). */
    options: { until?: Date } = {},
  ): Promise<Booking | null> {
    const until = options.until ?? new Date(this.clock().getTime() + this.ttlMs);
    const pending: PendingBookingDoc = { id, bytes: usage.bytes, files: usage.files, until };
    if (!(await this.count(organizationId, usage, quota, pending))) return null;
    return { organizationId, id, usage, until };
  }

  /**
   * Counts `bytes` and `files` more (a variant's bytes, say), with no booking
   * (nothing to expire: the caller gives it back itself), unless that would
   * pass `quota` (false).
   */
  reserve(organizationId: number, add: UsageChange, quota: number | null): Promise<boolean> {
    return this.count(organizationId, add, quota);
  }

  /**
   * Renews the bookings past half their life (the first file of a long
   * multi-file upload, say), just before their records are written, so none
   * expires under a writer still at work; one that expired meanwhile is
   * counted again, within the quota. False when the quota refuses one (the
   * caller cancels them all).
   */
  async keep(bookings: Booking[], quota: number | null): Promise<boolean> {
    const now = this.clock().getTime();
    for (const booking of bookings) {
      if (booking.until.getTime() - now > this.ttlMs / 2) continue;
      const until = new Date(now + this.ttlMs);
      const renewed = await db(() =>
        this.models.Usage.updateOne(
          { _id: booking.organizationId, pending: { $elemMatch: { id: booking.id } } },
          { $set: { 'pending.$.until': until } },
        ).exec(),
      );
      if (renewed.matchedCount === 0) {
        const pending = { id: booking.id, ...booking.usage, until };
        if (!(await this.count(booking.organizationId, booking.usage, quota, pending))) {
          return false;
        }
      }
      booking.until = until;
    }
    return true;
  }

  /** The bookings' records are written: they stay counted, no longer pending. */
  async settle(bookings: Booking[]): Promise<void> {
    await Promise.all(
      [...byOrganization(bookings)].map(([organizationId, ids]) =>
        db(() =>
          this.models.Usage.updateOne(
            { _id: organizationId },
            { $pull: { pending: { id: { $in: ids } } } },
          ).exec(),
        ),
      ),
    );
  }

  /**
   * Gives back bookings whose records will not be written. Each is given
   * back once: only while it is still pending (an expired one given back by
   * a read is not given back again).
   */
  async cancel(bookings: Booking[]): Promise<void> {
    await Promise.all(
      bookings.map((b) =>
        db(() =>
          this.models.Usage.updateOne(
            { _id: b.organizationId, pending: { $elemMatch: { id: b.id } } },
            {
              $pull: { pending: { id: b.id } },
              $inc: { bytes: -b.usage.bytes, files: -b.usage.files },
            },
          ).exec(),
        ),
      ),
    );
  }

  /**
   * Gives back what deleted records (or variants) counted (`recordIds`: the
   * records' ids, so that a booking of theirs still pending goes with them,
   * never to be given back again on its expiry).
   */
  async release(
    organizationId: number,
    remove: UsageChange,
    recordIds: number[] = [],
  ): Promise<void> {
    const variantBytes = remove.variantBytes ? { variantBytes: -remove.variantBytes } : {};
    await db(() =>
      this.models.Usage.updateOne(
        { _id: organizationId },
        {
          $inc: { bytes: -remove.bytes, files: -remove.files, ...variantBytes },
          ...(recordIds.length > 0 ? { $pull: { pending: { id: { $in: recordIds } } } } : {}),
        },
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

  /** Sets the counters (reconciliation, from the records and the bookings in flight). */
  async set(organizationId: number, usage: Usage | UsageCounters): Promise<void> {
    await db(() =>
      this.models.Usage.updateOne(
        { _id: organizationId },
        { $set: usage },
        { upsert: true },
      ).exec(),
    );
  }

  /** Every organization's count (bookings past their expiry given back first). */
  async all(): Promise<Map<number, Usage>> {
    const counts = await this.counts(null);
    return new Map(
      [...counts].map(([id, { counted }]) => [id, { bytes: counted.bytes, files: counted.files }]),
    );
  }

  /** Every organization's counters, results and variants included. */
  async allCounters(): Promise<Map<number, UsageCounters>> {
    const counts = await this.counts(null);
    return new Map([...counts].map(([id, { counted }]) => [id, counted]));
  }

  /**
   * The counters of one organization or all, and the part of them booked for
   * records not written yet (bookings past their expiry given back first):
   * what reconcile compares with the records.
   */
  async counts(
    organizationId: number | null,
  ): Promise<Map<number, { counted: UsageCounters; booked: Usage }>> {
    const find = () =>
      db(() =>
        this.models.Usage.find(organizationId === null ? {} : { _id: organizationId })
          .lean()
          .exec(),
      );
    let docs = await find();
    let expired = false;
    for (const doc of docs) if (await this.expire(doc)) expired = true;
    if (expired) docs = await find();
    const pendingIds = docs.flatMap((d) => (d.pending ?? []).map((p) => p.id));
    const recorded = await this.recordedIds(pendingIds);
    return new Map(
      docs.map((d) => {
        const booked = { bytes: 0, files: 0 };
        for (const p of d.pending ?? []) {
          if (recorded.has(p.id)) continue; // written, its settle on its way
          booked.bytes += p.bytes;
          booked.files += p.files;
        }
        return [d._id, { counted: countersOf(d), booked }];
      }),
    );
  }

  async remove(organizationId: number): Promise<void> {
    await db(() => this.models.Usage.deleteOne({ _id: organizationId }).exec());
  }

  private read(organizationId: number): Promise<UsageDoc | null> {
    return db(() => this.models.Usage.findById(organizationId).lean().exec());
  }

  /**
   * Counts `add`, with its booking when given, unless that would pass
   * `quota`; a refusal first gives back the organization's expired bookings
   * and tries once more.
   */
  private async count(
    organizationId: number,
    add: UsageChange,
    quota: number | null,
    pending?: PendingBookingDoc,
  ): Promise<boolean> {
    if (quota !== null && add.bytes > quota) return false;
    const update = {
      $inc: {
        bytes: add.bytes,
        files: add.files,
        ...(add.variantBytes ? { variantBytes: add.variantBytes } : {}),
      },
      ...(pending ? { $push: { pending } } : {}),
    };
    const filter =
      quota === null
        ? { _id: organizationId }
        : { _id: organizationId, bytes: { $lte: quota - add.bytes } };
    let expired = false;
    for (let attempt = 0; attempt < 4; attempt++) {
      const result = await db(() => this.models.Usage.updateOne(filter, update).exec());
      if (result.matchedCount === 1) return true;
      const doc = await this.read(organizationId);
      if (!doc) {
        // No counter yet (its first record). Of concurrent first records one
        // creates it; the others find it made and try again.
        try {
          await db(() => this.models.Usage.create({ _id: organizationId, bytes: 0, files: 0 }));
        } catch (err) {
          if (!isDuplicateKey(err)) throw err;
        }
        continue;
      }
      if (quota !== null && doc.bytes > quota - add.bytes) {
        // Over the quota, unless bookings that expired unrecorded hold some of it.
        if (expired || !(await this.expire(doc))) return false;
        expired = true;
      }
      // Otherwise the counter was made (or room given back) since: try again.
    }
    return false;
  }

  /**
   * Gives back the organization's bookings past their expiry whose record
   * never came (one with a record is only settled); true when there were any.
   * Each is taken by a conditional update, so a booking renewed, settled or
   * cancelled meanwhile is left alone and none is given back twice.
   */
  private async expire(doc: UsageDoc): Promise<boolean> {
    const now = this.clock();
    const stale = (doc.pending ?? []).filter((p) => p.until.getTime() <= now.getTime());
    if (stale.length === 0) return false;
    const recorded = await this.recordedIds(stale.map((p) => p.id));
    await Promise.all(
      stale.map((p) =>
        db(() =>
          this.models.Usage.updateOne(
            { _id: doc._id, pending: { $elemMatch: { id: p.id, until: { $lte: now } } } },
            recorded.has(p.id)
              ? { $pull: { pending: { id: p.id } } }
              : {
                  $pull: { pending: { id: p.id } },
                  $inc: { bytes: -p.bytes, files: -p.files },
                },
          ).exec(),
        ),
      ),
    );
    return true;
  }

  /** Which of `ids` have a record (in any state: a record being deleted gives its bytes back itself). */
  private async recordedIds(ids: number[]): Promise<Set<number>> {
    if (ids.length === 0) return new Set();
    const docs = await db(() =>
      this.models.Media.find({ id: { $in: ids } }, { id: 1, _id: 0 })
        .lean()
        .exec(),
    );
    return new Set(docs.map((d) => d.id));
  }
}

function countersOf(doc: UsageDoc | null): UsageCounters {
  return {
    bytes: doc?.bytes ?? 0,
    files: doc?.files ?? 0,
    variantBytes: doc?.variantBytes ?? 0,
    resultBytes: doc?.resultBytes ?? 0,
  };
}

function byOrganization(bookings: Booking[]): Map<number, number[]> {
  const ids = new Map<number, number[]>();
  for (const b of bookings) ids.set(b.organizationId, [...(ids.get(b.organizationId) ?? []), b.id]);
  return ids;
}
