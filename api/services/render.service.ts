/**
 * Renders (GET /media/render): bounds the options a request asks for (its
 * route reads them with the render parameters' one schema,
 * shared/media/render-params.ts; here, who may ask for what and what the
 * options resolve to), then answers the stored variant, or has the
 * image workers render it first (one job per variant, however many requests
 * ask at once: its job id is derived from the variant's key).
 *
 * Bounds (each refusal a 400 naming the bound): width and height at most
 * RENDER_MAX_WIDTH / RENDER_MAX_HEIGHT; when RENDER_SIZES is set or
 * RENDER_REQUIRE_SIGNED is on, a bearer request may ask only for a preset or
 * a listed size, with the format's default quality (a signed request may
 * ask for any size within the maxima); at most RENDER_MAX_VARIANTS variants per source; an organization
 * whose usage has reached its quota gets 413 before any job (a variant's
 * bytes count in it; the worker reserves them before writing the variant); a
 * `contain` render (whose size is its box) to GIF or AVIF within their pixel
 * bounds (MAX_GIF_OUTPUT_PIXELS, MAX_AVIF_OUTPUT_PIXELS). Other sizes follow
 * the source's, which the worker holds to those bounds (422
 * OUTPUT_TOO_LARGE): `format=auto` then answers WebP (or JPEG) where AVIF is
 * refused.
 */
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { scanRefusal, type ScanSettings } from '@shared/scan/scan';
import type { Config } from '@shared/config';
import { Errors, isAppError, type ErrorDetail } from '@shared/errors';
import { derivedUuid, newJobId, type StoredVariant } from '@shared/jobs';
import { formatOfMime, isRenderableType, type OutputPixelLimits } from '@shared/media/formats';
import {
  negotiateFormat,
  normalizeRenderOptions,
  variantId,
  variantKey,
  type RenderOptions,
} from '@shared/media/render-options';
import {
  readRenderParams,
  resolveRenderOptions,
  type RenderParamRules,
  type RenderParams,
  type RenderQuery,
} from '@shared/media/render-params';
import { renderIsHeavy, renderUnits } from '@shared/media/work';
import type { JobHandoff } from '@shared/queue/handoff';
import type { MediaRecord } from '@shared/repositories/media.repository';
import type { UsageRepository } from '@shared/repositories/usage.repository';
import type { VariantsRepository } from '@shared/repositories/variants.repository';
import type { ByteRange, ObjectStore } from '@shared/storage/object-store';
import type { Caller } from '../domain/caller';
import type { RevalidationCache } from '../domain/revalidation-cache';
import type { JobsService } from './jobs.service';

/** A render's input: the source's key and the parameters read from the request, and its Accept header. */
export interface RenderInput extends RenderQuery {
  /** The Accept header (format=auto). */
  accept: string | undefined;
}

export interface Rendered {
  record: MediaRecord;
  variant: StoredVariant;
  /** The format came from the Accept header (the answer varies by it). */
  negotiated: boolean;
  /** The variant had to be rendered for this request (or a concurrent identical one). */
  rendered: boolean;
  /**
   * The variant's bytes, when the worker that rendered it handed them over
   * (shared/queue/handoff.ts): the answer needs no read from storage.
   */
  data?: Buffer;
}

/** How often a request that found its variant booked and not handed over looks for its write. */
const WRITTEN_POLL_MS = 50;

/** The job id's uuid part of a variant's render: derived from its key. */
export function renderJobUuid(key: string): string {
  return derivedUuid(`render:${key}`);
}

/** The strong validator of a variant: its key's hash (the bytes behind a key never change). */
export function variantTag(key: string): string {
  return createHash('sha256').update(key).digest('base64url').slice(0, 32);
}

export class RenderService {
  constructor(
    private readonly deps: {
      variants: Pick<VariantsRepository, 'find'>;
      jobs: Pick<JobsService, 'runShared' | 'forgetShared'>;
      store: Pick<ObjectStore, 'get'>;
      settings: Config['render'];
      /** The GIF and AVIF pixel bounds (config `limits.maxOutputPixels`). */
      maxOutputPixels: OutputPixelLimits;
      /** A first render's bytes from its worker; without it, they are read from storage. */
      handoff?: Pick<JobHandoff, 'take' | 'accepts'>;
      /** The organizations' usage: a first render is refused at once when the quota is reached. */
      usage?: Pick<UsageRepository, 'get'>;
      /** Malware scanning: a file its organization's policy does not serve is not rendered (stored variants neither). */
      scan?: ScanSettings;
      /** Variants' ETags kept from earlier answers (304s without a MongoDB read); none without it. */
      revalidations?: RevalidationCache | undefined;
    },
  ) {
    this.rules = { ...deps.settings, maxOutputPixels: deps.maxOutputPixels };
  }

  /** What render parameters are read against (built once: the schema is kept per rules object). */
  private readonly rules: RenderParamRules;

  /**
   * The variant `input` asks for, stored or rendered now. A signed URL's
   * request (`caller.signedUntil`) may ask for any size within the maxima.
   */
  async render(
    caller: Pick<Caller, 'organization' | 'requestId' | 'signedUntil'>,
    input: RenderInput,
  ): Promise<Rendered> {
    const asked = this.options(input, caller.signedUntil !== undefined);
    const negotiated = asked.negotiated;
    const options = withPage(asked.options, input.key);
    const { organization, requestId } = caller;
    const cache = this.deps.revalidations;
    const generation = cache?.begin();
    let rendered: Rendered;
    try {
      rendered = await this.variant(organization, input.key, options, negotiated, requestId);
    } catch (err) {
      // `auto` chose AVIF, and this render of this source is over AVIF's pixel bound (only
      // the worker knows the source's size): the next format the client takes instead.
      if (!(negotiated && options.format === 'avif' && isOutputTooLarge(err))) throw err;
      const format = negotiateFormat(input.accept, { avif: false });
      const fallback = normalizeRenderOptions({ ...options, format });
      rendered = await this.variant(organization, input.key, fallback, negotiated, requestId);
    }
    // Kept under the options asked for (the fallback, when there was one, is the same each
    // time: the source never changes); not while a scan's verdict is pending.
    if (cache && generation !== undefined && rendered.record.scanStatus !== 'pending') {
      const etag = `"${variantTag(rendered.variant.key)}"`;
      cache.keepVariant(generation, organization.id, input.key, variantId(options), etag);
    }
    return rendered;
  }

  /**
   * The ETag (quoted) of the variant `input` asks for, kept from an earlier
   * answer to the caller's organization, without reading MongoDB, and whether
   * its format came from `Accept`; undefined when none is kept (or the
   * request would be refused: `render` says why).
   */
  known(
    caller: Pick<Caller, 'organization' | 'signedUntil'>,
    input: RenderInput,
  ): { etag: string; negotiated: boolean } | undefined {
    const cache = this.deps.revalidations;
    if (!cache) return undefined;
    try {
      const asked = this.options(input, caller.signedUntil !== undefined);
      const options = withPage(asked.options, input.key);
      const etag = cache.variant(caller.organization.id, input.key, variantId(options));
      return etag === undefined ? undefined : { etag, negotiated: asked.negotiated };
    } catch {
      return undefined;
    }
  }

  /** The stored variant, or one rendered for this request (or a concurrent identical one). */
  private async variant(
    organization: Caller['organization'],
    key: string,
    options: RenderOptions,
    negotiated: boolean,
    requestId: string,
  ): Promise<Rendered> {
    const organizationId = organization.id;
    const id = variantId(options);
    let found = await this.deps.variants.find(organizationId, key, id);
    if (!found) throw Errors.mediaNotFound(key);
    const { record } = found;
    const refusal = this.deps.scan && scanRefusal(this.deps.scan, organization, record);
    if (refusal) throw refusal;
    if (!isRenderableSource(record.mimetype)) {
      throw Errors.unsupportedType(`"${key}" is ${record.mimetype}, not an image or a PDF`);
    }
    const vkey = variantKey(record.key, options);
    for (let round = 0; ; round++) {
      if (found.variant) {
        return { record, variant: found.variant, negotiated, rendered: round > 0 };
      }
      // A booked variant (its render answered, its object being written) is not counted again.
      if (!found.pendingUntil) {
        const max = this.deps.settings.maxVariants;
        if (found.variants >= max) throw Errors.tooManyVariants(key, found.variants, max);
        const quota = organization.quotaBytes;
        if (
          quota !== null &&
          this.deps.usage &&
          (await this.deps.usage.get(organizationId)).bytes >= quota
        ) {
          throw Errors.quotaExceeded(quota);
        }
      }
      // A booking whose writer's hold has run out (its worker died after answering): a job of
      // its own takes it over (the variant's job has completed and would answer at once).
      const until = found.pendingUntil?.getTime();
      const uuid = renderJobUuid(
        until !== undefined && until <= Date.now() ? `${vkey}@${until}` : vkey,
      );
      const { variant } = await this.deps.jobs.runShared(
        'image.render',
        { organizationId, requestId, key: record.key, options, checksum: record.checksum },
        uuid,
        { heavy: renderIsHeavy(options, record) },
      );
      const data = await this.deps.handoff?.take(newJobId('image.render', uuid), variant.bytes);
      if (data) return { record, variant, negotiated, rendered: true, data };
      // Over the handoff's bound: its worker wrote it before answering (as without a handoff).
      if (!this.deps.handoff?.accepts(variant.bytes)) {
        return { record, variant, negotiated, rendered: true };
      }
      // Not handed over (over the bound, or expired): read from storage once the record lists
      // it as written (its worker may still be writing it).
      const now = await this.written(organizationId, key, id);
      if (!now) throw Errors.mediaNotFound(key);
      if (now.variant) return { record, variant: now.variant, negotiated, rendered: true };
      // The job's outcome no longer holds (its variant was removed since, or its write failed):
      // rendered again, once.
      if (round > 0) throw Errors.internal(new Error(`variant ${vkey} not written`));
      await this.deps.jobs.forgetShared('image.render', uuid);
      found = now;
    }
  }

  /**
   * The record and variant `id` once the variant is written or no longer
   * booked (a booked one is waited for while its writer holds it, polling).
   */
  private async written(organizationId: number, key: string, id: string) {
    for (;;) {
      const found = await this.deps.variants.find(organizationId, key, id);
      const until = found?.pendingUntil?.getTime();
      if (until === undefined || until <= Date.now()) return found;
      await new Promise((resolve) => setTimeout(resolve, WRITTEN_POLL_MS));
    }
  }

  /**
   * The rate-limit cost of a render request, from the pixels and format it
   * asks for (shared/media/work.ts); 1 for a request that will be refused.
   */
  cost(params: RenderParams, accept: string | undefined): number {
    try {
      const { options } = this.options({ params, accept }, true);
      const s = this.deps.settings;
      return renderUnits(options, s.maxWidth * s.maxHeight);
    } catch {
      return 1;
    }
  }

  open(variant: StoredVariant, range?: ByteRange): Promise<Readable> {
    return this.deps.store.get(variant.key, range);
  }

  /**
   * Render parameters written elsewhere than a query (a signed URL's `render`
   * object): the 400 the render would answer for them in a signed request
   * (bounds, presets, formats: the one schema; a `contain` box over a slow
   * format's pixel bound), each field named `<prefix>.<option>`; nothing
   * when it would accept them.
   */
  check(params: unknown, prefix: string): void {
    const read = readRenderParams(params, this.rules, { strict: true });
    const problems =
      read.problems.length > 0
        ? read.problems
        : resolveRenderOptions(read.params, this.rules, undefined).problems;
    if (problems.length > 0) {
      throw Errors.validation(
        problems.map((d) => ({
          ...d,
          field: d.field === undefined ? prefix : `${prefix}.${d.field}`,
        })),
      );
    }
  }

  /**
   * The normalized options read parameters ask for, or a 400 naming what the
   * caller may not ask for or what is over a bound: unless `signed`, with
   * RENDER_SIZES or RENDER_REQUIRE_SIGNED, a preset or a listed size only,
   * and no `q`.
   */
  options(
    input: Pick<RenderInput, 'params' | 'accept'>,
    signed: boolean,
  ): { options: RenderOptions; negotiated: boolean } {
    const s = this.deps.settings;
    const problems: ErrorDetail[] = [];
    const { preset, width: w, height: h, quality: q } = input.params;

    const restricted = s.sizes.length > 0 || s.requireSigned;
    if (restricted && !signed && preset === undefined) {
      const asked = `${w ?? ''}x${h ?? ''}`;
      const listed = s.sizes.some((z) => z.width === (w ?? null) && z.height === (h ?? null));
      const original = w === undefined && h === undefined;
      if (s.sizes.length === 0 && !original) {
        problems.push({
          field: 'preset',
          message: `renders are signed only (RENDER_REQUIRE_SIGNED): a bearer request may ask for a preset (${Object.keys(s.presets).join(', ') || 'none'})`,
        });
      } else if (!listed && !original) {
        const allowed = s.sizes.map((z) => `${z.width ?? ''}x${z.height ?? ''}`).join(', ');
        problems.push({
          field: w === undefined ? 'h' : 'w',
          message: `${asked} is not an allowed size (RENDER_SIZES: ${allowed})`,
        });
      }
      if (q !== undefined) {
        problems.push({
          field: 'q',
          message:
            'q comes from a preset or a signed URL only (RENDER_SIZES / RENDER_REQUIRE_SIGNED)',
        });
      }
    }
    if (problems.length > 0) throw Errors.validation(problems);
    const { options, negotiated, ...resolved } = resolveRenderOptions(
      input.params,
      this.rules,
      input.accept,
    );
    if (resolved.problems.length > 0) throw Errors.validation(resolved.problems);
    return { options, negotiated };
  }
}

/** Whether renders read a stored record of this type: an image, or a PDF (one page). */
export function isRenderableSource(mime: string): boolean {
  return isRenderableType(mime) || formatOfMime(mime)?.kind === 'pdf';
}

/**
 * The options with the page of a PDF source, known from its key (a PDF's key
 * ends in `.pdf`, the extension of the type read from its bytes): page 1 when
 * none is asked, so `page=1` and no page name the same variant. A page asked
 * of an image is a 400.
 */
export function withPage(options: RenderOptions, key: string): RenderOptions {
  if (key.toLowerCase().endsWith('.pdf')) return { ...options, page: options.page ?? 1 };
  if (options.page === undefined) return options;
  throw Errors.validation([{ field: 'page', message: 'page is for PDF sources only' }]);
}

/** The worker's refusal of an output over its format's pixel bound. */
const isOutputTooLarge = (err: unknown) => isAppError(err) && err.code === 'OUTPUT_TOO_LARGE';
