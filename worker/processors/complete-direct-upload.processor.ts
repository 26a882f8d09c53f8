/**
 * upload.complete-direct: completes a direct-to-storage upload on a worker
 * (worker/services/direct-completion.service.ts, docs/direct-uploads.md): its
 * object read back once for its type and SHA-256, checked, copied to its final
 * key and recorded. Only the organization's own upload is read.
 */
import type { Processor } from '../registry';
import { requireOrganization } from './inputs';

export const completeDirectUploadProcessor: Processor<
  'upload.complete-direct',
  'organizations' | 'directCompletions'
> = {
  name: 'upload.complete-direct',
  async process(job, ctx) {
    const org = await requireOrganization(ctx, job.data.organizationId);
    const record = await ctx.directCompletions.complete(job, org, job.data);
    job.log.info({ key: record.key, bytes: record.bytes }, 'direct upload recorded');
    return { mediaId: record.id };
  },
};
