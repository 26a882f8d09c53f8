/**
 * media.expire-resumable: a repeatable job on the maintenance queue (every
 * RESUMABLE_CLEANUP_INTERVAL_MS, scheduled by the workers that take that
 * queue) that removes the resumable (tus) uploads past their `Upload-Expires`:
 * their multipart uploads aborted, their temporary objects removed, their
 * state left as a tombstone (410) for a day (shared/resumable-uploads.ts).
 * Idempotent: a run cut off is finished by the next.
 */
import type { Processor } from '../registry';

export const expireResumableProcessor: Processor<'media.expire-resumable', 'resumable'> = {
  name: 'media.expire-resumable',
  async process(job, ctx) {
    const expired = await ctx.resumable.expire();
    if (expired > 0) job.log.info({ expired }, 'expired resumable uploads removed');
    return { expired };
  },
};
