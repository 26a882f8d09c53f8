/**
 * image.metadata: reads the image and reports what sharp reads from it, or
 * of a PDF its information as PDFium reads it (pages, page sizes, title,
 * author, producer, encryption, version; the page count is kept on its
 * record). A
 * result too large for Redis (a large XMP, EXIF or ICC block) is stored, within
 * its bounds, under the organization's `.results/` prefix and the job returns
 * a pointer to it (shared/job-result.ts, shared/stored-results.ts); the API
 * reads it, removes it and answers, or the workers remove it once expired.
 */
import { planResult } from '@shared/job-result';
import { scanRefusal } from '@shared/scan/scan';
import { formatOfMime } from '@shared/media/formats';
import type { Processor } from '../registry';
import { requireMedia, requireOrganization } from './inputs';

export const metadataProcessor: Processor<
  'image.metadata',
  'media' | 'results' | 'images' | 'limits' | 'organizations' | 'storedResults' | 'scan'
> = {
  name: 'image.metadata',
  async process(job, ctx) {
    const { organizationId, key } = job.data;
    const record = await requireMedia(ctx, organizationId, key);
    if (ctx.scan.enabled || record.scanStatus === 'infected') {
      // A file its organization's scan policy does not serve is not read (the API checked too).
      const refusal = scanRefusal(ctx.scan, await requireOrganization(ctx, organizationId), record);
      if (refusal) throw refusal;
    }
    const bytes = await ctx.results.read(record.key, ctx.limits.maxFileSize);
    const pdfInfo = async (input: Buffer) => {
      const info = await ctx.images.readPdfInfo(input, {
        signal: job.signal,
        timeoutMs: job.remainingMs(),
      });
      if (record.pages === undefined) {
        await ctx.media
          .setPages(organizationId, record.key, info.pages)
          .catch((err: unknown) => job.log.warn({ err }, 'could not record the PDF’s page count'));
      }
      return info;
    };
    const metadata =
      formatOfMime(record.mimetype)?.kind === 'pdf'
        ? await pdfInfo(bytes)
        : await ctx.images.readMetadata(bytes);
    // Buffers (exif, iptc, xmp, icc) travel as { type: 'Buffer', data: [...] }: the documented form.
    const plan = planResult({ metadata });
    if ('inline' in plan) return plan.inline;
    const organization = await requireOrganization(ctx, organizationId);
    const ref = await ctx.storedResults.save(organization, job.id, plan.stored, job.signal);
    job.log.info(ref.resultRef, 'result stored for the API');
    return ref;
  },
};
