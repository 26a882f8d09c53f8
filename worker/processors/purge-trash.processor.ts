/**
 * media.purge-trash: a repeatable job on the maintenance queue (every
 * TRASH_PURGE_INTERVAL_MS, scheduled by the workers that take that queue)
 * that deletes, the way every delete does (shared/media-deletion.ts: bytes,
 * variants, record, usage given back, `media.deleted` event), the files kept
 * in the trash past their organization's retention. A purge cut off leaves
 * marked records that `reconcile` (and the next run's own delete) finish.
 */
import type { Processor } from '../registry';

/** Records read (and deleted) at a time. */
const BATCH = 100;

export const purgeTrashProcessor: Processor<'media.purge-trash', 'media' | 'deletion'> = {
  name: 'media.purge-trash',
  async process(job, ctx) {
    const now = Date.now();
    const purged = { files: 0, bytes: 0 };
    for (const organizationId of await ctx.media.organizationsWithTrash()) {
      const retentionS = await ctx.deletion.retentionOf(organizationId);
      const before = new Date(now - retentionS * 1000);
      for (;;) {
        const records = await ctx.media.trashedBefore(organizationId, before, BATCH);
        let progressed = 0;
        for (const record of records) {
          if (await ctx.deletion.delete(record)) {
            purged.files++;
            purged.bytes += record.bytes;
            progressed++;
          }
        }
        // A batch of records another delete or a restore took: look no further this run.
        if (records.length < BATCH || progressed === 0) break;
      }
    }
    if (purged.files > 0) job.log.info(purged, 'trash purged');
    return { purged };
  },
};
