/**
 * URL imports (POST /media/upload/url, the `media.import` job): the file is
 * fetched through the guarded way out (shared/egress/: every address checked,
 * the connection pinned, redirects checked again by hand, `Accept-Encoding:
 * identity`), streamed straight to storage while it is counted, hashed and
 * typed from its first bytes, and recorded the one way files become records
 * (shared/media-creation.ts), so usage, the `media.created` event, the scan
 * and the ThumbHash follow as for an upload.
 *
 * - Limits while streaming: `MAX_FILE_SIZE` (the guard fails on the byte past
 *   it whatever `Content-Length` says; a larger `Content-Length` is refused
 *   before reading) and the quota left when the import began; the total
 *   timeout (IMPORT_TIMEOUT_MS) cuts a slow sender.
 * - The type comes from the bytes (never the `Content-Type`), among the
 *   accepted upload types: a compressed body is never inflated, so a gzip
 *   answer is refused as gzip (415).
 * - The object's key derives from the job id, like every job result's
 *   (worker/services/results.service.ts). On any refusal or failure nothing
 *   is kept: the store aborts a partial upload, a stored object whose record
 *   is not written is removed, the booking is given back.
 * - `sourceUrl`: the URL as the client gave it, without userinfo (refused
 *   anyway), query or fragment (where pre-signed URLs carry their secrets).
 */
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import {
  egressStream,
  EgressFailed,
  EgressRefused,
  type EgressPolicy,
  type EgressStream,
} from '@shared/egress/egress';
import { AppError, Errors, isAppError } from '@shared/errors';
import type { JobPayloads } from '@shared/jobs';
import type { Logger } from '@shared/logger';
import {
  DETECTION_BYTES,
  detectType,
  headThenRest,
  readHead,
  type MediaType,
} from '@shared/media/media-types';
import { buildKey, keyBaseName, safeDisplayName } from '@shared/media/naming';
import type { MediaCreation, NewFile } from '@shared/media-creation';
import type { ImportOutcomeLabel } from '@shared/metrics';
import type { FoldersRepository } from '@shared/repositories/folders.repository';
import type { MediaRecord } from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
import type { UsageRepository } from '@shared/repositories/usage.repository';
import type { ObjectStore } from '@shared/storage/object-store';
import { tokenOfJob } from './results.service';

/** Connecting and the answer's headers take at most this much of IMPORT_TIMEOUT_MS. */
const CONNECT_MS = 5_000;
const HEADERS_MS = 10_000;
/** Redirects followed, each checked again. */
const MAX_REDIRECTS = 3;

export type ImportInput = Pick<
  JobPayloads['media.import'],
  'url' | 'folderId' | 'name' | 'onDuplicate' | 'origin' | 'tokenId'
>;

/** What the record keeps of the URL: no userinfo, query or fragment. */
export function sourceUrlOf(text: string): string {
  const url = new URL(text);
  url.username = '';
  url.password = '';
  url.search = '';
  url.hash = '';
  return url.href;
}

/** The record's name when the client gave none: the URL's last path segment, else `file`. */
export function nameOfUrl(text: string): string {
  const segment = new URL(text).pathname.split('/').filter(Boolean).pop() ?? '';
  let decoded = segment;
  try {
    decoded = decodeURIComponent(segment);
  } catch {
    // kept as it is
  }
  return safeDisplayName(decoded) || 'file';
}

export class ImportService {
  constructor(
    private readonly deps: {
      store: ObjectStore;
      creation: MediaCreation;
      folders: Pick<FoldersRepository, 'findById'>;
      usage: Pick<UsageRepository, 'get'>;
      media: { findByJobId(jobId: string): Promise<MediaRecord | null> };
      egress: EgressPolicy;
      limits: { maxFileSize: number; acceptedTypes: readonly string[] };
      /** The fetch's whole time (IMPORT_TIMEOUT_MS). */
      timeoutMs: number;
      metrics?: { imported(outcome: ImportOutcomeLabel, bytes: number): void };
      logger: Logger;
    },
  ) {}

  /** Fetches, stores and records one URL (`job`: its id names the object and the record). */
  async import(
    job: { id: string; signal: AbortSignal },
    organization: Organization,
    input: ImportInput,
  ): Promise<MediaRecord> {
    try {
      const record = await this.run(job, organization, input);
      const reused = record.jobId !== job.id;
      this.deps.metrics?.imported(reused ? 'reused' : 'stored', reused ? 0 : record.bytes);
      return record;
    } catch (err) {
      const refused = isAppError(err) && err.status < 500;
      this.deps.metrics?.imported(refused ? 'refused' : 'failed', 0);
      throw err;
    }
  }

  private async run(
    job: { id: string; signal: AbortSignal },
    organization: Organization,
    input: ImportInput,
  ): Promise<MediaRecord> {
    const { maxFileSize } = this.deps.limits;
    const folder =
      input.folderId === null
        ? null
        : await this.deps.folders.findById(organization.id, input.folderId);
    if (input.folderId !== null && !folder) throw Errors.folderNotFound(input.folderId);
    // The quota left when the import began: the stream is cut past it.
    const quota = organization.quotaBytes;
    let quotaLeft =
      quota === null
        ? Number.POSITIVE_INFINITY
        : quota - (await this.deps.usage.get(organization.id)).bytes;
    const name = input.name !== undefined ? safeDisplayName(input.name) : nameOfUrl(input.url);

    const answer = await this.open(input.url, job.signal);
    let stored: { key: string; type: MediaType; bytes: number; checksum: string } | undefined;
    const file: NewFile = this.deps.creation.start(organization);
    try {
      if (answer.status < 200 || answer.status >= 300) {
        throw Errors.urlFetchFailed(`the server answered ${answer.status}`, {
          status: answer.status,
        });
      }
      const declared = Number(answer.headers['content-length']);
      if (Number.isFinite(declared) && declared > maxFileSize) {
        throw Errors.fileTooLarge(maxFileSize, name);
      }
      const iterator = answer.body[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
      const head = await fetched(readHead(iterator, DETECTION_BYTES), name, maxFileSize);
      if (head.bytes.length === 0) throw Errors.badRequest(`"${name}" is empty`);
      const type = await detectType(head.bytes);
      if (!type || !this.deps.limits.acceptedTypes.includes(type.mime)) {
        throw Errors.unsupportedType(
          `"${name}" is not an accepted type (${this.deps.limits.acceptedTypes.join(', ')}); types are detected from the file's content`,
          [{ name, message: type ? `${type.mime} is not accepted` : 'unknown type' }],
        );
      }
      const key = buildKey(
        {
          orgSlug: organization.slug,
          folderSlug: folder?.slug ?? null,
          baseName: keyBaseName(name),
          ext: type.ext,
        },
        tokenOfJob(job.id),
      );
      const hash = createHash('sha256');
      let bytes = 0;
      const meter = (chunk: Buffer) => {
        bytes += chunk.length;
        if (bytes > maxFileSize) throw Errors.fileTooLarge(maxFileSize, name);
        if ((quotaLeft -= chunk.length) < 0) throw Errors.quotaExceeded(quota ?? 0);
        hash.update(chunk);
        return chunk;
      };
      async function* body(): AsyncGenerator<Buffer> {
        for await (const chunk of headThenRest(head, iterator)) yield meter(chunk);
      }
      await fetched(
        this.deps.store.put(key, Readable.from(body(), { objectMode: false }), {
          contentType: type.mime,
          sha256: () => hash.copy().digest('hex'),
        }),
        name,
        maxFileSize,
      );
      stored = { key, type, bytes, checksum: `sha256:${hash.digest('hex')}` };
      file.book(bytes);
    } catch (err) {
      answer.close();
      await this.deps.creation.abandon([file]);
      if (stored) await this.removeUnrecorded(stored.key, job.id);
      throw err;
    }
    answer.close();
    const [record] = await this.deps.creation.commit(
      organization,
      [
        {
          file,
          record: {
            key: stored.key,
            name,
            mimetype: stored.type.mime,
            bytes: stored.bytes,
            checksum: stored.checksum,
          },
        },
      ],
      {
        folderId: folder?.id ?? null,
        origin: input.origin,
        createdBy: input.tokenId,
        jobId: job.id,
        onDuplicate: input.onDuplicate,
        signal: job.signal,
        sourceUrl: sourceUrlOf(input.url),
      },
    );
    return record!;
  }

  /** The answer's status and headers, the body still to come; the guard's refusals as the client sees them. */
  private async open(url: string, signal: AbortSignal): Promise<EgressStream> {
    const { timeoutMs, limits } = this.deps;
    try {
      return await egressStream(
        url,
        {
          headers: { 'user-agent': 'media-import/1', accept: '*/*' },
          connectMs: Math.min(CONNECT_MS, timeoutMs),
          headersMs: Math.min(HEADERS_MS, timeoutMs),
          totalMs: timeoutMs,
          maxBytes: limits.maxFileSize,
          maxRedirects: MAX_REDIRECTS,
          signal,
        },
        this.deps.egress,
      );
    } catch (err) {
      throw asAppError(err, 'file', limits.maxFileSize);
    }
  }

  /** Removes the object of an import whose record was not written (unless another attempt recorded it). */
  private async removeUnrecorded(key: string, jobId: string): Promise<void> {
    const existing = await this.deps.media.findByJobId(jobId).catch(() => undefined);
    if (existing !== null) return; // recorded, or cannot be told (reconcile finds it)
    await this.deps.store
      .remove(key)
      .catch((err: unknown) =>
        this.deps.logger.error({ err, key }, 'could not remove an import left without a record'),
      );
  }
}

/** Awaits a step that reads the answer, its egress failures turned into the client's errors. */
async function fetched<T>(step: Promise<T>, name: string, maxFileSize: number): Promise<T> {
  try {
    return await step;
  } catch (err) {
    throw asAppError(err, name, maxFileSize);
  }
}

/** The guard's refusals and failures as the errors the client sees; others as they are. */
function asAppError(err: unknown, name: string, maxFileSize: number): unknown {
  if (err instanceof AppError) return err;
  if (err instanceof EgressRefused) return Errors.urlNotAllowed(err.reason);
  if (err instanceof EgressFailed) {
    if (err.kind === 'too_large') return Errors.fileTooLarge(maxFileSize, name);
    return Errors.urlFetchFailed(err.message, { reason: err.kind });
  }
  return err;
}
