/**
 * image.render: renders a variant of a stored image (GET /media/render) and
 * stores it beside its source: the object under `.variants/<key>/`, then the
 * variant on the source's record. Idempotent: a variant already on the
 * record is answered as it is. A source deleted meanwhile gets no variant:
 * the object just written is removed (the deletion may have listed the
 * variants before it existed).
 */
import { Errors } from '@shared/errors';
import type { StoredVariant } from '@shared/jobs';
import { variantId, variantKey } from '@shared/media/render-options';
import type { Processor } from '../registry';

export const renderProcessor: Processor<
  'image.render',
  'results' | 'variants' | 'images' | 'limits' | 'store'
> = {
  name: 'image.render',
  async process(job, ctx) {
    const { organizationId, key, options } = job.data;
    const id = variantId(options);
    const found = await ctx.variants.find(organizationId, key, id);
    if (!found) throw Errors.mediaNotFound(key);
    if (found.variant) return { variant: found.variant };
    const { record } = found;
    if (!record.mimetype.startsWith('image/')) {
      throw Errors.unsupportedType(`"${key}" is ${record.mimetype}, not an image`);
    }
    const input = await ctx.results.read(record.key, ctx.limits.maxFileSize);
    const output = await ctx.images.render(input, options);
    const variant: StoredVariant = {
      id,
      key: variantKey(record.key, options),
      mimetype: output.mime,
      bytes: output.data.length,
      width: output.width,
      height: output.height,
    };
    await ctx.store.put(variant.key, output.data, { contentType: output.mime });
    const added = await ctx.variants.add(record.id, variant);
    if (added === 'gone') {
      await ctx.store.remove(variant.key);
      throw Errors.mediaNotFound(key);
    }
    job.log.info({ source: record.key, key: variant.key, bytes: variant.bytes, added }, 'rendered');
    return { variant };
  },
};
