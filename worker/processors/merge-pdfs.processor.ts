/**
 * pdf.merge: merges PDFs in the given order into one new record. As the
 * interface gives it, its key is `merged_<timestamp>.pdf` at the bucket's root
 * (milliseconds of the job's creation, the next free one when another merge
 * holds it; claimed before the object is written, and kept by retries) and
 * its name is the object's full address in the store. Inputs uploaded with
 * the request sit under the organization's temporary prefix; they are removed
 * when the job ends (here on success, by the worker's failure handler after
 * the last attempt). The inputs' total is checked from their records' sizes
 * (the store's, for uploaded parts) before any is read (MAX_MERGE_BYTES); every input and temporary key
 * is checked against the organization before any is read or removed
 * (processors/inputs.ts).
 */
import { Errors } from '@shared/errors';
import { mergedKey } from '@shared/media/naming';
import type { Processor } from '../registry';
import { requireOrganization, requireOwnInputs } from './inputs';

export const mergePdfsProcessor: Processor<
  'pdf.merge',
  'results' | 'store' | 'organizations' | 'pdfs' | 'media' | 'limits'
> = {
  name: 'pdf.merge',
  async process(job, ctx) {
    const { organizationId, inputs, folderId, origin, tokenId, temporaryKeys } = job.data;
    // A previous attempt's record and the organization: one round trip's time.
    const [done, organization] = await Promise.all([
      ctx.results.existing(job.id),
      requireOrganization(ctx, organizationId).catch((err: unknown) => err as Error),
    ]);
    if (organization instanceof Error) {
      if (done) return { mediaId: done.id };
      throw organization;
    }
    // Before anything is read or removed: every key is this organization's.
    const records = await requireOwnInputs(
      ctx,
      organization,
      inputs.map(({ key }) => key),
      temporaryKeys,
    );
    if (done) {
      await ctx.store.removeMany(temporaryKeys);
      return { mediaId: done.id };
    }
    // The total first (the API checked it too; this is the second line): nothing is
    // read for a merge over MAX_MERGE_BYTES. Stored inputs' sizes are their records'
    // (just read); uploaded parts are asked of the store. The reads below count the
    // bytes again, in case an object is not the size its record says.
    const { maxFileSize, maxMergeBytes } = ctx.limits;
    const uploaded = await ctx.results.sizes(
      [...new Set(inputs.map(({ key }) => key))].filter((key) => !records.has(key)),
    );
    const total = inputs.reduce(
      (n, { key }) => n + (records.get(key)?.bytes ?? uploaded.get(key)!),
      0,
    );
    if (total > maxMergeBytes) {
      const mb = (n: number) => `${+(n / (1024 * 1024)).toFixed(1)} MB`;
      throw Errors.payloadTooLarge(
        `The PDFs to merge total ${mb(total)}, over the limit of ${mb(maxMergeBytes)}`,
      ).withExtra({ limit: maxMergeBytes });
    }
    // Each distinct key is read once, even when it is merged several times; several at once.
    const bytes = await ctx.results.readMany(
      inputs.map(({ key }) => key),
      maxFileSize,
      maxMergeBytes,
    );
    const merged = await ctx.pdfs.merge(
      inputs.map(({ key, name }) => ({ name, data: bytes.get(key)! })),
    );
    const key = await ctx.media.claimKey(job.id, organizationId, job.timestamp, mergedKey);
    const record = await ctx.results.write({
      signal: job.signal,
      jobId: job.id,
      organization,
      folderId,
      key,
      name: ctx.store.address(key),
      mimetype: 'application/pdf',
      ext: 'pdf',
      data: merged.data,
      origin,
      createdBy: tokenId,
    });
    await ctx.store.removeMany(temporaryKeys);
    job.log.info({ key: record.key, inputs: inputs.length, pages: merged.pages }, 'merged');
    return { mediaId: record.id };
  },
};
