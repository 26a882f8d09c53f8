/**
 * The requests that become jobs: image metadata, conversion and PDF merges.
 * Each checks what it names first (404 for a key the organization does not
 * hold, 415 for the wrong type: before any job is made), then hands the job
 * to JobsService, which queues it and waits for its outcome.
 *
 * A merge's inputs come in form order: stored keys (looked up together once
 * the form is read) and uploaded PDFs (streamed, as they arrive, into one
 * temporary object, the request's input bundle). Once the job is queued it
 * owns the bundle and removes it when it ends; until then it is the
 * request's to remove.
 */
import { checkTarget, EgressFailed, EgressRefused, type EgressPolicy } from '@shared/egress/egress';
import { Errors, isAppError } from '@shared/errors';
import type { OnDuplicate } from '@shared/media-creation';
import type { JobPayloads } from '@shared/jobs';
import type { MediaRecord, MediaRepository } from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
import { scanRefusal, type ScanSettings } from '@shared/scan/scan';
import { formatOfMime, isRenderableType } from '@shared/media/formats';
import { convertIsHeavy, mergeIsHeavy } from '@shared/media/work';
import type { Caller } from '../domain/caller';
import type { StreamedForm } from '../domain/streamed-form';
import type { FolderSpec, FoldersService } from './folders.service';
import type { IngestService } from './ingest.service';
import type { JobAnswer, JobsService } from './jobs.service';

export interface ConvertInput {
  key: string;
  format: JobPayloads['image.convert']['format'];
  quality?: number | undefined;
}

/** A URL import's input (POST /media/upload/url), as the client sent it. */
export interface ImportInput {
  url: string;
  folder?: string | undefined;
  folderId?: string | number | undefined;
  name?: string | undefined;
  onDuplicate?: OnDuplicate | undefined;
}

/**
 * A merge's input: its form, whose file parts are uploaded PDFs and whose
 * list entries are stored keys, both inputs in form order; its text fields
 * name the result's folder.
 */
export interface MergeInput {
  form: StreamedForm<FolderSpec, string>;
}

type ResolvedInput = {
  key: string;
  name: string;
  bytes: number;
  range?: { offset: number; length: number };
};
type PendingInput = Promise<ResolvedInput> | { storedKey: string };

export class MediaJobsService {
  constructor(
    private readonly deps: {
      jobs: JobsService;
      media: MediaRepository;
      ingest: IngestService;
      folders: FoldersService;
      limits: { maxMergeInputs: number; maxMergeBytes: number };
      /** Malware scanning: a file the organization's policy does not serve is no job's input. */
      scan: ScanSettings;
      /** Where outbound requests may go: an import's URL is checked here before its job is queued. */
      egress: EgressPolicy;
      /** `onDuplicate` when an import names none (UPLOAD_ON_DUPLICATE). */
      onDuplicate: OnDuplicate;
    },
  ) {}

  /**
   * Imports the file at a URL: the URL is checked (400 URL_NOT_ALLOWED with
   * the reason; the worker checks it again, and every redirect, when it
   * fetches) and the folder resolved before the job is queued on the
   * `import` queue; the worker fetches, stores and records it.
   */
  async importUrl(caller: Caller, input: ImportInput): Promise<JobAnswer> {
    try {
      await checkTarget(input.url, this.deps.egress);
    } catch (err) {
      if (err instanceof EgressRefused) throw Errors.urlNotAllowed(err.reason);
      if (err instanceof EgressFailed) throw Errors.urlNotAllowed(err.message);
      throw err;
    }
    const folder = await this.deps.folders.resolve(caller.organization, {
      folder: input.folder,
      folderId: input.folderId === undefined ? undefined : String(input.folderId),
    });
    return this.deps.jobs.submit(caller, {
      name: 'media.import',
      payload: {
        origin: caller.origin,
        tokenId: caller.tokenId,
        url: input.url,
        folderId: folder?.id ?? null,
        ...(input.name === undefined ? {} : { name: input.name }),
        onDuplicate: input.onDuplicate ?? this.deps.onDuplicate,
      },
    });
  }

  async metadata(caller: Caller, input: { key: string }): Promise<JobAnswer> {
    const record = await this.imageRecord(caller.organization, input.key, { pdf: true });
    return this.deps.jobs.submit(caller, { name: 'image.metadata', payload: { key: record.key } });
  }

  async convert(caller: Caller, input: ConvertInput): Promise<JobAnswer> {
    const record = await this.imageRecord(caller.organization, input.key);
    return this.deps.jobs.submit(caller, {
      name: 'image.convert',
      payload: {
        origin: caller.origin,
        tokenId: caller.tokenId,
        key: record.key,
        format: input.format,
        ...(input.quality === undefined ? {} : { quality: input.quality }),
      },
      heavy: convertIsHeavy(input.format, record),
    });
  }

  /** Merges the PDFs a form names (uploaded and stored, in form order). */
  async merge(caller: Caller, input: MergeInput): Promise<JobAnswer> {
    const org = caller.organization;
    const { maxMergeInputs: maxInputs, maxMergeBytes } = this.deps.limits;
    // Uploaded bytes as they stream: refused as soon as they alone are over the total.
    let uploadedBytes = 0;
    const meterUpload = (n: number) => {
      if ((uploadedBytes += n) > maxMergeBytes) throw mergeTooLarge(uploadedBytes, maxMergeBytes);
    };
    const inputs: PendingInput[] = [];
    // Every uploaded part goes into one temporary object, in form order.
    const bundle = this.deps.ingest.bundle(org);
    let owned = false;
    const addInput = (pending: PendingInput) => {
      if (inputs.length >= maxInputs) throw Errors.tooManyFiles(maxInputs, 'merge inputs');
      if (pending instanceof Promise) pending.catch(() => undefined); // observed below
      inputs.push(pending);
    };
    try {
      const { fields } = await input.form.read({
        onItem: (key) => addInput({ storedKey: key }),
        onFile: async (part) => {
          const index = inputs.length;
          if (index >= maxInputs) throw Errors.tooManyFiles(maxInputs, 'merge inputs');
          const stored = bundle
            .add(part.stream, part.filename, ['application/pdf'], meterUpload)
            .then(({ name, offset, length }) => ({
              key: bundle.key,
              name,
              bytes: length,
              range: { offset, length },
            }))
            .catch((err: unknown) => {
              throw isAppError(err) ? err.forInput(index, part.filename) : err;
            });
          addInput(stored);
          await stored;
        },
      });
      const resolved = await this.resolveInputs(org, inputs);
      // Every occurrence counts, as in the worker's check: refused before any job is queued.
      const totalBytes = resolved.reduce((n, input) => n + input.bytes, 0);
      if (totalBytes > maxMergeBytes) throw mergeTooLarge(totalBytes, maxMergeBytes, true);
      const folder = await this.deps.folders.resolve(org, fields);
      await bundle.finish();
      return await this.deps.jobs.run(
        'pdf.merge',
        {
          organizationId: org.id,
          requestId: caller.requestId,
          origin: caller.origin,
          tokenId: caller.tokenId,
          inputs: resolved.map(({ key, name, range }) => ({ key, name, ...(range && { range }) })),
          folderId: folder?.id ?? null,
          temporaryKeys: bundle.used ? [bundle.key] : [],
        },
        {
          async: caller.respondAsync,
          heavy: mergeIsHeavy(resolved),
          rootFolderId: org.rootFolderId,
          // Once queued, the job owns the bundle (and removes it when it ends); until then
          // (Redis refusing the job) it is this request's to remove.
          onQueued: (jobId) => {
            owned = true;
            caller.onJobQueued?.(jobId);
          },
        },
      );
    } catch (err) {
      await Promise.allSettled(inputs.filter((i) => i instanceof Promise));
      if (!owned) await bundle.discard();
      throw err;
    }
  }

  /** Every input's key and name, in form order; one query for all the stored keys. */
  private async resolveInputs(org: Organization, inputs: PendingInput[]): Promise<ResolvedInput[]> {
    const storedKeys = inputs.flatMap((i) => (i instanceof Promise ? [] : [i.storedKey]));
    const records = await this.deps.media.findByKeys(org.id, storedKeys);
    return Promise.all(
      inputs.map(async (input, index) => {
        if (input instanceof Promise) return input;
        const key = input.storedKey;
        const record = records.get(key);
        if (!record) throw Errors.mediaNotFound(key).forInput(index, key);
        const refusal = scanRefusal(this.deps.scan, org, record);
        if (refusal) throw refusal.forInput(index, key);
        if (record.mimetype !== 'application/pdf') {
          throw Errors.unsupportedType(`Input ${index + 1} ("${key}") is not a PDF`).forInput(
            index,
            key,
          );
        }
        return { key: record.key, name: record.name, bytes: record.bytes };
      }),
    );
  }

  /** The record of an image key (or `pdf`: a PDF's) of this organization (404 unknown, 415 not an image). */
  private async imageRecord(
    org: Organization,
    key: string,
    accept: { pdf?: boolean } = {},
  ): Promise<MediaRecord> {
    const record = await this.deps.media.findByKey(org.id, key);
    if (!record) throw Errors.mediaNotFound(key);
    const refusal = scanRefusal(this.deps.scan, org, record);
    if (refusal) throw refusal;
    if (accept.pdf && formatOfMime(record.mimetype)?.kind === 'pdf') return record;
    if (!isRenderableType(record.mimetype)) {
      throw Errors.unsupportedType(`"${key}" is ${record.mimetype}, not an image`);
    }
    return record;
  }
}

/** 413 for a merge over `MAX_MERGE_BYTES` (`exact`: the whole total is known). */
function mergeTooLarge(total: number, limit: number, exact = false) {
  const mb = (n: number) => `${+(n / (1024 * 1024)).toFixed(1)} MB`;
  return Errors.payloadTooLarge(
    exact
      ? `The PDFs to merge total ${mb(total)}, over the limit of ${mb(limit)}`
      : `The PDFs to merge total more than the limit of ${mb(limit)}`,
  ).withExtra({ limit });
}
