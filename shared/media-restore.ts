/**
 * Restoring a file from the trash, the one way the API's restore and
 * `reconcile` do it: mark the record (`restoringAt`: the purge leaves it
 * alone from then on), find its folder (the one it was in, or a folder of the
 * same name, re-created when gone), then one update takes it out of the trash
 * into that folder with its `media.restored` event. Its object never moved,
 * so records = objects at every step; a restore cut off after the mark is
 * finished by `reconcile` (api/services/reconcile.service.ts).
 */
import { Errors } from './errors';
import type { EventOutbox } from './events/outbox';
import type { FoldersRepository } from './repositories/folders.repository';
import type { MediaRecord, MediaRepository } from './repositories/media.repository';

export class MediaRestore {
  constructor(
    private readonly deps: {
      media: MediaRepository;
      folders: Pick<FoldersRepository, 'findById' | 'findOrCreate'>;
      events: Pick<EventOutbox, 'promoteMedia'>;
      now?: () => Date;
    },
  ) {}

  /** Restores a trashed record; the record as restored, or null when it left the trash meanwhile. */
  async restore(record: MediaRecord): Promise<MediaRecord | null> {
    const now = this.deps.now?.() ?? new Date();
    if (!(await this.deps.media.markRestoring(record.id, now))) return null;
    return this.finish(record);
  }

  /** The steps after the mark: the folder, then out of the trash (a second finish changes nothing). */
  async finish(record: MediaRecord): Promise<MediaRecord | null> {
    const folderId = await this.folderFor(record);
    await this.deps.media.finishRestore(record.id, folderId, this.deps.now?.() ?? new Date());
    await this.deps.events.promoteMedia({ ids: [record.id] }).catch(() => undefined);
    return this.deps.media.findById(record.organizationId, record.id);
  }

  /**
   * Where the file goes back: its folder if it is still there; else the
   * organization's folder of the name it had (made again if none); the root
   * when it was in no folder.
   */
  private async folderFor(record: MediaRecord): Promise<number | null> {
    if (record.folderId === null) return null;
    const org = record.organizationId;
    if (await this.deps.folders.findById(org, record.folderId)) return record.folderId;
    const name = record.trashedFrom?.name;
    // A file trashed with no folder name known (its folder was mid-delete): back to the root.
    if (!name) return null;
    const folder = await this.deps.folders.findOrCreate(org, name);
    if (folder === 'deleting') {
      throw Errors.conflict(
        `The folder "${name}" is being deleted; restore the file once the delete has finished`,
      );
    }
    return folder.id;
  }
}
