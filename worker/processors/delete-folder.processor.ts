/**
 * media.delete-folder: deletes every file of a folder, a batch at a time, the
 * way a single delete does (shared/media-deletion.ts), reporting its progress,
 * then the folder. A retry (or a second run) carries on where it stopped:
 * deleted files are gone, and a file another delete took is skipped.
 */
import { Errors } from '@shared/errors';
import type { Processor } from '../registry';

/** Files deleted between two progress reports. */
const BATCH = 100;

export const deleteFolderProcessor: Processor<
  'media.delete-folder',
  'folders' | 'media' | 'deletion'
> = {
  name: 'media.delete-folder',
  async process(job, ctx) {
    const { organizationId, folderId } = job.data;
    const folder = await ctx.folders.findById(organizationId, folderId);
    if (!folder) throw Errors.folderNotFound(folderId);
    const total = (await ctx.media.folderUsage(organizationId, [folderId])).get(folderId);
    const deleted = { files: 0, bytes: 0 };
    await job.progress({ done: 0, total: total?.files ?? 0 });
    for (;;) {
      const ids = await ctx.media.ids(organizationId, folderId, BATCH);
      if (ids.length === 0) break;
      for (const id of ids) {
        const record = await ctx.media.findById(organizationId, id);
        if (record && (await ctx.deletion.delete(record))) {
          deleted.files++;
          deleted.bytes += record.bytes;
        }
      }
      await job.progress({ done: deleted.files, total: total?.files ?? deleted.files });
    }
    await ctx.folders.remove(organizationId, folderId);
    job.log.info({ folderId, ...deleted }, 'folder deleted');
    return { folder: { id: folder.id, name: folder.name }, deleted };
  },
};
