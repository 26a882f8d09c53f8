/**
 * image.render: renders a variant of a stored image (GET /media/render) and
 * stores it beside its source: the object under `.variants/<key>/`, and the
 * variant on the source's record.
 *
 * The source is read and rendered beside the job's lookups when the job
 * names its checksum (the API read the record): what was read is used only
 * once the lookups have found the record live with that checksum and the
 * bounds not reached; a refused render is stopped and dropped.
 *
 * A variant the handoff takes (at most RENDER_HANDOFF_MAX_BYTES) is answered
 * before it is written: at once, its bytes are reserved against the quota
 * (413 QUOTA_EXCEEDED past it), the record books it (a variant with
 * `pendingUntil`: the update that checks RENDER_MAX_VARIANTS, 400 past it)
 * and the bytes go to Redis for the waiting API requests (a refused
 * reservation takes the booking back), and the job completes; then, off the
 * answer's path (the worker's background tasks, drained on shutdown), the
 * object is written and the booking settled (the variant served from
 * storage from then on). Every refusal comes before the answer. A write that
 * fails gives the booking and its bytes back; a worker
 * that dies before settling leaves a booking whose hold runs out
 * (HANDOFF_TTL_MS): the next request's render takes it over, and reconcile
 * lists and removes it, so records and objects stay in step (the answer
 * already sent loses nothing; the next request renders again).
 *
 * A larger variant is written before the answer, as before: reserved, the
 * object written, then added to the record (the API reads it from storage).
 * A render refused after writing (the bound reached meanwhile, the source
 * deleted, the time limit) removes its object and gives its bytes back.
 * Idempotent: a retry finds the variant recorded.
 *
 * Within the job's time limit: the render stops when it runs out (sharp's
 * own timeout, the HEIC decoding thread ended), and a job whose time is up
 * writes nothing: the signal is checked before the object and before the
 * record, and what was written as it ran out is taken back.
 */
import { Errors } from '@shared/errors';
import type { StoredVariant } from '@shared/jobs';
import { variantId, variantKey } from '@shared/media/render-options';
import { HANDOFF_TTL_MS } from '@shared/queue/handoff';
import type {
  AddVariantOutcome,
  RecordWithVariant,
} from '@shared/repositories/variants.repository';
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
  | 'background'
> = {
  name: 'image.render',
  async process(job, ctx) {
    const { organizationId, key, options, checksum } = job.data;
    const id = variantId(options);
    const max = ctx.render.maxVariants;
    const t0 = performance.now();
    /** The source read (through the worker's cache of recently read sources) and rendered. */
    const renderOf = async (source: { key: string; checksum: string }, signal: AbortSignal) => {
      // A burst of widths reads the source once.
      const reading = performance.now();
      const input = await ctx.results.readSource(source, ctx.limits.maxFileSize);
      signal.throwIfAborted();
      const read = performance.now();
      const output = await ctx.images.render(input, options, {
        signal,
        timeoutMs: job.remainingMs(),
      });
      return { output, reading, read };
    };
    // The source's checksum came with the job (the API read the record): the source is read
    // and rendered beside the lookups below, not after them. A render they refuse is stopped
    // and its output dropped; nothing of it is written.
    const ahead = new AbortController();
    const early =
      checksum === undefined
        ? undefined
        : renderOf({ key, checksum }, AbortSignal.any([job.signal, ahead.signal]));
    early?.catch(() => undefined);
    // The API checked the source and the bounds before queueing, but renders queued at once all
    // passed that check: checked again before anything is written (the record's update decides).
    let found: RecordWithVariant;
    let quota: number | null;
    try {
      const [looked, organization, usage] = await Promise.all([
        ctx.variants.find(organizationId, key, id),
        requireOrganization(ctx, organizationId),
        ctx.usage.get(organizationId),
      ]);
      if (!looked) throw Errors.mediaNotFound(key);
      found = looked;
      // An earlier attempt recorded it.
      if (found.variant) {
        ahead.abort();
        return { variant: found.variant };
      }
      let variants = found.variants;
      // Booked by a render whose worker died before writing it (its hold ran out): taken over.
      if (found.booked && found.pendingUntil && found.pendingUntil.getTime() <= Date.now()) {
        if (await dropBooking(job, ctx, found.booked, found.pendingUntil)) variants--;
      }
      if (variants >= max) throw Errors.tooManyVariants(key, variants, max);
      quota = organization.quotaBytes;
      if (quota !== null && usage.bytes >= quota) throw Errors.quotaExceeded(quota);
    } catch (err) {
      ahead.abort(err);
      throw err;
    }
    const t1 = performance.now();
    // Rendered here when the job came without the source's checksum (queued by an older API)
    // or named another one than the record's (which the record's key makes the same bytes).
    if (early && found.record.checksum !== checksum) ahead.abort();
    const { output, reading, read } = await (early && found.record.checksum === checksum
      ? early
      : renderOf(found.record, job.signal));
    const t2 = performance.now();
    const times: Times = { t0, t1, reading, read, t2 };
    // A PDF's page count, read as its page was rendered: kept on its record (once).
    // Off the answer's path: the answer does not depend on it.
    const pages = output.pages;
    if (pages !== undefined && found.record.pages === undefined) {
      ctx.background.run('record the PDF’s page count', () =>
        ctx.media.setPages(organizationId, key, pages),
      );
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
    const reserve = async () => {
      if (!(await ctx.usage.reserve(organizationId, counted, quota))) {
        throw Errors.quotaExceeded(quota ?? 0);
      }
    };
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
    if (ctx.handoff.accepts(variant.bytes)) {
      return answerThenWrite(job, ctx, { variant, data: output.data, reserve, giveBack, times });
    }
    await reserve();
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
        // Where the job's time went (ms): lookups, source read and render (after the lookups, or
        // beside them), variant write, record update.
        phases: {
          ...phases(times),
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

type RenderContext = Pick<
  JobContext,
  'store' | 'variants' | 'handoff' | 'usage' | 'render' | 'background'
>;

/**
 * A booking whose hold ran out (its writer died after answering) is taken
 * off the record, its bytes given back and whatever object it wrote
 * removed; true when this call took it (another may have first).
 */
async function dropBooking(
  job: ProcessorJob<'image.render'>,
  ctx: Pick<JobContext, 'store' | 'variants' | 'usage'>,
  booked: StoredVariant,
  pendingUntil: Date,
): Promise<boolean> {
  const { organizationId, key } = job.data;
  if (!(await ctx.variants.dropBooking(organizationId, key, booked.id, pendingUntil))) return false;
  await ctx.store.remove(booked.key);
  await ctx.usage.release(organizationId, {
    bytes: booked.bytes,
    files: 0,
    variantBytes: booked.bytes,
  });
  job.log.warn({ key: booked.key }, 'took over a variant booked by a render that never wrote it');
  return true;
}

/**
 * Answers with the variant before writing it: books it on the record (the
 * bound decided there) while handing its bytes to the waiting requests, then
 * writes the object and settles the booking off the answer's path. The
 * bytes are reserved already (`giveBack` returns them).
 */
async function answerThenWrite(
  job: ProcessorJob<'image.render'>,
  ctx: RenderContext,
  run: {
    variant: StoredVariant;
    data: Buffer;
    /** Reserves the variant's bytes against the quota (413 QUOTA_EXCEEDED past it). */
    reserve: () => Promise<void>;
    giveBack: () => Promise<void>;
    times: Times;
  },
): Promise<{ variant: StoredVariant }> {
  const { organizationId, key } = job.data;
  const { variant, data, giveBack } = run;
  const max = ctx.render.maxVariants;
  const pendingUntil = new Date(Date.now() + HANDOFF_TTL_MS);
  // The bytes reserved, the variant booked and its bytes handed over at once (one round
  // trip to each store, not three in turn): a refusal of either undoes the other.
  const [reserved, booked, handedOver] = await Promise.allSettled([
    run.reserve(),
    ctx.variants.add(organizationId, key, variant, max, pendingUntil),
    ctx.handoff.offer(job.id, data),
  ]);
  const offered = handedOver.status === 'fulfilled' && handedOver.value;
  if (reserved.status === 'rejected') {
    // Not counted (over the quota, or MongoDB failed): a booking made beside it is taken back
    // (this one only: booked until `pendingUntil`; a lost reply may have made it). Should that
    // fail too, its hold runs out and the next render or reconcile takes it over (giving back
    // bytes never counted: reconcile --fix sets the usage counter, as after a failed giveBack).
    if (booked.status === 'rejected' || booked.value === 'added') {
      await ctx.variants
        .dropBooking(organizationId, key, variant.id, pendingUntil)
        .catch((err: unknown) =>
          job.log.warn({ err, key: variant.key }, 'could not take back a booking not counted'),
        );
    }
    throw reserved.reason;
  }
  if (booked.status === 'rejected') {
    // A lost reply may have booked it: only a variant certainly not booked gives its bytes back.
    const now = await ctx.variants.find(organizationId, key, variant.id).catch(() => undefined);
    if (now !== undefined && now?.pendingUntil?.getTime() !== pendingUntil.getTime()) {
      await giveBack();
    }
    throw booked.reason;
  }
  const added: AddVariantOutcome = booked.value;
  switch (added) {
    case 'added':
      break;
    case 'present':
      // Booked or written by another attempt (the same bytes, counted there): its writer writes it.
      await giveBack();
      return { variant };
    case 'gone':
      await giveBack();
      throw Errors.mediaNotFound(key);
    case 'full':
      await giveBack();
      throw Errors.tooManyVariants(key, max, max);
  }
  const t3 = performance.now();
  /** The object, then the booking settled; false when the booking was taken meanwhile. */
  const write = async (): Promise<boolean> => {
    try {
      await ctx.store.put(variant.key, data, { contentType: variant.mimetype });
    } catch (err) {
      if (await ctx.variants.dropBooking(organizationId, key, variant.id, pendingUntil)) {
        await giveBack();
      }
      await ctx.store.remove(variant.key).catch(() => undefined);
      throw err;
    }
    if (await ctx.variants.settle(organizationId, key, variant.id, pendingUntil)) return true;
    // The booking went (the source or its variants deleted, or taken over after its hold ran
    // out): whoever took it gave its bytes back; the object goes unless a record lists it now.
    const now = await ctx.variants.find(organizationId, key, variant.id);
    if (!now?.variant && !now?.pendingUntil) await ctx.store.remove(variant.key);
    return false;
  };
  const logWritten = (where: string) => {
    const ms = (a: number, b: number) => Math.round(b - a);
    job.log.info(
      {
        source: key,
        key: variant.key,
        bytes: variant.bytes,
        added,
        written: where,
        // Where the job's time went (ms): lookups, source read and render (after the lookups, or
        // beside them), booking and handoff.
        phases: { ...phases(run.times), book: ms(run.times.t2, t3) },
      },
      'rendered',
    );
  };
  if (!offered || job.signal.aborted) {
    // Nobody gets the bytes from Redis (or the time ran out): written before the answer.
    if (!(await write())) throw Errors.mediaNotFound(key);
    if (job.signal.aborted) await takeBack(job, ctx, variant, giveBack);
    logWritten('before the answer');
    return { variant };
  }
  ctx.background.run('write a rendered variant', write, { key: variant.key });
  logWritten('after the answer');
  return { variant };
}

/** When a render's steps began and ended (performance.now()). */
interface Times {
  /** The job began. */
  t0: number;
  /** The lookups and checks were done. */
  t1: number;
  /** The source's read began, and ended. */
  reading: number;
  read: number;
  /** The render was done. */
  t2: number;
}

/** The job's time (ms) in lookups, source read and render; the last two may overlap the first. */
function phases(t: Times): { lookups: number; read: number; render: number } {
  const ms = (a: number, b: number) => Math.round(b - a);
  return { lookups: ms(t.t0, t.t1), read: ms(t.reading, t.read), render: ms(t.read, t.t2) };
}
