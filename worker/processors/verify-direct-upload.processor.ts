/**
 * upload.verify-direct: a direct-to-storage upload's object read back once,
 * in the worker rather than in the API: its type detected from the first
 * bytes and its SHA-256 computed as the bytes stream by; the API compares
 * them with what the client declared and makes the record. Only the
 * organization's own quarantine keys are read.
 *
 * What API replicas older than upload.complete-direct (which does all of
 * the completion on the worker: complete-direct-upload.processor.ts) queue:
 * kept so that workers upgraded first serve them during a rolling upgrade
 * (docs/jobs.md). Nothing queues it any more; it can go in a later release.
 */
import { Errors } from '@shared/errors';
import { DIRECT_SEGMENT } from '@shared/uploads/direct-uploads';
import type { Processor } from '../registry';
import { readBack } from '../services/direct-completion.service';
import { requireOrganization } from './inputs';

export const verifyDirectUploadProcessor: Processor<
  'upload.verify-direct',
  'organizations' | 'store'
> = {
  name: 'upload.verify-direct',
  async process(job, ctx) {
    const { organizationId, key } = job.data;
    const org = await requireOrganization(ctx, organizationId);
    const rest = key.startsWith(`${org.slug}${DIRECT_SEGMENT}`)
      ? key.slice(org.slug.length + DIRECT_SEGMENT.length)
      : '';
    if (!/^[A-Za-z0-9-]+$/.test(rest)) throw Errors.uploadNotFound();
    return readBack(ctx.store, key, job.signal);
  },
};
