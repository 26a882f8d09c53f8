import type { MediaDoc, Models } from '../db/models';
import { db } from '../db/errors';
import type { CountersRepository } from './counters.repository';

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
  jobId: doc.jobId ?? null,
  createdAt: doc.createdAt,
  updatedAt: doc.updatedAt,
});

export class MediaRepository {
  constructor(
    private readonly models: Pick<Models, 'Media'>,
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

  async removeByIds(ids: number[]): Promise<void> {
    await db(() => this.models.Media.deleteMany({ id: { $in: ids } }).exec());
  }
}
