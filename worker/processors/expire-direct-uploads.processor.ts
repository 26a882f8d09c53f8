/**
 * upload.expire-direct: a repeatable job on the maintenance queue (every
 * minute, scheduled by the workers that take that queue) that removes what
 * direct-to-storage uploads never completed left past their expiry: the
 * object in quarantine or the open multipart upload, the quota booking, the
 * state (shared/uploads/direct-uploads.ts). Idempotent: a run cut off leaves
 * the rest to the next one.
 */
import type { Processor } from '../registry';

export const expireDirectUploadsProcessor: Processor<'upload.expire-direct', 'directUploads'> = {
  name: 'upload.expire-direct',
  async process(job, ctx) {
    const removed = await ctx.directUploads.cleanupExpired();
    if (removed > 0) job.log.info({ removed }, 'expired direct uploads removed');
    return { removed };
  },
};
