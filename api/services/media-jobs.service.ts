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
import { Errors, isAppError } from '@shared/errors';
import type { JobPayloads } from '@shared/jobs';
import type {
  MediaRecord,
  MediaRepository,
  RequestOrigin,
} from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
import { isRenderableType } from '@shared/media/formats';
import { convertIsHeavy, mergeIsHeavy } from '@shared/media/work';
import type { FoldersService } from './folders.service';
import { lastField, type FormReader } from '../domain/streamed-form';
import type { IngestService } from './ingest.service';
import type { JobAnswer, JobsService } from './jobs.service';

/** What every job request carries from the HTTP request. */
export interface JobRequest {
  requestId: string;
  origin: RequestOrigin;
  /** The API token making the request (kept on the record a job creates). */
  tokenId: string;
  /** Answer at once with the job id (`Prefer: respond-async`) instead of waiting. */
  async: boolean;
  /** Called once the job is queued (an `Idempotency-Key` remembers it for retries). */
  onQueued?: ((jobId: string) => void) | undefined;
}

export interface ConvertInput {
  key: string;
  format: JobPayloads['image.convert']['format'];
  quality?: number | undefined;
}

type ResolvedInput = {
  key: string;
  name: string;
  bytes: number;
  range?: { offset: number; length: number };
};
type MergeInput = Promise<ResolvedInput> | { storedKey: string };

const MERGE_FIELDS = 'files, mediaKeys, folder, folderId';

export class MediaJobsService {
  constructor(
    private readonly deps: {
      jobs: JobsService;
      media: MediaRepository;
      ingest: IngestService;
      folders: FoldersService;
      limits: { maxFileSize: number; maxMergeInputs: number; maxMergeBytes: number };
    },
  ) {}

  async metadata(org: Organization, key: string, request: JobRequest): Promise<JobAnswer> {
    const record = await this.imageRecord(org, key);
    return this.deps.jobs.run(
      'image.metadata',
      { organizationId: org.id, requestId: request.requestId, key: record.key },
      { async: request.async },
    );
  }

  async convert(org: Organization, input: ConvertInput, request: JobRequest): Promise<JobAnswer> {
    const record = await this.imageRecord(org, input.key);
    return this.deps.jobs.run(
      'image.convert',
      {
        organizationId: org.id,
        requestId: request.requestId,
        origin: request.origin,
        tokenId: request.tokenId,
        key: record.key,
        format: input.format,
        ...(input.quality === undefined ? {} : { quality: input.quality }),
      },
      {
        async: request.async,
        heavy: convertIsHeavy(input.format, record),
        onQueued: request.onQueued,
      },
    );
  }

  /** Merges the PDFs a form names (`files` parts and `mediaKeys` fields, in form order). */
  async merge(org: Organization, form: FormReader, request: JobRequest): Promise<JobAnswer> {
    const { maxMergeInputs: maxInputs, maxMergeBytes } = this.deps.limits;
    // Uploaded bytes as they stream: refused as soon as they alone are over the total.
    let uploadedBytes = 0;
    const meterUpload = (n: number) => {
      if ((uploadedBytes += n) > maxMergeBytes) throw mergeTooLarge(uploadedBytes, maxMergeBytes);
    };
    const inputs: MergeInput[] = [];
    // Every uploaded part goes into one temporary object, in form order.
    const bundle = this.deps.ingest.bundle(org);
    let owned = false;
    const addInput = (input: MergeInput) => {
      if (inputs.length >= maxInputs) throw Errors.tooManyFiles(maxInputs, 'merge inputs');
      if (input instanceof Promise) input.catch(() => undefined); // observed below
      inputs.push(input);
    };
    try {
      const { fields } = await form(
        {
          maxFileSize: this.deps.limits.maxFileSize,
          maxFiles: maxInputs,
          filesNoun: 'merge inputs',
          maxFields: maxInputs + 10,
        },
        {
          onField(name, value) {
            if (name === 'mediaKeys' || name === 'mediaKeys[]') {
              for (const key of parseKeys(value)) addInput({ storedKey: key });
            } else if (name !== 'folder' && name !== 'folderId') {
              throw Errors.validation([
                { field: name, message: `unknown field "${name}" (accepted: ${MERGE_FIELDS})` },
              ]);
            }
          },
          onFile: async (part) => {
            if (part.field !== 'files' && part.field !== 'files[]') {
              throw Errors.validation([
                {
                  field: part.field,
                  message: `unexpected file field "${part.field}" (send PDFs as "files")`,
                },
              ]);
            }
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
        },
      );
      if (inputs.length === 0) {
        throw Errors.validation([
          {
            field: 'files',
            message: 'at least one input is required: "files" parts and/or "mediaKeys"',
          },
        ]);
      }
      const resolved = await this.resolveInputs(org, inputs);
      // Every occurrence counts, as in the worker's check: refused before any job is queued.
      const totalBytes = resolved.reduce((n, input) => n + input.bytes, 0);
      if (totalBytes > maxMergeBytes) throw mergeTooLarge(totalBytes, maxMergeBytes, true);
      const folder = await this.deps.folders.resolve(org, {
        folder: lastField(fields, 'folder'),
        folderId: lastField(fields, 'folderId'),
      });
      await bundle.finish();
      return await this.deps.jobs.run(
        'pdf.merge',
        {
          organizationId: org.id,
          requestId: request.requestId,
          origin: request.origin,
          tokenId: request.tokenId,
          inputs: resolved.map(({ key, name, range }) => ({ key, name, ...(range && { range }) })),
          folderId: folder?.id ?? null,
          temporaryKeys: bundle.used ? [bundle.key] : [],
        },
        {
          async: request.async,
          heavy: mergeIsHeavy(resolved),
          // Once queued, the job owns the bundle (and removes it when it ends); until then
          // (Redis refusing the job) it is this request's to remove.
          onQueued: (jobId) => {
            owned = true;
            request.onQueued?.(jobId);
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
  private async resolveInputs(org: Organization, inputs: MergeInput[]): Promise<ResolvedInput[]> {
    const storedKeys = inputs.flatMap((i) => (i instanceof Promise ? [] : [i.storedKey]));
    const records = await this.deps.media.findByKeys(org.id, storedKeys);
    return Promise.all(
      inputs.map(async (input, index) => {
        if (input instanceof Promise) return input;
        const key = input.storedKey;
        const record = records.get(key);
        if (!record) throw Errors.mediaNotFound(key).forInput(index, key);
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

  /** The record of an image key of this organization (404 unknown, 415 not an image). */
  private async imageRecord(org: Organization, key: string): Promise<MediaRecord> {
    const record = await this.deps.media.findByKey(org.id, key);
    if (!record) throw Errors.mediaNotFound(key);
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

/** `mediaKeys` as repeated fields, or one JSON array. */
function parseKeys(value: string): string[] {
  const trimmed = value.trim();
  if (trimmed.startsWith('[')) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(trimmed);
    } catch {
      throw Errors.validation([
        { field: 'mediaKeys', message: 'mediaKeys is not a valid JSON array' },
      ]);
    }
    if (
      !Array.isArray(parsed) ||
      !parsed.every((k): k is string => typeof k === 'string' && k !== '')
    ) {
      throw Errors.validation([
        { field: 'mediaKeys', message: 'mediaKeys must be an array of keys' },
      ]);
    }
    return parsed;
  }
  if (!trimmed)
    throw Errors.validation([{ field: 'mediaKeys', message: 'mediaKeys must not be empty' }]);
  return [trimmed];
}
