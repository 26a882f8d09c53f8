/**
 * pdf.merge: merges PDFs in the given order into one new record. As the
 * interface gives it, its key is `merged_<timestamp>.pdf` at the bucket's root
 * (milliseconds of the job's creation, the next free one when another merge
 * holds it; claimed before the object is written, and kept by retries) and
 * its name is the object's full address in the store. Inputs uploaded with
 * the request sit under the organization's temporary prefix, in one bundle
 * (each input a range of it); they are removed when the job ends (here on
 * success, once the result is recorded and without holding up the answer; by
 * the worker's failure handler after the last attempt). The inputs' total is
 * checked from their records' sizes (the store's, for the bundle) before any
 * is read (MAX_MERGE_BYTES); every input and temporary key is checked against
 * the organization before any is read or removed (processors/inputs.ts).
 */
import { Errors } from '@shared/errors';
import { mergedKey } from '@shared/media/naming';
import { scanRefusal } from '@shared/scan/scan';
import type { Processor } from '../registry';
import { requireOrganization, requireOwnInputs } from './inputs';

export const mergePdfsProcessor: Processor<
  'pdf.merge',
  'results' | 'store' | 'organizations' | 'pdfs' | 'media' | 'limits' | 'background' | 'scan'
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
    // Stored inputs its organization's scan policy does not serve are no inputs (the API checked too).
    inputs.forEach(({ key }, index) => {
      const record = records.get(key);
      const refusal = record && scanRefusal(ctx.scan, organization, record);
      if (refusal) throw refusal.forInput(index, key);
    });
    // The total first (the API checked it too; this is the second line): nothing is
    // read for a merge over MAX_MERGE_BYTES. Stored inputs' sizes are their records'
    // (just read); uploaded parts are asked of the store. The reads below count the
    // bytes again, in case an object is not the size its record says.
    const { maxFileSize, maxMergeBytes } = ctx.limits;
    const uploaded = await ctx.results.sizes(
      [...new Set(inputs.map(({ key }) => key))].filter((key) => !records.has(key)),
    );
    // An uploaded input is a range of the request's bundle (or, queued before bundles, a
    // whole temporary object): it must lie within the object.
    inputs.forEach(({ key, range }, index) => {
      const size = records.get(key)?.bytes ?? uploaded.get(key)!;
      if (range && (range.offset < 0 || range.length < 0 || range.offset + range.length > size)) {
        throw Errors.badRequest(`Input ${index + 1} lies outside its uploaded bytes`).forInput(
          index,
          key,
        );
      }
    });
    const total = inputs.reduce(
      (n, { key, range }) => n + (range?.length ?? records.get(key)?.bytes ?? uploaded.get(key)!),
      0,
    );
    if (total > maxMergeBytes) {
      const mb = (n: number) => `${+(n / (1024 * 1024)).toFixed(1)} MB`;
      throw Errors.payloadTooLarge(
        `The PDFs to merge total ${mb(total)}, over the limit of ${mb(maxMergeBytes)}`,
      ).withExtra({ limit: maxMergeBytes });
    }
    // Each distinct key is read once, even when it is merged several times; several at once.
    // A bundle holds several files: its own bound is the total's.
    const bundles = new Set(inputs.flatMap(({ key, range }) => (range ? [key] : [])));
    const bytes = await ctx.results.readMany(
      inputs.map(({ key }) => key),
      (key) => (bundles.has(key) ? maxMergeBytes : maxFileSize),
      maxMergeBytes,
    );
    const merged = await ctx.pdfs.merge(
      inputs.map(({ key, name, range }) => {
        const data = bytes.get(key)!;
        return {
          name,
          data: range ? data.subarray(range.offset, range.offset + range.length) : data,
        };
      }),
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
      // Made of clean stored files only: recorded clean; an uploaded part makes it pending.
      fromCleanInputs: inputs.every(({ key }) => records.get(key)?.scanStatus === 'clean'),
    });
    // Off the answer's path (the worker's shutdown waits for it): a removal cut short by a
    // killed worker leaves a temporary object of a finished job, which reconcile removes
    // past its grace period.
    if (temporaryKeys.length > 0) {
      ctx.background.run(
        'remove the merge’s uploaded inputs',
        () => ctx.store.removeMany(temporaryKeys),
        {
          jobId: job.id,
          temporaryKeys,
        },
      );
    }
    job.log.info({ key: record.key, inputs: inputs.length, pages: merged.pages }, 'merged');
    return { mediaId: record.id };
  },
};
