import type { MediaDoc, Models, RequestOrigin } from '../db/models';
import { db, isDuplicateKey } from '../db/errors';
import type { CountersRepository } from './counters.repository';

export type { RequestOrigin };
export type MediaRecord = Omit<MediaDoc, 'jobId'> & { jobId: string | null };
export type NewMedia = Omit<MediaDoc, 'id' | 'createdAt' | 'updatedAt'>;

const toRecord = (doc: MediaDoc): MediaRecord => ({
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
  jobId: doc.jobId ?? null,
  createdAt: doc.createdAt,
  updatedAt: doc.updatedAt,
});

export class MediaRepository {
  constructor(
    private readonly models: Pick<Models, 'Media' | 'KeyClaim'>,
    private readonly counters: CountersRepository,
  ) {}

  async insert(media: NewMedia): Promise<MediaRecord> {
    const id = await this.counters.next('media');
    const doc = await db(() => this.models.Media.create({ ...media, id }));
    return toRecord(doc.toObject());
  }

  /** Inserts several records in one write; either all are written or none (on failure the written ones are removed). */
  async insertAll(items: NewMedia[]): Promise<MediaRecord[]> {
    const ids: number[] = [];
    for (let i = 0; i < items.length; i++) ids.push(await this.counters.next('media'));
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
    const doc = await db(() => this.models.Media.findOne({ organizationId, key }).lean().exec());
    return doc ? toRecord(doc) : null;
  }

  /** Records of one organization by key, in one query; keys without a record are absent. */
  async findByKeys(organizationId: number, keys: string[]): Promise<Map<string, MediaRecord>> {
    if (keys.length === 0) return new Map();
    const docs = await db(() =>
      this.models.Media.find({ organizationId, key: { $in: [...new Set(keys)] } })
        .lean()
        .exec(),
    );
    return new Map(docs.map((doc) => [doc.key, toRecord(doc)]));
  }

  async findById(organizationId: number, id: number): Promise<MediaRecord | null> {
    const doc = await db(() => this.models.Media.findOne({ organizationId, id }).lean().exec());
    return doc ? toRecord(doc) : null;
  }

  async findByJobId(jobId: string): Promise<MediaRecord | null> {
    const doc = await db(() => this.models.Media.findOne({ jobId }).lean().exec());
    return doc ? toRecord(doc) : null;
  }

  async countByKey(key: string): Promise<number> {
    return db(() => this.models.Media.countDocuments({ key }).exec());
  }

  /** Which of `keys` have a record (in any organization). */
  async recordedKeys(keys: string[]): Promise<Set<string>> {
    const docs = await db(() =>
      this.models.Media.find({ key: { $in: keys } }, { key: 1, _id: 0 })
        .lean()
        .exec(),
    );
    return new Set(docs.map((d) => d.key));
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

  /** Records of one organization (or all) created before `before`, in id order, read in batches. */
  async *createdBefore(
    before: Date,
    organizationId: number | null,
    batchSize = 500,
  ): AsyncIterable<MediaRecord> {
    const cursor = this.models.Media.find({
      ...(organizationId === null ? {} : { organizationId }),
      createdAt: { $lt: before },
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
