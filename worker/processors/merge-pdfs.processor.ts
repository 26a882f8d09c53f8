/**
 * pdf.merge: merges PDFs in the given order into one new record. As the
 * interface gives it, its key is `merged_<timestamp>.pdf` at the bucket's root
 * (milliseconds of the job's creation, the next free one when another merge
 * holds it; claimed before the object is written, and kept by retries) and
 * its name is the object's full address in the store. Inputs uploaded with
 * the request sit under the organization's temporary prefix; they are removed
 * when the job ends (here on success, by the worker's failure handler after
 * the last attempt). Every input and temporary key is checked against the
 * organization before any is read or removed (processors/inputs.ts).
 */
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
    const organization = await requireOrganization(ctx, organizationId);
    // Before anything is read or removed: every key is this organization's.
    await requireOwnInputs(
      ctx,
      organization,
      inputs.map(({ key }) => key),
      temporaryKeys,
    );
    const done = await ctx.results.existing(job.id);
    if (done) {
      await ctx.store.removeMany(temporaryKeys);
      return { mediaId: done.id };
    }
    // Each distinct key is read once, even when it is merged several times; several at once.
    const bytes = await ctx.results.readMany(
      inputs.map(({ key }) => key),
      ctx.limits.maxFileSize,
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
