/** image.metadata: reads the image and reports what sharp reads from it. */
import type { Processor } from '../registry';
import { requireMedia } from './inputs';

export const metadataProcessor: Processor<
  'image.metadata',
  'media' | 'results' | 'images' | 'limits'
> = {
  name: 'image.metadata',
  async process(job, ctx) {
    const record = await requireMedia(ctx, job.data.organizationId, job.data.key);
    const bytes = await ctx.results.read(record.key, ctx.limits.maxFileSize);
    const metadata = await ctx.images.readMetadata(bytes);
    // Buffers (exif, iptc, xmp) travel as { type: 'Buffer', data: [...] }: the documented form.
    return { metadata: JSON.parse(JSON.stringify(metadata)) as Record<string, unknown> };
  },
};
