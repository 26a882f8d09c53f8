/**
 * Organizations: integer id, slug (in keys), name, quota, and the id of the
 * root folder that files in no folder belong to. Every organization read
 * carries its root folder id: one made before root folders existed is given
 * one the first time it is read (idempotently, safe under races).
 */
import type { Models, OrganizationDoc } from '../db/models';
import type { ScanPolicy } from '../scan/scan';
import { db } from '../db/errors';
import type { CountersRepository } from './counters.repository';

export interface Organization {
  id: number;
  slug: string;
  name: string;
  /** Bytes it may store; null: no quota. */
  quotaBytes: number | null;
  /** Its root folder: files in no folder answer this folderId (docs/api.md, "The root folder"). */
  rootFolderId: number;
  /** Which files it is served while scanning is on; absent: SCAN_POLICY. */
  scanPolicy?: ScanPolicy;
  /** Seconds its deleted files stay in the trash; absent: TRASH_RETENTION_S. */
  trashRetentionS?: number;
}

const toOrganization = (doc: OrganizationDoc & { rootFolderId: number }): Organization => ({
  id: doc.id,
  slug: doc.slug,
  name: doc.name,
  quotaBytes: doc.quotaBytes ?? null,
  rootFolderId: doc.rootFolderId,
  ...(doc.scanPolicy ? { scanPolicy: doc.scanPolicy } : {}),
  ...(typeof doc.trashRetentionS === 'number' ? { trashRetentionS: doc.trashRetentionS } : {}),
});

export class OrganizationsRepository {
  constructor(
    private readonly models: Pick<Models, 'Organization'>,
    private readonly counters: CountersRepository,
  ) {}

  /** Creates an organization; rejects with a duplicate-key error (11000) when the slug exists. */
  async create(slug: string, name: string): Promise<Organization> {
    const [id, rootFolderId] = await Promise.all([
      this.counters.next('organizations'),
      this.counters.next('folders'),
    ]);
    const doc = await db(() => this.models.Organization.create({ id, slug, name, rootFolderId }));
    return toOrganization({ ...doc.toObject(), rootFolderId });
  }

  async findBySlug(slug: string): Promise<Organization | null> {
    const doc = await db(() => this.models.Organization.findOne({ slug }).lean().exec());
    return doc ? this.complete(doc) : null;
  }

  async findById(id: number): Promise<Organization | null> {
    const doc = await db(() => this.models.Organization.findOne({ id }).lean().exec());
    return doc ? this.complete(doc) : null;
  }

  async list(): Promise<Organization[]> {
    const docs = await db(() => this.models.Organization.find().sort({ id: 1 }).lean().exec());
    return Promise.all(docs.map((doc) => this.complete(doc)));
  }

  /** Sets (a number of bytes) or removes (null) the organization's quota. */
  async setQuota(id: number, quotaBytes: number | null): Promise<Organization | null> {
    const doc = await db(() =>
      this.models.Organization.findOneAndUpdate(
        { id },
        { $set: { quotaBytes } },
        { returnDocument: 'after', lean: true },
      ).exec(),
    );
    return doc ? this.complete(doc) : null;
  }

  /** Sets (a policy) or removes (null: SCAN_POLICY applies) the organization's scan policy. */
  async setScanPolicy(id: number, scanPolicy: ScanPolicy | null): Promise<Organization | null> {
    const doc = await db(() =>
      this.models.Organization.findOneAndUpdate(
        { id },
        scanPolicy ? { $set: { scanPolicy } } : { $unset: { scanPolicy: 1 } },
        { returnDocument: 'after', lean: true },
      ).exec(),
    );
    return doc ? this.complete(doc) : null;
  }

  /** Sets (seconds) or removes (null: TRASH_RETENTION_S applies) the organization's trash retention. */
  async setTrashRetention(id: number, seconds: number | null): Promise<Organization | null> {
    const doc = await db(() =>
      this.models.Organization.findOneAndUpdate(
        { id },
        seconds === null
          ? { $unset: { trashRetentionS: 1 } }
          : { $set: { trashRetentionS: seconds } },
        { returnDocument: 'after', lean: true },
      ).exec(),
    );
    return doc ? this.complete(doc) : null;
  }

  async remove(id: number): Promise<void> {
    await db(() => this.models.Organization.deleteOne({ id }).exec());
  }

  /**
   * The organization with its root folder id, giving it one when it has none
   * yet (made before root folders existed). Of two readers racing, the first
   * write wins and both answer its id (the loser's counter value stays unused).
   */
  private async complete(doc: OrganizationDoc): Promise<Organization> {
    if (typeof doc.rootFolderId === 'number') {
      return toOrganization({ ...doc, rootFolderId: doc.rootFolderId });
    }
    const rootFolderId = await this.counters.next('folders');
    const updated = await db(() =>
      this.models.Organization.findOneAndUpdate(
        { id: doc.id, rootFolderId: null },
        { $set: { rootFolderId } },
        { returnDocument: 'after', lean: true, timestamps: false },
      ).exec(),
    );
    const current =
      updated ?? (await db(() => this.models.Organization.findOne({ id: doc.id }).lean().exec()));
    if (typeof current?.rootFolderId !== 'number') {
      throw new Error(`organization ${doc.id} has no root folder id`);
    }
    return toOrganization({ ...current, rootFolderId: current.rootFolderId });
  }

  async count(): Promise<number> {
    return db(() => this.models.Organization.estimatedDocumentCount().exec());
  }
}
