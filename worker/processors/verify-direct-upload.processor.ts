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
import { createHash } from 'node:crypto';
import { Errors } from '@shared/errors';
import { DETECTION_BYTES, detectType } from '@shared/media/media-types';
import { DIRECT_SEGMENT } from '@shared/uploads/direct-uploads';
import type { Processor } from '../registry';
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
    const hash = createHash('sha256');
    const head: Buffer[] = [];
    let headBytes = 0;
    let bytes = 0;
    for await (const chunk of await ctx.store.get(key)) {
      job.signal.throwIfAborted();
      const buffer = chunk as Buffer;
      hash.update(buffer);
      bytes += buffer.length;
      if (headBytes < DETECTION_BYTES) {
        head.push(buffer.subarray(0, DETECTION_BYTES - headBytes));
        headBytes += Math.min(buffer.length, DETECTION_BYTES - headBytes);
      }
    }
    const type = headBytes === 0 ? undefined : await detectType(Buffer.concat(head));
    return { bytes, sha256: hash.digest('hex'), mime: type?.mime ?? null };
  },
};
