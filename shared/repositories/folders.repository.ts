/**
 * An organization's folders. A folder being deleted is held by its delete
 * (`holdForDelete`: a mark with an expiry, renewed while the delete works)
 * and is gone for every lookup from that moment: an upload or a job result
 * names it no more, and one that named it before commits its record and then
 * asks `isLive`, undoing itself when the folder is held or gone. Of the
 * delete (mark, then look for records) and the writer (insert, then look for
 * the mark), one always sees the other, so no record stays in a folder that
 * no longer exists. A delete that dies lets the folder go when its mark
 * expires (FOLDER_DELETE_HOLD_MS).
 */
import type { FolderDoc, Models } from '../db/models';
import { db, isDuplicateKey } from '../db/errors';
import { pendingEvent } from '../events/events';
import { REMOVED_NAME_SEPARATOR } from '../events/outbox';
import { folderSlug } from '../media/naming';
import type { CountersRepository } from './counters.repository';

/**
 * How long a delete holds a folder without renewing its mark: far longer than
 * a batch of a recursive delete takes (it renews before each); a delete that
 * died lets the folder show again after this.
 */
export const FOLDER_DELETE_HOLD_MS = 5 * 60_000;

/** Not removed (a removed folder's document waits only for its event to be recorded). */
const PRESENT = { removedAt: null } as const;

/** Folders no delete holds (never marked, or marked by a delete that died), not removed. */
const live = (now: Date) => ({
  ...PRESENT,
  $or: [{ deletingUntil: null }, { deletingUntil: { $lte: now } }],
});

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
    private readonly clock: () => Date = () => new Date(),
  ) {}

  async findById(organizationId: number, id: number): Promise<Folder | null> {
    const doc = await db(() =>
      this.models.Folder.findOne({ organizationId, id, ...live(this.clock()) })
        .lean()
        .exec(),
    );
    return doc ? toFolder(doc) : null;
  }

  async findByName(organizationId: number, name: string): Promise<Folder | null> {
    const doc = await db(() =>
      this.models.Folder.findOne({ organizationId, name, ...live(this.clock()) })
        .lean()
        .exec(),
    );
    return doc ? toFolder(doc) : null;
  }

  /**
   * Whether the folder still exists and no delete holds it: asked by a
   * writer after its record is in (see the file's header).
   */
  async isLive(organizationId: number, id: number): Promise<boolean> {
    return (await this.findById(organizationId, id)) !== null;
  }

  /** The organization's folders, by name. */
  async list(organizationId: number): Promise<Folder[]> {
    const docs = await db(() =>
      this.models.Folder.find({ organizationId, ...live(this.clock()) })
        .sort({ name: 1 })
        .lean()
        .exec(),
    );
    return docs.map(toFolder);
  }

  /**
   * Marks the folder as held by a delete for FOLDER_DELETE_HOLD_MS (from now
   * on no lookup finds it); `renew`: a delete that holds it already (its job)
   * moves the mark on, otherwise only a folder no delete holds is taken. Null
   * when there is no such folder (or another delete holds it).
   */
  async holdForDelete(organizationId: number, id: number, renew = false): Promise<Folder | null> {
    const now = this.clock();
    const doc = await db(() =>
      this.models.Folder.findOneAndUpdate(
        { organizationId, id, ...(renew ? PRESENT : live(now)) },
        { $set: { deletingUntil: new Date(now.getTime() + FOLDER_DELETE_HOLD_MS) } },
        { returnDocument: 'after', lean: true, timestamps: false },
      ).exec(),
    );
    return doc ? toFolder(doc) : null;
  }

  /** Lets a held folder go (a delete that was refused, or could not start). */
  async release(organizationId: number, id: number): Promise<void> {
    await db(() =>
      this.models.Folder.updateOne(
        { organizationId, id, ...PRESENT },
        { $set: { deletingUntil: null } },
        { timestamps: false },
      ).exec(),
    );
  }

  /**
   * Removes a folder its delete holds (its records must be gone), only while
   * the mark holds: false when it does not (the mark expired: renew, look for
   * records again), or the folder is gone. The removal and its
   * `folder.deleted` event are one update: the document stays, renamed out of
   * the way of a new folder of that name and gone for every lookup, until the
   * outbox has recorded the event (shared/events/outbox.ts).
   */
  async removeHeld(organizationId: number, id: number): Promise<boolean> {
    const held = await db(() =>
      this.models.Folder.findOne({ organizationId, id, ...PRESENT }, { name: 1 })
        .lean()
        .exec(),
    );
    if (!held) return false;
    const now = this.clock();
    // A held folder cannot be renamed: its name is the one just read.
    const result = await db(() =>
      this.models.Folder.updateOne(
        { organizationId, id, name: held.name, ...PRESENT, deletingUntil: { $gt: now } },
        {
          $set: { removedAt: now, name: `${held.name}${REMOVED_NAME_SEPARATOR}${id}` },
          $push: { pendingEvents: pendingEvent('folder.deleted', id, now) },
        },
        { timestamps: false },
      ).exec(),
    );
    return result.modifiedCount === 1;
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
          { organizationId, id, ...live(this.clock()) },
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

  async removeAll(organizationId: number): Promise<number> {
    const result = await db(() => this.models.Folder.deleteMany({ organizationId }).exec());
    return result.deletedCount;
  }

  /**
   * Finds the organization's folder of this name, creating it when missing
   * (safe under races); 'deleting' while a delete holds the folder of that
   * name (the name is free once it is gone).
   */
  async findOrCreate(organizationId: number, name: string): Promise<Folder | 'deleting'> {
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
      // Another request created it first, or a delete holds the folder of that name.
      const raced = await this.findByName(organizationId, name);
      return raced ?? 'deleting';
    }
  }
}
