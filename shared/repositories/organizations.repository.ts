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
  /** Which files it is served while scanning is on; absent: SCAN_POLICY. */
  scanPolicy?: ScanPolicy;
}

const toOrganization = (doc: OrganizationDoc): Organization => ({
  id: doc.id,
  slug: doc.slug,
  name: doc.name,
  quotaBytes: doc.quotaBytes ?? null,
  ...(doc.scanPolicy ? { scanPolicy: doc.scanPolicy } : {}),
});

export class OrganizationsRepository {
  constructor(
    private readonly models: Pick<Models, 'Organization'>,
    private readonly counters: CountersRepository,
  ) {}

  /** Creates an organization; rejects with a duplicate-key error (11000) when the slug exists. */
  async create(slug: string, name: string): Promise<Organization> {
    const id = await this.counters.next('organizations');
    const doc = await db(() => this.models.Organization.create({ id, slug, name }));
    return toOrganization(doc);
  }

  async findBySlug(slug: string): Promise<Organization | null> {
    const doc = await db(() => this.models.Organization.findOne({ slug }).lean().exec());
    return doc ? toOrganization(doc) : null;
  }

  async findById(id: number): Promise<Organization | null> {
    const doc = await db(() => this.models.Organization.findOne({ id }).lean().exec());
    return doc ? toOrganization(doc) : null;
  }

  async list(): Promise<Organization[]> {
    const docs = await db(() => this.models.Organization.find().sort({ id: 1 }).lean().exec());
    return docs.map(toOrganization);
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
    return doc ? toOrganization(doc) : null;
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
    return doc ? toOrganization(doc) : null;
  }

  async remove(id: number): Promise<void> {
    await db(() => this.models.Organization.deleteOne({ id }).exec());
  }

  async count(): Promise<number> {
    return db(() => this.models.Organization.estimatedDocumentCount().exec());
  }
}
