/**
 * media.import: fetches a URL through the guarded way out and stores it as a
 * new record (worker/services/import.service.ts). A retry (a stalled job
 * taken over) finds the record an earlier attempt wrote.
 */
import type { Processor } from '../registry';
import { requireOrganization } from './inputs';

export const importProcessor: Processor<'media.import', 'results' | 'organizations' | 'imports'> = {
  name: 'media.import',
  async process(job, ctx) {
    const [done, organization] = await Promise.all([
      ctx.results.existing(job.id),
      requireOrganization(ctx, job.data.organizationId).catch((err: unknown) => err as Error),
    ]);
    if (done) return { mediaId: done.id };
    if (organization instanceof Error) throw organization;
    const record = await ctx.imports.import(job, organization, job.data);
    job.log.info({ key: record.key, bytes: record.bytes }, 'imported');
    return { mediaId: record.id };
  },
};
