/**
 * image.convert: converts a stored image to another format (auto-oriented),
 * and stores the result as a new record with the source's name and folder.
 */
import type { Processor } from '../registry';
import { requireMedia, requireOrganization } from './inputs';

export const convertProcessor: Processor<
  'image.convert',
  'results' | 'organizations' | 'media' | 'images' | 'limits'
> = {
  name: 'image.convert',
  async process(job, ctx) {
    const done = await ctx.results.existing(job.id);
    if (done) return { mediaId: done.id };
    const { organizationId, key, format, quality, origin, tokenId } = job.data;
    const organization = await requireOrganization(ctx, organizationId);
    const source = await requireMedia(ctx, organizationId, key);
    const input = await ctx.results.read(source.key, ctx.limits.maxFileSize);
    const output = await ctx.images.convert(input, format, {
      ...(quality === undefined ? {} : { quality }),
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
    });
    job.log.info({ source: source.key, key: record.key, bytes: record.bytes }, 'converted');
    return { mediaId: record.id };
  },
};
