/**
 * media.delete-folder: deletes every file of a folder, a batch at a time, the
 * way a single delete does (shared/media-deletion.ts: to the trash when the
 * organization keeps one, with the folder's name), reporting its progress,
 * then the folder. It holds the folder throughout (the mark the API set,
 * renewed before each batch), so an upload committing into it meanwhile is
 * either listed and deleted here or sees the hold and undoes itself; the
 * folder is removed only while the mark holds. A retry (or a second run)
 * carries on where it stopped: deleted files are gone, and a file another
 * delete took is skipped.
 */
import { Errors } from '@shared/errors';
import type { Processor } from '../registry';

/** Files deleted between two progress reports. */
const BATCH = 100;

export const deleteFolderProcessor: Processor<
  'media.delete-folder',
  'folders' | 'media' | 'deletion' | 'events'
> = {
  name: 'media.delete-folder',
  async process(job, ctx) {
    const { organizationId, folderId } = job.data;
    const hold = () => ctx.folders.holdForDelete(organizationId, folderId, true);
    const folder = await hold();
    if (!folder) throw Errors.folderNotFound(folderId);
    const total = (await ctx.media.folderUsage(organizationId, [folderId])).get(folderId);
    const deleted = { files: 0, bytes: 0 };
    await job.progress({ done: 0, total: total?.files ?? 0 });
    for (;;) {
      const ids = await ctx.media.ids(organizationId, folderId, BATCH);
      if (ids.length === 0) {
        // None left while the mark holds: removed. Should the mark have run out,
        // hold the folder again and look once more (unless it is gone).
        if (await ctx.folders.removeHeld(organizationId, folderId)) {
          // Its folder.deleted event, recorded (the dispatcher's sweep does, should this fail).
          await ctx.events.promoteFolders({ ids: [folderId] }).catch(() => undefined);
          break;
        }
        if (!(await hold())) break;
        continue;
      }
      for (const id of ids) {
        const record = await ctx.media.findById(organizationId, id);
        // To the trash when the organization keeps one (restoring a file re-creates this folder).
        const discarded = record
          ? await ctx.deletion.discard(record, { folderName: folder.name })
          : { done: false };
        if (record && discarded.done) {
          deleted.files++;
          deleted.bytes += record.bytes;
        }
      }
      await job.progress({ done: deleted.files, total: total?.files ?? deleted.files });
      await hold();
    }
    job.log.info({ folderId, ...deleted }, 'folder deleted');
    return { folder: { id: folder.id, name: folder.name }, deleted };
  },
};
