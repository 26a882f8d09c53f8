import type { Models, OrganizationDoc } from '../db/models';
import { db } from '../db/errors';
import type { CountersRepository } from './counters.repository';

export interface Organization {
  id: number;
  slug: string;
  name: string;
}

const toOrganization = (doc: OrganizationDoc): Organization => ({
  id: doc.id,
  slug: doc.slug,
  name: doc.name,
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

  async count(): Promise<number> {
    return db(() => this.models.Organization.estimatedDocumentCount().exec());
  }
}
