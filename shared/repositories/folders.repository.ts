import type { FolderDoc, Models } from '../db/models';
import { db, isDuplicateKey } from '../db/errors';
import { folderSlug } from '../media/naming';
import type { CountersRepository } from './counters.repository';

export interface Folder {
  id: number;
  organizationId: number;
  name: string;
  /** The folder's part of new keys (from its name; existing keys keep theirs on a rename). */
  slug: string;
  createdAt: Date;
  updatedAt: Date;
}

const toFolder = (doc: FolderDoc): Folder => ({
  id: doc.id,
  organizationId: doc.organizationId,
  name: doc.name,
  slug: doc.slug,
  createdAt: doc.createdAt,
  updatedAt: doc.updatedAt,
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

  /** The organization's folders, by name. */
  async list(organizationId: number): Promise<Folder[]> {
    const docs = await db(() =>
      this.models.Folder.find({ organizationId }).sort({ name: 1 }).lean().exec(),
    );
    return docs.map(toFolder);
  }

  /** Creates a folder; null when the organization has one of that name. */
  async create(organizationId: number, name: string): Promise<Folder | null> {
    const id = await this.counters.next('folders');
    try {
      const doc = await db(() =>
        this.models.Folder.create({ id, organizationId, name, slug: folderSlug(name) }),
      );
      return toFolder(doc);
    } catch (err) {
      if (isDuplicateKey(err)) return null;
      throw err;
    }
  }

  /**
   * Renames a folder (its slug follows, for new keys only); 'taken' when
   * another folder has that name, null when there is no such folder.
   */
  async rename(organizationId: number, id: number, name: string): Promise<Folder | 'taken' | null> {
    try {
      const doc = await db(() =>
        this.models.Folder.findOneAndUpdate(
          { organizationId, id },
          { $set: { name, slug: folderSlug(name) } },
          { returnDocument: 'after', lean: true },
        ).exec(),
      );
      return doc ? toFolder(doc) : null;
    } catch (err) {
      if (isDuplicateKey(err)) return 'taken';
      throw err;
    }
  }

  /** Removes a folder (its records must be gone); false when there was none. */
  async remove(organizationId: number, id: number): Promise<boolean> {
    const result = await db(() => this.models.Folder.deleteOne({ organizationId, id }).exec());
    return result.deletedCount === 1;
  }

  async removeAll(organizationId: number): Promise<number> {
    const result = await db(() => this.models.Folder.deleteMany({ organizationId }).exec());
    return result.deletedCount;
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
