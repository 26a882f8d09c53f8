/**
 * Writes a job's result (an object and its record) idempotently, keyed by the
 * job id: the object key is derived from the job id (a retry overwrites the
 * same object), and the record, made the one way files become records
 * (shared/media-creation.ts), carries the job id under a unique index (a
 * retry finds the record instead of writing a second one). A result whose
 * folder is deleted while it is written is removed again once its record is
 * in, and the job fails with 404 FOLDER_NOT_FOUND. Also reads a job's inputs
 * from storage, bounded.
 */
import { createHash, webcrypto } from 'node:crypto';
import type { Readable } from 'node:stream';
import { LRUCache } from 'lru-cache';
import { Errors } from '@shared/errors';
import type { Logger } from '@shared/logger';
import { buildKey, keyBaseName } from '@shared/media/naming';
import type { MediaCreation } from '@shared/media-creation';
import type { FoldersRepository } from '@shared/repositories/folders.repository';
import type {
  MediaRecord,
  MediaRepository,
  RequestOrigin,
} from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
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
  /** Made only of clean files: recorded `clean`, not scanned again (shared/media-creation.ts). */
  fromCleanInputs?: boolean;
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
      media: Pick<MediaRepository, 'findByJobId'>;
      folders: Pick<FoldersRepository, 'findById'>;
      /** Where the result becomes a record (booking, insert, events, clean-up). */
      creation: MediaCreation;
      logger: Logger;
      /**
       * Bytes of recently read sources kept in memory (RENDER_SOURCE_CACHE_BYTES; 0 or
       * absent: none), for `readSource`.
       */
      sourceCacheBytes?: number;
    },
  ) {
    const maxSize = deps.sourceCacheBytes ?? 0;
    if (maxSize > 0) {
      this.sources = new LRUCache<string, Buffer, number>({
        maxSize,
        // A source larger than a quarter of the cache would push out the burst it is part of.
        maxEntrySize: Math.max(1, Math.floor(maxSize / 4)),
        sizeCalculation: (b) => Math.max(1, b.length),
        fetchMethod: (cacheKey, _stale, { context }) =>
          this.read(cacheKey.slice(cacheKey.indexOf('\n') + 1), context),
      });
    }
  }

  /** Recently read sources, by checksum and key (see `readSource`). */
  private readonly sources: LRUCache<string, Buffer, number> | undefined;

  /** The record a previous attempt of this job already wrote, if any. */
  existing(jobId: string): Promise<MediaRecord | null> {
    return this.deps.media.findByJobId(jobId);
  }

  /**
   * Writes the result. Callers ask `existing()` first (a processor does it
   * beside its other lookups), so it is not asked again here; should a
   * previous attempt have written the record after all, its unique job id
   * refuses the second one and that record is answered.
   */
  async write(output: JobOutput): Promise<MediaRecord> {
    output.signal?.throwIfAborted();
    const { organization, jobId } = output;
    const folder =
      output.folderId === null
        ? null
        : await this.deps.folders.findById(organization.id, output.folderId);
    if (output.folderId !== null && !folder) throw Errors.folderNotFound(output.folderId);
    const key =
      output.key ??
      buildKey(
        {
          orgSlug: organization.slug,
          folderSlug: folder?.slug ?? null,
          baseName: keyBaseName(output.name),
          ext: output.ext,
        },
        tokenOfJob(jobId),
      );
    // The record's id taken and the file booked under it while the object is written: the
    // MongoDB round trips run beside the storage write, not after it.
    const file = this.deps.creation.start(organization);
    file.book(output.data.length);
    // The checksum is computed on libuv's thread pool, and the PUT signs its payload with
    // it rather than hashing the bytes again.
    const digest = webcrypto.subtle
      .digest('SHA-256', output.data)
      .then((d) => Buffer.from(d).toString('hex'));
    digest.catch(() => undefined); // awaited below, or moot once the write has failed
    const [booked, put] = await Promise.allSettled([
      file.booking!,
      this.deps.store.put(key, output.data, { contentType: output.mimetype, sha256: () => digest }),
    ]);
    if (booked.status === 'rejected' || booked.value === null || put.status === 'rejected') {
      await this.deps.creation.abandon([file]);
      if (put.status === 'fulfilled') await this.removeUnrecorded(key, jobId);
      if (booked.status === 'rejected') throw booked.reason;
      if (booked.value === null) throw Errors.quotaExceeded(organization.quotaBytes ?? 0);
      throw (put as PromiseRejectedResult).reason;
    }
    const [record] = await this.deps.creation.commit(
      organization,
      [
        {
          file,
          record: {
            key,
            name: output.name,
            mimetype: output.mimetype,
            bytes: output.data.length,
            checksum: `sha256:${await digest}`,
          },
        },
      ],
      {
        folderId: folder?.id ?? null,
        origin: output.origin,
        createdBy: output.createdBy ?? null,
        jobId,
        ...(output.signal ? { signal: output.signal } : {}),
        ...(output.fromCleanInputs ? { fromCleanInputs: true } : {}),
      },
    );
    return record!;
  }

  /**
   * Removes the object a failed write left, unless another attempt of the job
   * recorded it meanwhile (the key is the job's); left alone when that cannot
   * be told (reconcile finds it).
   */
  private async removeUnrecorded(key: string, jobId: string): Promise<void> {
    if ((await this.existing(jobId).catch(() => undefined)) === null) await this.removeObject(key);
  }

  /** Removes a result object left without a record; logs a failure (reconcile finds it). */
  private async removeObject(key: string): Promise<void> {
    await this.deps.store
      .remove(key)
      .catch((err: unknown) =>
        this.deps.logger.error(
          { err, key },
          'could not remove a result object left without a record',
        ),
      );
  }

  /**
   * Sizes of several objects from the store's metadata (nothing read), the
   * way `readMany` reads them; a key with no object is a 404.
   */
  async sizes(keys: string[]): Promise<Map<string, number>> {
    const sizes = new Map<string, number>();
    await eachLimited(keys, async (key) => {
      const info = await this.deps.store.stat(key);
      if (!info) throw Errors.mediaNotFound(key);
      sizes.set(key, info.size);
    });
    return sizes;
  }

  /**
   * Reads several objects, `INPUT_READ_CONCURRENCY` at a time (each store
   * round trip is mostly waiting), each whole and within `maxBytes` (a bound
   * per key when it is a function), all of them within `maxTotal` (413 past
   * it: objects may have grown since their sizes were checked). The first failure stops further reads and is thrown
   * once those in flight end.
   */
  async readMany(
    keys: string[],
    maxBytes: number | ((key: string) => number),
    maxTotal = Number.POSITIVE_INFINITY,
  ): Promise<Map<string, Buffer>> {
    const bytes = new Map<string, Buffer>();
    const total = { left: maxTotal, limit: maxTotal };
    const limitOf = typeof maxBytes === 'number' ? () => maxBytes : maxBytes;
    await eachLimited(
      keys,
      async (key) => void bytes.set(key, await this.read(key, limitOf(key), total)),
    );
    return bytes;
  }

  /**
   * Reads a stored file's bytes as `read` does, through a worker-local LRU
   * bounded in bytes (RENDER_SOURCE_CACHE_BYTES): responsive images ask for
   * several widths of one source in a burst, and each render would read the
   * whole source from storage again. A key's bytes never change, and the
   * entry is named by the record's checksum as well as its key, so an entry
   * never answers for other bytes; nothing needs invalidating. Callers look
   * the record up first (a deleted file is refused there, so its entry is
   * never used again and ages out). Reads of one source at once are one
   * storage read. The returned buffer is shared: not to be written to.
   */
  readSource(record: { key: string; checksum: string }, maxBytes: number): Promise<Buffer> {
    if (!this.sources) return this.read(record.key, maxBytes);
    return this.sources
      .fetch(`${record.checksum}\n${record.key}`, { context: maxBytes })
      .then((bytes) => bytes ?? this.read(record.key, maxBytes));
  }

  /** Reads a whole object into memory (inputs of image and PDF jobs), refusing more than `maxBytes`. */
  async read(
    key: string,
    maxBytes: number,
    total?: { left: number; limit: number },
  ): Promise<Buffer> {
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
      if (total && (total.left -= buf.length) < 0) {
        stream.destroy();
        throw Errors.payloadTooLarge(
          `The inputs read total more than the limit of ${total.limit} bytes`,
        ).withExtra({ limit: total.limit });
      }
      chunks.push(buf);
    }
    return Buffer.concat(chunks, length);
  }
}

/**
 * Runs `work` once per distinct key, `INPUT_READ_CONCURRENCY` at a time. The
 * first failure stops further starts and is thrown once those in flight end.
 */
async function eachLimited(keys: string[], work: (key: string) => Promise<void>): Promise<void> {
  const distinct = [...new Set(keys)];
  let next = 0;
  let failure: { err: unknown } | undefined;
  const runner = async () => {
    while (!failure && next < distinct.length) {
      const key = distinct[next++]!;
      try {
        await work(key);
      } catch (err) {
        failure ??= { err };
      }
    }
  };
  await Promise.all(
    Array.from({ length: Math.min(INPUT_READ_CONCURRENCY, distinct.length) }, runner),
  );
  if (failure) throw failure.err;
}
