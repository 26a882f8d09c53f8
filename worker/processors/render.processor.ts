/**
 * image.render: renders a variant of a stored image (GET /media/render) and
 * stores it beside its source: the object under `.variants/<key>/`, then the
 * variant on the source's record. A small variant is also handed to the
 * waiting API requests through Redis, so they answer without reading it
 * back. Idempotent: a retry writes the same object and finds the variant
 * recorded. A source deleted meanwhile gets no variant:
 * the object just written is removed (the deletion may have listed the
 * variants before it existed).
 *
 * Within the job's time limit: the render stops when it runs out (sharp's
 * own timeout, the HEIC decoding thread ended), and a job whose time is up
 * writes nothing: the signal is checked before the object and before the
 * record, and what was written as it ran out is taken back.
 */
import { Errors } from '@shared/errors';
import type { StoredVariant } from '@shared/jobs';
import { variantId, variantKey } from '@shared/media/render-options';
import type { JobContext } from '../context';
import type { Processor, ProcessorJob } from '../registry';

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
    job.signal.throwIfAborted();
    const t1 = performance.now();
    const output = await ctx.images.render(input, options, {
      signal: job.signal,
      timeoutMs: job.remainingMs(),
    });
    const t2 = performance.now();
    const variant: StoredVariant = {
      id: variantId(options),
      key: variantKey(key, options),
      mimetype: output.mime,
      bytes: output.data.length,
      width: output.width,
      height: output.height,
    };
    // A render that ended as the time ran out (the GIF and AVIF encoders cannot be stopped)
    // has failed already: nothing of it is written.
    job.signal.throwIfAborted();
    // The waiting API requests take the bytes from Redis rather than read them back from
    // storage (shared/queue/handoff.ts); storage stays the truth, written before the record.
    await Promise.all([
      ctx.store.put(variant.key, output.data, { contentType: output.mime }),
      ctx.handoff.offer(job.id, output.data),
    ]);
    if (job.signal.aborted) await takeBack(job, ctx, variant, false);
    const t3 = performance.now();
    // `present`: an earlier attempt recorded it (the same bytes were written again).
    const added = await ctx.variants.add(organizationId, key, variant);
    if (added === 'gone') {
      await ctx.store.remove(variant.key);
      throw Errors.mediaNotFound(key);
    }
    if (job.signal.aborted) await takeBack(job, ctx, variant, added === 'added');
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

/**
 * The job's time ran out while its variant was written (`recorded`: and
 * added to the record by this attempt): the variant is taken off the record
 * and its object removed, then the job's timeout is thrown. An object that
 * another attempt has recorded (the same bytes) is left alone.
 */
async function takeBack(
  job: ProcessorJob<'image.render'>,
  ctx: Pick<JobContext, 'store' | 'variants'>,
  variant: StoredVariant,
  recorded: boolean,
): Promise<never> {
  const { organizationId, key } = job.data;
  try {
    if (recorded) await ctx.variants.remove(organizationId, key, variant.id);
    const found = await ctx.variants.find(organizationId, key, variant.id);
    if (!found?.variant) await ctx.store.remove(variant.key);
  } catch (err) {
    // Left for reconcile (a variant object without its record is found there).
    job.log.warn(
      { err, key: variant.key },
      'could not take back a variant written as time ran out',
    );
  }
  // The job's own error (422 PROCESSING_TIMEOUT): the signal has aborted.
  throw job.signal.reason;
}
