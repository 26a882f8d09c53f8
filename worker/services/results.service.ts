/**
 * Writes a job's result (an object and its record) idempotently, keyed by the
 * job id: the object key is derived from the job id (a retry overwrites the
 * same object), and the record carries the job id under a unique index (a
 * retry finds the record instead of writing a second one).
 */
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { isDuplicateKey } from '@shared/db/errors';
import { Errors } from '@shared/errors';
import type { Logger } from '@shared/logger';
import { buildKey, keyBaseName } from '@shared/media/naming';
import type { FoldersRepository } from '@shared/repositories/folders.repository';
import type {
  MediaRecord,
  MediaRepository,
  RequestOrigin,
} from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
import type { UsageRepository } from '@shared/repositories/usage.repository';
import type { ObjectStore } from '@shared/storage/object-store';

export interface JobOutput {
  jobId: string;
  organization: Organization;
  folderId: number | null;
  /** The record's name (kept with its extension). */
  name: string;
  mimetype: string;
  ext: string;
  data: Buffer;
  /** The request that asked for the job (the record's `metaData`). */
  origin: RequestOrigin;
  /** The API token of that request (null for jobs queued before tokens were kept). */
  createdBy: string | null | undefined;
  /**
   * The object's key, claimed beforehand (merged PDFs at the bucket's root);
   * otherwise built like an upload's from the organization, folder and name,
   * with a token derived from the job id.
   */
  key?: string;
  /** The job's time limit: once aborted, nothing more is written (a late result is dropped). */
  signal?: AbortSignal;
}

/** Inputs a job reads from storage at once (a merge names up to MAX_MERGE_INPUTS of them). */
export const INPUT_READ_CONCURRENCY = 8;

/** The key's unguessable part, derived from the job id (stable across retries). */
export function tokenOfJob(jobId: string): string {
  return createHash('sha256').update(jobId).digest('base64url').slice(0, 12);
}

export class ResultsService {
  constructor(
    private readonly deps: {
      store: ObjectStore;
      media: MediaRepository;
      folders: FoldersRepository;
      usage: UsageRepository;
      logger: Logger;
    },
  ) {}

  /** The record a previous attempt of this job already wrote, if any. */
  existing(jobId: string): Promise<MediaRecord | null> {
    return this.deps.media.findByJobId(jobId);
  }

  async write(output: JobOutput): Promise<MediaRecord> {
    const done = await this.existing(output.jobId);
    if (done) return done;
    output.signal?.throwIfAborted();
    const folder =
      output.folderId === null
        ? null
        : await this.deps.folders.findById(output.organization.id, output.folderId);
    if (output.folderId !== null && !folder) throw Errors.folderNotFound(output.folderId);
    const key =
      output.key ??
      buildKey(
        {
          orgSlug: output.organization.slug,
          folderSlug: folder?.slug ?? null,
          baseName: keyBaseName(output.name),
          ext: output.ext,
        },
        tokenOfJob(output.jobId),
      );
    // Counted against the quota first (refused atomically past it), given back on failure.
    const usage = { bytes: output.data.length, files: 1 };
    const { id: orgId, quotaBytes } = output.organization;
    if (!(await this.deps.usage.reserve(orgId, usage, quotaBytes))) {
      throw Errors.quotaExceeded(quotaBytes ?? 0);
    }
    const release = () =>
      this.deps.usage.release(orgId, usage).catch((err: unknown) => {
        this.deps.logger.warn({ err, orgId }, 'could not give back a failed result’s usage');
      });
    try {
      output.signal?.throwIfAborted();
      await this.deps.store.put(key, output.data, { contentType: output.mimetype });
    } catch (err) {
      await release();
      throw err;
    }
    if (output.signal?.aborted) {
      // The job failed while the object was written: no record, so no object either.
      await release();
      await this.deps.store.remove(key).catch(() => undefined);
      output.signal.throwIfAborted();
    }
    try {
      return await this.deps.media.insert({
        organizationId: output.organization.id,
        folderId: folder?.id ?? null,
        key,
        name: output.name,
        mimetype: output.mimetype,
        bytes: output.data.length,
        checksum: `sha256:${createHash('sha256').update(output.data).digest('hex')}`,
        metaData: output.origin,
        createdBy: output.createdBy ?? null,
        jobId: output.jobId,
      });
    } catch (err) {
      // The insert may have landed before the failure was seen (a lost reply), or a
      // concurrent attempt of the same job may have won: either way its record
      // points at this key.
      const written = await this.existing(output.jobId).catch(() => undefined);
      if (written) {
        // Another attempt's record (ours refused as a duplicate) counted itself; after a
        // lost reply the record is ours and so is the count.
        if (isDuplicateKey(err)) await release();
        return written;
      }
      await release();
      if (written === null) {
        // Certainly no record: remove the object (a retry writes it again).
        await this.deps.store
          .remove(key)
          .catch((removeErr: unknown) =>
            this.deps.logger.error(
              { err: removeErr, key },
              'could not remove a result object left without a record',
            ),
          );
      }
      // Otherwise MongoDB could not even be asked; a retry settles the object, and
      // after the last attempt the reconciliation command finds it.
      throw err;
    }
  }

  /**
   * Reads several objects, `INPUT_READ_CONCURRENCY` at a time (each store
   * round trip is mostly waiting), each whole and within `maxBytes`. The
   * first failure stops further reads and is thrown once those in flight end.
   */
  async readMany(keys: string[], maxBytes: number): Promise<Map<string, Buffer>> {
    const distinct = [...new Set(keys)];
    const bytes = new Map<string, Buffer>();
    let next = 0;
    let failure: { err: unknown } | undefined;
    const reader = async () => {
      while (!failure && next < distinct.length) {
        const key = distinct[next++]!;
        try {
          bytes.set(key, await this.read(key, maxBytes));
        } catch (err) {
          failure ??= { err };
        }
      }
    };
    await Promise.all(
      Array.from({ length: Math.min(INPUT_READ_CONCURRENCY, distinct.length) }, reader),
    );
    if (failure) throw failure.err;
    return bytes;
  }

  /** Reads a whole object into memory (inputs of image and PDF jobs), refusing more than `maxBytes`. */
  async read(key: string, maxBytes: number): Promise<Buffer> {
    const stream: Readable = await this.deps.store.get(key);
    const chunks: Buffer[] = [];
    let length = 0;
    for await (const chunk of stream) {
      const buf = chunk as Buffer;
      length += buf.length;
      if (length > maxBytes) {
        stream.destroy();
        throw Errors.fileTooLarge(maxBytes, key);
      }
      chunks.push(buf);
    }
    return Buffer.concat(chunks, length);
  }
}
