/**
 * image.metadata: reads the image and reports what sharp reads from it. A
 * result too large for Redis (a large XMP, EXIF or ICC block) is written to
 * the organization's `.results/` prefix and the job returns a pointer to it
 * (shared/job-result.ts); the API reads it, removes it and answers.
 */
import { planResult, resultKey } from '@shared/job-result';
import type { Processor } from '../registry';
import { requireMedia, requireOrganization } from './inputs';

export const metadataProcessor: Processor<
  'image.metadata',
  'media' | 'results' | 'images' | 'limits' | 'organizations' | 'store'
> = {
  name: 'image.metadata',
  async process(job, ctx) {
    const { organizationId, key } = job.data;
    const record = await requireMedia(ctx, organizationId, key);
    const bytes = await ctx.results.read(record.key, ctx.limits.maxFileSize);
    const metadata = await ctx.images.readMetadata(bytes);
    // Buffers (exif, iptc, xmp, icc) travel as { type: 'Buffer', data: [...] }: the documented form.
    const plan = planResult({ metadata });
    if ('inline' in plan) return plan.inline;
    const organization = await requireOrganization(ctx, organizationId);
    const stored = resultKey(organization.slug, job.id);
    job.signal.throwIfAborted();
    await ctx.store.put(stored, plan.stored, { contentType: 'application/json' });
    job.log.info({ key: stored, bytes: plan.stored.length }, 'result stored for the API');
    return { resultRef: { key: stored, bytes: plan.stored.length } };
  },
};
