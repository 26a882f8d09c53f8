import type { MediaDoc, Models, RequestOrigin } from '../db/models';
import { db, isDuplicateKey } from '../db/errors';
import { pendingEvent } from '../events/events';
import type { CountersRepository } from './counters.repository';

export type { RequestOrigin };
export type MediaRecord = Omit<MediaDoc, 'jobId' | 'thumbhash'> & {
  jobId: string | null;
  /** An image's placeholder once computed (null or absent before). */
  thumbhash?: string | null;
};
export type NewMedia = Omit<
  MediaDoc,
  'id' | 'createdAt' | 'updatedAt' | 'deletingAt' | 'deletedAt' | 'deletedBy' | 'trashedFrom'
>;

/** What GET /media filters on; every filter is served by an index that starts with the organization. */
export interface MediaFilter {
  /** A folder's id; null: the files in no folder (the root folder's). */
  folderId?: number | null | undefined;
  /** An exact MIME type, or a top-level type as a prefix (`image/`). */
  mimetype?: string | undefined;
  mimetypePrefix?: string | undefined;
  /** Records whose name starts with this. */
  namePrefix?: string | undefined;
  /** Records whose name contains this, any case. */
  nameContains?: string | undefined;
  createdAfter?: Date | undefined;
  createdBefore?: Date | undefined;
}

/** The order of a list: by id (creation), name or size, each record's id breaking ties. */
export interface MediaOrder {
  field: 'id' | 'name' | 'bytes';
  descending: boolean;
}

/** Records that are not being deleted (a delete marks its record first), in the trash or not. */
export const NOT_DELETING = { deletingAt: null } as const;

/** Records that are neither being deleted nor in the trash: the ones every lookup sees. */
export const LIVE = { deletingAt: null, deletedAt: null } as const;

/** Records in the trash (not being purged). */
export const TRASHED = { deletingAt: null, deletedAt: { $ne: null } } as const;

/** A record's variants' bytes, as an aggregation expression (0 without variants). */
const VARIANT_BYTES = { $sum: { $ifNull: ['$variants.bytes', []] } };

const escapeRegex = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

export const toRecord = (doc: MediaDoc): MediaRecord => ({
  id: doc.id,
  organizationId: doc.organizationId,
  folderId: doc.folderId ?? null,
  key: doc.key,
  name: doc.name,
  mimetype: doc.mimetype,
  bytes: doc.bytes,
  checksum: doc.checksum,
  metaData: {
    ipAddress: doc.metaData?.ipAddress ?? '',
    userAgent: doc.metaData?.userAgent ?? '',
  },
  createdBy: doc.createdBy ?? null,
  deletingAt: doc.deletingAt ?? null,
  ...(doc.deletedAt
    ? {
        deletedAt: doc.deletedAt,
        deletedBy: doc.deletedBy ?? null,
        trashedFrom: doc.trashedFrom ?? null,
        restoringAt: doc.restoringAt ?? null,
      }
    : {}),
  jobId: doc.jobId ?? null,
  ...(doc.scanStatus ? { scanStatus: doc.scanStatus } : {}),
  ...(doc.quarantineKey ? { quarantineKey: doc.quarantineKey } : {}),
  ...(doc.scanSignature ? { scanSignature: doc.scanSignature } : {}),
  ...(doc.pages !== undefined && doc.pages !== null ? { pages: doc.pages } : {}),
  thumbhash: doc.thumbhash ?? null,
  ...(doc.sourceUrl ? { sourceUrl: doc.sourceUrl } : {}),
  createdAt: doc.createdAt,
  updatedAt: doc.updatedAt,
});

export class MediaRepository {
  constructor(
    private readonly models: Pick<Models, 'Media' | 'KeyClaim'>,
    private readonly counters: CountersRepository,
  ) {}

  /** The id the next record will carry (taken ahead, so it can be fetched beside other work). */
  nextId(): Promise<number> {
    return this.counters.next('media');
  }

  async insert(media: NewMedia, takenId?: number): Promise<MediaRecord> {
    const id = takenId ?? (await this.counters.next('media'));
    const doc = await db(() => this.models.Media.create({ ...media, id }));
    return toRecord(doc.toObject());
  }

  /** Ids for `count` records, in one round trip (taken ahead, so it can be fetched beside other work). */
  nextIds(count: number): Promise<number[]> {
    return this.counters.take('media', count);
  }

  /**
   * Inserts several records in one write; either all are written or none (on
   * failure the written ones are removed). Their ids are taken in one round
   * trip, unless given (`takenIds`, one per item, from `nextIds`).
   */
  async insertAll(items: NewMedia[], takenIds?: number[]): Promise<MediaRecord[]> {
    const ids = takenIds ?? (await this.counters.take('media', items.length));
    if (ids.length !== items.length) throw new Error('one id per record is needed');
    const docs = items.map((m, i) => ({ ...m, id: ids[i]! }));
    try {
      const written = await db(() => this.models.Media.insertMany(docs, { ordered: true }));
      return written.map((d) => toRecord(d.toObject()));
    } catch (err) {
      await this.models.Media.deleteMany({ id: { $in: ids } })
        .exec()
        .catch(() => undefined);
      throw err;
    }
  }

  async findByKey(organizationId: number, key: string): Promise<MediaRecord | null> {
    const doc = await db(() =>
      this.models.Media.findOne({ organizationId, key, ...LIVE })
        .lean()
        .exec(),
    );
    return doc ? toRecord(doc) : null;
  }

  /** Records of one organization by key, in one query; keys without a record are absent. */
  async findByKeys(organizationId: number, keys: string[]): Promise<Map<string, MediaRecord>> {
    if (keys.length === 0) return new Map();
    const docs = await db(() =>
      this.models.Media.find({ organizationId, key: { $in: [...new Set(keys)] }, ...LIVE })
        .lean()
        .exec(),
    );
    return new Map(docs.map((doc) => [doc.key, toRecord(doc)]));
  }

  /**
   * The organization's live records with these checksums, the oldest of each
   * (a record being deleted is none: a file in the trash, once there is one,
   * is not a duplicate either).
   */
  async findByChecksums(
    organizationId: number,
    checksums: string[],
  ): Promise<Map<string, MediaRecord>> {
    if (checksums.length === 0) return new Map();
    const docs = await db(() =>
      this.models.Media.find({
        organizationId,
        checksum: { $in: [...new Set(checksums)] },
        ...LIVE,
      })
        .sort({ id: 1 })
        .lean()
        .exec(),
    );
    const found = new Map<string, MediaRecord>();
    for (const doc of docs) if (!found.has(doc.checksum)) found.set(doc.checksum, toRecord(doc));
    return found;
  }

  /**
   * Sets an image's placeholder; false when the record is gone or being
   * deleted. The record's `updatedAt` (a download's Last-Modified) does not
   * change: the placeholder is derived from bytes that never change, as
   * variants and page counts are.
   */
  async setThumbhash(id: number, thumbhash: string): Promise<boolean> {
    const res = await db(() =>
      this.models.Media.updateOne(
        { id, ...LIVE },
        { $set: { thumbhash } },
        { timestamps: false },
      ).exec(),
    );
    return res.matchedCount > 0;
  }

  /** Up to `limit` live image records without a placeholder, by id from `afterId` (a backfill's pages). */
  async imagesWithoutThumbhash(
    afterId: number,
    limit: number,
    organizationId: number | null,
  ): Promise<MediaRecord[]> {
    const docs = await db(() =>
      this.models.Media.find({
        ...(organizationId === null ? {} : { organizationId }),
        id: { $gt: afterId },
        mimetype: { $regex: '^image/' },
        thumbhash: { $exists: false },
        ...LIVE,
      })
        .sort({ id: 1 })
        .limit(limit)
        .lean()
        .exec(),
    );
    return docs.map(toRecord);
  }

  async findById(organizationId: number, id: number): Promise<MediaRecord | null> {
    const doc = await db(() =>
      this.models.Media.findOne({ organizationId, id, ...LIVE })
        .lean()
        .exec(),
    );
    return doc ? toRecord(doc) : null;
  }

  /**
   * One page of an organization's records, newest first by default (by id,
   * which only grows): `limit` records after the position `after` (the last
   * record of the page before). Records inserted meanwhile have higher ids,
   * so paging on never repeats or skips one. Ordered by name or size, the id
   * breaks ties in the same direction (keyset paging on the pair).
   */
  async list(
    organizationId: number,
    filter: MediaFilter,
    page: {
      limit: number;
      order?: MediaOrder | undefined;
      after?: { id: number; value?: string | number | undefined } | undefined;
    },
  ): Promise<MediaRecord[]> {
    const order = page.order ?? { field: 'id', descending: true };
    const dir = order.descending ? -1 : 1;
    const beyond = order.descending ? '$lt' : '$gt';
    const query: Record<string, unknown> = { organizationId, ...LIVE };
    if (filter.folderId !== undefined) query.folderId = filter.folderId;
    if (filter.mimetype !== undefined) query.mimetype = filter.mimetype;
    else if (filter.mimetypePrefix !== undefined) {
      query.mimetype = { $regex: `^${escapeRegex(filter.mimetypePrefix)}` };
    }
    const names: Record<string, unknown>[] = [];
    if (filter.namePrefix !== undefined) {
      names.push({ name: { $regex: `^${escapeRegex(filter.namePrefix)}` } });
    }
    if (filter.nameContains !== undefined) {
      names.push({ name: { $regex: escapeRegex(filter.nameContains), $options: 'i' } });
    }
    if (names.length > 0) query.$and = names;
    if (filter.createdAfter || filter.createdBefore) {
      query.createdAt = {
        ...(filter.createdAfter ? { $gt: filter.createdAfter } : {}),
        ...(filter.createdBefore ? { $lt: filter.createdBefore } : {}),
      };
    }
    const after = page.after;
    if (after && order.field === 'id') query.id = { [beyond]: after.id };
    else if (after) {
      const $or = [
        { [order.field]: { [beyond]: after.value } },
        { [order.field]: after.value, id: { [beyond]: after.id } },
      ];
      query.$and = [...((query.$and as unknown[] | undefined) ?? []), { $or }];
    }
    const sort: Record<string, 1 | -1> =
      order.field === 'id' ? { id: dir } : { [order.field]: dir, id: dir };
    const docs = await db(() =>
      this.models.Media.find(query).sort(sort).limit(page.limit).lean().exec(),
    );
    return docs.map(toRecord);
  }

  /**
   * Live records of an organization in these folders (null: in no folder;
   * undefined: in any), oldest first, at most `limit` (an archive's selection).
   */
  async inFolders(
    organizationId: number,
    folderIds: (number | null)[] | undefined,
    limit: number,
  ): Promise<MediaRecord[]> {
    const query = {
      organizationId,
      ...LIVE,
      ...(folderIds === undefined ? {} : { folderId: { $in: folderIds } }),
    };
    const docs = await db(() =>
      this.models.Media.find(query).sort({ id: 1 }).limit(limit).lean().exec(),
    );
    return docs.map(toRecord);
  }

  /**
   * Files and bytes of an organization's records, by MIME type (the trash's
   * included: its bytes count until purged; `trashed` is what only it holds).
   */
  async usageByType(
    organizationId: number,
    which: 'all' | 'trashed' = 'all',
  ): Promise<Map<string, { files: number; bytes: number }>> {
    const rows = await db(() =>
      this.models.Media.aggregate<{ _id: string; files: number; bytes: number }>([
        { $match: { organizationId, ...(which === 'all' ? NOT_DELETING : TRASHED) } },
        { $group: { _id: '$mimetype', files: { $sum: 1 }, bytes: { $sum: '$bytes' } } },
      ]).exec(),
    );
    return new Map(rows.map((r) => [r._id, { files: r.files, bytes: r.bytes }]));
  }

  /**
   * What records not being deleted hold per organization (one, or all; the
   * trash's included, until purged): files, and bytes as the quota counts
   * them (the files' and their variants'), with the variants' share apart.
   */
  async usageByOrganization(
    organizationId: number | null,
  ): Promise<Map<number, { files: number; bytes: number; variantBytes: number }>> {
    const rows = await db(() =>
      this.models.Media.aggregate<{
        _id: number;
        files: number;
        bytes: number;
        variantBytes: number;
      }>([
        {
          $match: { ...(organizationId === null ? {} : { organizationId }), ...NOT_DELETING },
        },
        {
          $group: {
            _id: '$organizationId',
            files: { $sum: 1 },
            bytes: { $sum: '$bytes' },
            variantBytes: { $sum: VARIANT_BYTES },
          },
        },
      ]).exec(),
    );
    return new Map(
      rows.map((r) => [
        r._id,
        { files: r.files, bytes: r.bytes + r.variantBytes, variantBytes: r.variantBytes },
      ]),
    );
  }

  /** The rendered variants of an organization's records (the trash's included): how many, and their bytes. */
  async variantUsage(organizationId: number): Promise<{ variants: number; bytes: number }> {
    const rows = await db(() =>
      this.models.Media.aggregate<{ variants: number; bytes: number }>([
        { $match: { organizationId, ...NOT_DELETING, variants: { $exists: true } } },
        {
          $group: {
            _id: null,
            variants: { $sum: { $size: { $ifNull: ['$variants', []] } } },
            bytes: { $sum: VARIANT_BYTES },
          },
        },
      ]).exec(),
    );
    return { variants: rows[0]?.variants ?? 0, bytes: rows[0]?.bytes ?? 0 };
  }

  /** Bytes of the variants recorded on a record, whatever its state (a delete gives them back). */
  async variantBytesOf(id: number): Promise<number> {
    const doc = await db(() => this.models.Media.findOne({ id }, { variants: 1 }).lean().exec());
    return (doc?.variants ?? []).reduce((n, v) => n + v.bytes, 0);
  }

  /**
   * Records a PDF's page count (once: the first reader sets it; the record's
   * `updatedAt` does not change, as for variants).
   */
  async setPages(organizationId: number, key: string, pages: number): Promise<void> {
    await db(() =>
      this.models.Media.updateOne(
        { organizationId, key, ...LIVE, pages: { $exists: false } },
        { $set: { pages } },
        { timestamps: false },
      ).exec(),
    );
  }

  /**
   * Puts live records of one organization into a folder (null: in no folder).
   * Only the record changes: the key, and so the object, stays where it is.
   */
  async moveToFolder(
    organizationId: number,
    ids: number[],
    folderId: number | null,
  ): Promise<void> {
    if (ids.length === 0) return;
    await db(() =>
      this.models.Media.updateMany(
        { organizationId, id: { $in: ids }, ...LIVE },
        { $set: { folderId } },
      ).exec(),
    );
  }

  /**
   * Files and bytes per folder of an organization (folders without files are
   * absent); null: the files in no folder, when asked for.
   */
  async folderUsage(
    organizationId: number,
    folderIds?: (number | null)[],
  ): Promise<Map<number | null, { files: number; bytes: number }>> {
    const rows = await db(() =>
      this.models.Media.aggregate<{ _id: number | null; files: number; bytes: number }>([
        {
          $match: {
            organizationId,
            ...LIVE,
            folderId: folderIds ? { $in: folderIds } : { $ne: null },
          },
        },
        { $group: { _id: '$folderId', files: { $sum: 1 }, bytes: { $sum: '$bytes' } } },
      ]).exec(),
    );
    return new Map(rows.map((r) => [r._id, { files: r.files, bytes: r.bytes }]));
  }

  /**
   * Ids of an organization's live records (in a folder, when given), oldest
   * first, a batch at a time (for a folder's or an organization's deletion;
   * `withTrash`: the trash's too, for an organization's).
   */
  async ids(
    organizationId: number,
    folderId: number | undefined,
    limit: number,
    withTrash = false,
  ): Promise<number[]> {
    const query = {
      organizationId,
      ...(folderId === undefined ? {} : { folderId }),
      ...(withTrash ? NOT_DELETING : LIVE),
    };
    const docs = await db(() =>
      this.models.Media.find(query, { id: 1, _id: 0 }).sort({ id: 1 }).limit(limit).lean().exec(),
    );
    return docs.map((d) => d.id);
  }

  /**
   * Marks a record as being deleted, with its `media.deleted` event (in the
   * same update); false when it is gone or already being deleted (so of two
   * concurrent deletes only one goes on).
   */
  async markDeleting(id: number, at: Date, evenIfRestoring = false): Promise<boolean> {
    const result = await db(() =>
      this.models.Media.updateOne(
        // In the trash or not; not while a restore runs (that one finishes first), unless told.
        { id, ...NOT_DELETING, ...(evenIfRestoring ? {} : { restoringAt: null }) },
        {
          $set: { deletingAt: at },
          $push: { pendingEvents: pendingEvent('media.deleted', id, at) },
        },
      ).exec(),
    );
    return result.modifiedCount === 1;
  }

  /**
   * Moves a live record to the trash, with its `media.trashed` event (in the
   * same update); false when it is gone, being deleted or in the trash already.
   */
  async markTrashed(
    id: number,
    at: Date,
    by: string | null,
    from: { id: number; name: string } | null,
  ): Promise<boolean> {
    const result = await db(() =>
      this.models.Media.updateOne(
        { id, ...LIVE },
        {
          $set: { deletedAt: at, deletedBy: by, trashedFrom: from },
          // The subject carries the time: a file trashed, restored and trashed again has two events.
          $push: { pendingEvents: pendingEvent('media.trashed', `${id}@${at.getTime()}`, at) },
        },
      ).exec(),
    );
    return result.modifiedCount === 1;
  }

  /** One page of an organization's trash, newest first by id (as `list`). */
  async listTrash(
    organizationId: number,
    page: { limit: number; beforeId?: number | undefined },
  ): Promise<MediaRecord[]> {
    const query: Record<string, unknown> = { organizationId, ...TRASHED };
    if (page.beforeId !== undefined) query.id = { $lt: page.beforeId };
    const docs = await db(() =>
      this.models.Media.find(query).sort({ id: -1 }).limit(page.limit).lean().exec(),
    );
    return docs.map(toRecord);
  }

  /** A record of the organization's trash by id. */
  async findTrashed(organizationId: number, id: number): Promise<MediaRecord | null> {
    const doc = await db(() =>
      this.models.Media.findOne({ organizationId, id, ...TRASHED })
        .lean()
        .exec(),
    );
    return doc ? toRecord(doc) : null;
  }

  /**
   * Marks a trashed record as being restored (a purge leaves it alone from
   * then on); false when it is no longer in the trash. A second restore
   * takes the mark over: both finish the same way.
   */
  async markRestoring(id: number, at: Date): Promise<boolean> {
    const result = await db(() =>
      this.models.Media.updateOne({ id, ...TRASHED }, { $set: { restoringAt: at } }).exec(),
    );
    return result.matchedCount === 1;
  }

  /**
   * Ends a restore: out of the trash into `folderId`, with its
   * `media.restored` event (in the same update); false when no restore
   * holds it (another finished it).
   */
  async finishRestore(id: number, folderId: number | null, at: Date): Promise<boolean> {
    const result = await db(() =>
      this.models.Media.updateOne(
        { id, ...TRASHED, restoringAt: { $ne: null } },
        {
          $set: {
            deletedAt: null,
            deletedBy: null,
            trashedFrom: null,
            restoringAt: null,
            folderId,
          },
          $push: { pendingEvents: pendingEvent('media.restored', `${id}@${at.getTime()}`, at) },
        },
      ).exec(),
    );
    return result.modifiedCount === 1;
  }

  /** Restores begun before `before` and cut off (for reconcile to finish). */
  async restoringBefore(before: Date, organizationId: number | null): Promise<MediaRecord[]> {
    const docs = await db(() =>
      this.models.Media.find({
        ...(organizationId === null ? {} : { organizationId }),
        ...TRASHED,
        restoringAt: { $ne: null, $lt: before },
      })
        .lean()
        .exec(),
    );
    return docs.map(toRecord);
  }

  /** Organizations with files in the trash (for the purge). */
  async organizationsWithTrash(): Promise<number[]> {
    const ids = await db(() => this.models.Media.distinct('organizationId', TRASHED).exec());
    return ids.sort((a, b) => a - b);
  }

  /** Up to `limit` of an organization's trashed records put there before `before`, not being restored. */
  async trashedBefore(organizationId: number, before: Date, limit: number): Promise<MediaRecord[]> {
    const docs = await db(() =>
      this.models.Media.find({
        organizationId,
        deletingAt: null,
        deletedAt: { $ne: null, $lte: before },
        restoringAt: null,
      })
        .sort({ deletedAt: 1 })
        .limit(limit)
        .lean()
        .exec(),
    );
    return docs.map(toRecord);
  }

  /** A record by id whatever its state (a delete in progress included). */
  async findAnyById(id: number): Promise<MediaRecord | null> {
    const doc = await db(() => this.models.Media.findOne({ id }).lean().exec());
    return doc ? toRecord(doc) : null;
  }

  /** Removes an organization's key claims (its merged PDFs' keys), once its objects are gone. */
  async removeClaimsOf(organizationId: number): Promise<number> {
    const result = await db(() => this.models.KeyClaim.deleteMany({ organizationId }).exec());
    return result.deletedCount;
  }

  /** Keys of root objects (merged PDFs) claimed by an organization. */
  async claimedKeysOf(organizationId: number): Promise<string[]> {
    const docs = await db(() =>
      this.models.KeyClaim.find({ organizationId }, { _id: 1 }).lean().exec(),
    );
    return docs.map((d) => d._id);
  }

  /** Records whose delete began before `before` (and was cut off), of one organization or all. */
  async deletingBefore(before: Date, organizationId: number | null): Promise<MediaRecord[]> {
    const docs = await db(() =>
      this.models.Media.find({
        ...(organizationId === null ? {} : { organizationId }),
        deletingAt: { $ne: null, $lt: before },
      })
        .lean()
        .exec(),
    );
    return docs.map(toRecord);
  }

  async findByJobId(jobId: string): Promise<MediaRecord | null> {
    const doc = await db(() => this.models.Media.findOne({ jobId }).lean().exec());
    return doc ? toRecord(doc) : null;
  }

  async countByKey(key: string): Promise<number> {
    return db(() => this.models.Media.countDocuments({ key }).exec());
  }

  /** Which of `keys` have a record (in any organization), a quarantined object's included. */
  async recordedKeys(keys: string[]): Promise<Set<string>> {
    const docs = await db(() =>
      this.models.Media.find(
        { $or: [{ key: { $in: keys } }, { quarantineKey: { $in: keys } }] },
        { key: 1, quarantineKey: 1, _id: 0 },
      )
        .lean()
        .exec(),
    );
    return new Set(docs.flatMap((d) => (d.quarantineKey ? [d.key, d.quarantineKey] : [d.key])));
  }

  /**
   * Records a pending file's scan verdict; an infected one's quarantine key
   * and signature too, with its `media.infected` event in the same update.
   * False when the record is gone, being deleted, or no longer pending (a
   * verdict recorded already: scans are delivered at least once).
   */
  async recordScan(
    id: number,
    verdict:
      | { status: 'clean' | 'unscanned' }
      | { status: 'infected'; quarantineKey: string; signature: string },
  ): Promise<boolean> {
    const result = await db(() =>
      this.models.Media.updateOne(
        // A file in the trash gets its verdict too (it may be restored).
        { id, scanStatus: 'pending', ...NOT_DELETING },
        verdict.status === 'infected'
          ? {
              $set: {
                scanStatus: 'infected',
                quarantineKey: verdict.quarantineKey,
                scanSignature: verdict.signature,
              },
              $push: { pendingEvents: pendingEvent('media.infected', id) },
            }
          : { $set: { scanStatus: verdict.status } },
      ).exec(),
    );
    return result.modifiedCount === 1;
  }

  /** Which of `keys` (variants' object keys) are recorded on a record (in any organization). */
  async recordedVariantKeys(keys: string[]): Promise<Set<string>> {
    if (keys.length === 0) return new Set();
    const docs = await db(() =>
      this.models.Media.find({ 'variants.key': { $in: keys } }, { variants: 1, _id: 0 })
        .lean()
        .exec(),
    );
    const wanted = new Set(keys);
    return new Set(
      docs.flatMap((d) => (d.variants ?? []).map((v) => v.key).filter((k) => wanted.has(k))),
    );
  }

  /** Records of one organization (or all) created since `since`. */
  async countCreatedSince(since: Date, organizationId: number | null): Promise<number> {
    return db(() =>
      this.models.Media.countDocuments({
        ...(organizationId === null ? {} : { organizationId }),
        createdAt: { $gte: since },
      }).exec(),
    );
  }

  /**
   * Records of one organization (or all) created before `before`, not being
   * deleted (the trash's included: their objects are kept too), in id order,
   * read in batches.
   */
  async *createdBefore(
    before: Date,
    organizationId: number | null,
    batchSize = 500,
  ): AsyncIterable<MediaRecord> {
    const cursor = this.models.Media.find({
      ...(organizationId === null ? {} : { organizationId }),
      createdAt: { $lt: before },
      ...NOT_DELETING,
    })
      .sort({ id: 1 })
      .lean()
      .cursor({ batchSize });
    try {
      for await (const doc of cursor) yield toRecord(doc);
    } finally {
      await cursor.close();
    }
  }

  /**
   * Takes the first free key of `keyAt(ms)` for ms = `from`, `from + 1`, …
   * for a job (the unique key decides between two jobs of one millisecond);
   * a job that already holds one (an earlier attempt) gets it back.
   */
  async claimKey(
    jobId: string,
    organizationId: number,
    from: number,
    keyAt: (ms: number) => string,
  ): Promise<string> {
    const held = async () =>
      (await db(() => this.models.KeyClaim.findOne({ jobId }).lean().exec()))?._id;
    const earlier = await held();
    if (earlier) return earlier;
    for (let ms = from; ms < from + 10_000; ms++) {
      try {
        await db(() => this.models.KeyClaim.create({ _id: keyAt(ms), jobId, organizationId }));
        return keyAt(ms);
      } catch (err) {
        if (!isDuplicateKey(err)) throw err;
        // Another job has this millisecond, or another attempt of this job claimed first.
        const mine = await held();
        if (mine) return mine;
      }
    }
    throw new Error(`no free key in the 10,000 milliseconds from ${from}`);
  }

  /**
   * Who each key belongs to: the organization of its record, or, for a
   * claimed root key whose record is missing, of its claim (`recorded`
   * false). Keys that are neither recorded nor claimed are absent.
   */
  async ownersOf(
    keys: string[],
  ): Promise<Map<string, { organizationId: number; recorded: boolean }>> {
    if (keys.length === 0) return new Map();
    const [records, claims] = await Promise.all([
      db(() =>
        this.models.Media.find({ key: { $in: keys } }, { key: 1, organizationId: 1, _id: 0 })
          .lean()
          .exec(),
      ),
      db(() =>
        this.models.KeyClaim.find({ _id: { $in: keys } }, { organizationId: 1 })
          .lean()
          .exec(),
      ),
    ]);
    const owners = new Map<string, { organizationId: number; recorded: boolean }>();
    for (const c of claims)
      owners.set(c._id, { organizationId: c.organizationId, recorded: false });
    for (const r of records)
      owners.set(r.key, { organizationId: r.organizationId, recorded: true });
    return owners;
  }

  async removeByIds(ids: number[]): Promise<void> {
    await db(() => this.models.Media.deleteMany({ id: { $in: ids } }).exec());
  }
}
