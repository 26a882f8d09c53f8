/**
 * image.render: renders a variant of a stored image (GET /media/render) and
 * stores it beside its source: the object under `.variants/<key>/`, then the
 * variant on the source's record. A small variant is also handed to the
 * waiting API requests through Redis, so they answer without reading it
 * back.
 *
 * Bounded where it is written: the variant's bytes are reserved against the
 * organization's quota before the object is written (413 QUOTA_EXCEEDED past
 * it), and the record takes it only while it has fewer than
 * RENDER_MAX_VARIANTS (400 past it; the same update checks, so renders at
 * once never pass it). A render that is refused after writing (the bound
 * reached meanwhile, the source deleted, the time limit) removes its object
 * and gives its bytes back. Idempotent: a retry finds the variant recorded.
 *
 * Within the job's time limit: the render stops when it runs out (sharp's
 * own timeout, the HEIC decoding thread ended), and a job whose time is up
 * writes nothing: the signal is checked before the object and before the
 * record, and what was written as it ran out is taken back.
 */
import { Errors } from '@shared/errors';
import type { StoredVariant } from '@shared/jobs';
import { variantId, variantKey } from '@shared/media/render-options';
import type { AddVariantOutcome } from '@shared/repositories/variants.repository';
import type { JobContext } from '../context';
import type { Processor, ProcessorJob } from '../registry';
import { requireOrganization } from './inputs';

export const renderProcessor: Processor<
  'image.render',
  | 'results'
  | 'variants'
  | 'images'
  | 'limits'
  | 'render'
  | 'store'
  | 'handoff'
  | 'organizations'
  | 'usage'
  | 'media'
> = {
  name: 'image.render',
  async process(job, ctx) {
    const { organizationId, key, options } = job.data;
    const id = variantId(options);
    const max = ctx.render.maxVariants;
    const t0 = performance.now();
    // The API checked the source and the bounds before queueing, but renders queued at once all
    // passed that check: checked again before the work (the record's update decides).
    const [found, organization, usage] = await Promise.all([
      ctx.variants.find(organizationId, key, id),
      requireOrganization(ctx, organizationId),
      ctx.usage.get(organizationId),
    ]);
    if (!found) throw Errors.mediaNotFound(key);
    // An earlier attempt recorded it.
    if (found.variant) return { variant: found.variant };
    if (found.variants >= max) throw Errors.tooManyVariants(key, found.variants, max);
    const quota = organization.quotaBytes;
    if (quota !== null && usage.bytes >= quota) throw Errors.quotaExceeded(quota);

    // Through the worker's cache of recently read sources (a burst of widths reads it once).
    const input = await ctx.results.readSource(found.record, ctx.limits.maxFileSize);
    job.signal.throwIfAborted();
    const t1 = performance.now();
    const output = await ctx.images.render(input, options, {
      signal: job.signal,
      timeoutMs: job.remainingMs(),
    });
    const t2 = performance.now();
    // A PDF's page count, read as its page was rendered: kept on its record (once).
    if (output.pages !== undefined && found.record.pages === undefined) {
      await ctx.media
        .setPages(organizationId, key, output.pages)
        .catch((err: unknown) => job.log.warn({ err }, 'could not record the PDF’s page count'));
    }
    const variant: StoredVariant = {
      id,
      key: variantKey(key, options),
      mimetype: output.mime,
      bytes: output.data.length,
      width: output.width,
      height: output.height,
    };
    // A render that ended as the time ran out (the GIF and AVIF encoders cannot be stopped)
    // has failed already: nothing of it is written.
    job.signal.throwIfAborted();
    const counted = { bytes: variant.bytes, files: 0, variantBytes: variant.bytes };
    if (!(await ctx.usage.reserve(organizationId, counted, quota))) {
      throw Errors.quotaExceeded(quota ?? 0);
    }
    const giveBack = () =>
      ctx.usage
        .release(organizationId, counted)
        .catch((err: unknown) =>
          job.log.warn({ err }, 'could not give back a variant’s bytes (reconcile sets them)'),
        );
    const undo = async () => {
      await ctx.store
        .remove(variant.key)
        .catch((err: unknown) =>
          job.log.error({ err, key: variant.key }, 'could not remove an unrecorded variant'),
        );
      await giveBack();
    };
    // The waiting API requests take the bytes from Redis rather than read them back from
    // storage (shared/queue/handoff.ts); storage stays the truth, written before the record.
    try {
      await Promise.all([
        ctx.store.put(variant.key, output.data, { contentType: output.mime }),
        ctx.handoff.offer(job.id, output.data),
      ]);
      job.signal.throwIfAborted();
    } catch (err) {
      await undo();
      throw err;
    }
    const t3 = performance.now();
    let added: AddVariantOutcome;
    try {
      added = await ctx.variants.add(organizationId, key, variant, max);
    } catch (err) {
      // A lost reply may have recorded it: only a variant certainly not recorded is undone.
      const now = await ctx.variants.find(organizationId, key, id).catch(() => undefined);
      if (now !== undefined && !now?.variant) await undo();
      throw err;
    }
    switch (added) {
      case 'added':
        break;
      case 'present':
        // Another attempt of this job recorded it (and counted it): the same object, written again.
        await giveBack();
        break;
      case 'gone':
        await undo();
        throw Errors.mediaNotFound(key);
      case 'full':
        await undo();
        throw Errors.tooManyVariants(key, max, max);
    }
    if (job.signal.aborted) {
      await takeBack(job, ctx, variant, added === 'added' ? giveBack : undefined);
    }
    const ms = (a: number, b: number) => Math.round(b - a);
    job.log.info(
      {
        source: key,
        key: variant.key,
        bytes: variant.bytes,
        added,
        // Where the job's time went (ms): lookups and source read, render, variant write, record update.
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
 * The job's time ran out while its variant was written (`giveBack` given: it
 * was added to the record by this attempt, and counted): the variant is taken
 * off the record, its bytes given back and its object removed, then the
 * job's timeout is thrown. An object that another attempt has recorded (the
 * same bytes) is left alone.
 */
async function takeBack(
  job: ProcessorJob<'image.render'>,
  ctx: Pick<JobContext, 'store' | 'variants'>,
  variant: StoredVariant,
  giveBack: (() => Promise<void>) | undefined,
): Promise<never> {
  const { organizationId, key } = job.data;
  try {
    if (giveBack) {
      await ctx.variants.remove(organizationId, key, variant.id);
      await giveBack();
    }
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
