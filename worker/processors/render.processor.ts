/**
 * image.render: renders a variant of a stored image (GET /media/render) and
 * stores it beside its source: the object under `.variants/<key>/`, then the
 * variant on the source's record. A small variant is also handed to the
 * waiting API requests through Redis, so they answer without reading it
 * back. Idempotent: a retry writes the same object and finds the variant
 * recorded. A source deleted meanwhile gets no variant:
 * the object just written is removed (the deletion may have listed the
 * variants before it existed).
 */
import { Errors } from '@shared/errors';
import type { StoredVariant } from '@shared/jobs';
import { variantId, variantKey } from '@shared/media/render-options';
import type { Processor } from '../registry';

export const renderProcessor: Processor<
  'image.render',
  'results' | 'variants' | 'images' | 'limits' | 'store' | 'handoff'
> = {
  name: 'image.render',
  async process(job, ctx) {
    // The API has checked the source (an image of the organization) and that the variant is
    // not stored: the job goes straight to the bytes. A source deleted since fails the read
    // (404), or is found gone when the variant is added.
    const { organizationId, key, options } = job.data;
    const t0 = performance.now();
    const input = await ctx.results.read(key, ctx.limits.maxFileSize);
    const t1 = performance.now();
    const output = await ctx.images.render(input, options);
    const t2 = performance.now();
    const variant: StoredVariant = {
      id: variantId(options),
      key: variantKey(key, options),
      mimetype: output.mime,
      bytes: output.data.length,
      width: output.width,
      height: output.height,
    };
    // The waiting API requests take the bytes from Redis rather than read them back from
    // storage (shared/queue/handoff.ts); storage stays the truth, written before the record.
    await Promise.all([
      ctx.store.put(variant.key, output.data, { contentType: output.mime }),
      ctx.handoff.offer(job.id, output.data),
    ]);
    const t3 = performance.now();
    // `present`: an earlier attempt recorded it (the same bytes were written again).
    const added = await ctx.variants.add(organizationId, key, variant);
    if (added === 'gone') {
      await ctx.store.remove(variant.key);
      throw Errors.mediaNotFound(key);
    }
    const ms = (a: number, b: number) => Math.round(b - a);
    job.log.info(
      {
        source: key,
        key: variant.key,
        bytes: variant.bytes,
        added,
        // Where the job's time went (ms): source read, render, variant write, record update.
        phases: {
          read: ms(t0, t1),
          render: ms(t1, t2),
          write: ms(t2, t3),
          record: ms(t3, performance.now()),
        },
      },
      'rendered',
    );
    return { variant };
  },
};
