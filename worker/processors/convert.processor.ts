/**
 * image.convert: converts a stored image to another format (auto-oriented),
 * and stores the result as a new record with the source's name and folder.
 */
import { scanRefusal } from '@shared/scan/scan';
import type { Processor } from '../registry';
import { requireMedia, requireOrganization } from './inputs';

export const convertProcessor: Processor<
  'image.convert',
  'results' | 'organizations' | 'media' | 'images' | 'limits' | 'scan'
> = {
  name: 'image.convert',
  async process(job, ctx) {
    const { organizationId, key, format, quality, origin, tokenId } = job.data;
    // A previous attempt's record, the organization and the source: one round trip's time.
    // (A written result wins over a source or organization gone since.)
    const [done, organization, source] = await Promise.all([
      ctx.results.existing(job.id),
      requireOrganization(ctx, organizationId).catch((err: unknown) => err as Error),
      requireMedia(ctx, organizationId, key).catch((err: unknown) => err as Error),
    ]);
    if (done) return { mediaId: done.id };
    if (organization instanceof Error) throw organization;
    if (source instanceof Error) throw source;
    // A source its organization's scan policy does not serve is no input (the API checked too).
    const refusal = scanRefusal(ctx.scan, organization, source);
    if (refusal) throw refusal;
    const input = await ctx.results.read(source.key, ctx.limits.maxFileSize);
    job.signal.throwIfAborted();
    // Stopped when the job's time is up; the write below drops a late result.
    const output = await ctx.images.convert(input, format, {
      ...(quality === undefined ? {} : { quality }),
      signal: job.signal,
      timeoutMs: job.remainingMs(),
    });
    const record = await ctx.results.write({
      signal: job.signal,
      jobId: job.id,
      organization,
      folderId: source.folderId,
      name: source.name,
      mimetype: output.mime,
      ext: output.ext,
      data: output.data,
      origin,
      createdBy: tokenId,
      // Made of a clean file: recorded clean, not scanned again (docs/operations.md).
      fromCleanInputs: source.scanStatus === 'clean',
    });
    job.log.info({ source: source.key, key: record.key, bytes: record.bytes }, 'converted');
    return { mediaId: record.id };
  },
};
