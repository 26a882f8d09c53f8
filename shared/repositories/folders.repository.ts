import type { FolderDoc, Models } from '../db/models';
import { db, isDuplicateKey } from '../db/errors';
import { folderSlug } from '../media/naming';
import type { CountersRepository } from './counters.repository';

export interface Folder {
  id: number;
  organizationId: number;
  name: string;
  slug: string;
}

const toFolder = (doc: FolderDoc): Folder => ({
  id: doc.id,
  organizationId: doc.organizationId,
  name: doc.name,
  slug: doc.slug,
});

export class FoldersRepository {
  constructor(
    private readonly models: Pick<Models, 'Folder'>,
    private readonly counters: CountersRepository,
  ) {}

  async findById(organizationId: number, id: number): Promise<Folder | null> {
    const doc = await db(() => this.models.Folder.findOne({ organizationId, id }).lean().exec());
    return doc ? toFolder(doc) : null;
  }

  async findByName(organizationId: number, name: string): Promise<Folder | null> {
    const doc = await db(() => this.models.Folder.findOne({ organizationId, name }).lean().exec());
    return doc ? toFolder(doc) : null;
  }

  /** Finds the organization's folder of this name, creating it when missing (safe under races). */
  async findOrCreate(organizationId: number, name: string): Promise<Folder> {
    const existing = await this.findByName(organizationId, name);
    if (existing) return existing;
    const id = await this.counters.next('folders');
    try {
      const doc = await db(() =>
        this.models.Folder.create({ id, organizationId, name, slug: folderSlug(name) }),
      );
      return toFolder(doc);
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
      // Another request created it first.
      const raced = await this.findByName(organizationId, name);
      if (!raced) throw err;
      return raced;
    }
  }
}
