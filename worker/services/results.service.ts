/**
 * Writes a job's result (an object and its record) idempotently, keyed by the
 * job id: the object key is derived from the job id (a retry overwrites the
 * same object), and the record carries the job id under a unique index (a
 * retry finds the record instead of writing a second one). A result whose
 * folder is deleted while it is written is removed again once its record is
 * in, and the job fails with 404 FOLDER_NOT_FOUND (no record stays in a
 * folder that no longer exists).
 */
import { createHash, webcrypto } from 'node:crypto';
import type { Readable } from 'node:stream';
import { isDuplicateKey } from '@shared/db/errors';
import { Errors } from '@shared/errors';
import type { Logger } from '@shared/logger';
import { buildKey, keyBaseName } from '@shared/media/naming';
import type { MediaDeletion } from '@shared/media-deletion';
import type { FoldersRepository } from '@shared/repositories/folders.repository';
import type {
  MediaRecord,
  MediaRepository,
  RequestOrigin,
} from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
import type { Booking, UsageRepository } from '@shared/repositories/usage.repository';
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
      /** Removes a result whose folder was deleted while it was written. */
      deletion: Pick<MediaDeletion, 'delete'>;
      logger: Logger;
    },
  ) {}

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
    // The record's id taken and the file booked under it (counted against the
    // quota, refused atomically past it) while the object is written: the two
    // MongoDB round trips run beside the storage write, not after it. The
    // booking is given back and the object removed when either fails; should
    // this process die before the record is in, the booking expires on its own.
    const usage = { bytes: output.data.length, files: 1 };
    const { id: orgId, quotaBytes } = output.organization;
    let booking: Booking | null = null;
    const release = () =>
      this.deps.usage.cancel(booking ? [booking] : []).catch((err: unknown) => {
        this.deps.logger.warn({ err, orgId }, 'could not give back a failed result’s usage');
      });
    // The checksum is computed on libuv's thread pool (on the event loop after the PUT it
    // was the last step before the record: ~10 ms for a 5 MB PNG), and the PUT signs its
    // payload with it rather than hashing the bytes again.
    const digest = webcrypto.subtle
      .digest('SHA-256', output.data)
      .then((d) => Buffer.from(d).toString('hex'));
    digest.catch(() => undefined); // awaited below, or moot once the write has failed
    const [booked, put] = await Promise.allSettled([
      this.deps.media
        .nextId()
        .then((id) => this.deps.usage.book(orgId, id, usage, quotaBytes))
        .then((b) => (booking = b)),
      this.deps.store.put(key, output.data, {
        contentType: output.mimetype,
        sha256: () => digest,
      }),
    ]);
    if (booked.status === 'rejected' || !booked.value || put.status === 'rejected') {
      await release();
      if (put.status === 'fulfilled') await this.removeUnrecorded(key, output.jobId);
      if (booked.status === 'rejected') throw booked.reason;
      if (!booked.value) throw Errors.quotaExceeded(quotaBytes ?? 0);
      throw (put as PromiseRejectedResult).reason;
    }
    const held = booked.value;
    if (output.signal?.aborted) {
      // The job failed while the object was written: no record, so no object either.
      await release();
      await this.removeUnrecorded(key, output.jobId);
      output.signal.throwIfAborted();
    }
    let record: MediaRecord;
    try {
      if (!(await this.deps.usage.keep([held], quotaBytes))) {
        throw Errors.quotaExceeded(quotaBytes ?? 0);
      }
      record = await this.deps.media.insert(
        {
          organizationId: output.organization.id,
          folderId: folder?.id ?? null,
          key,
          name: output.name,
          mimetype: output.mimetype,
          bytes: output.data.length,
          checksum: `sha256:${await digest}`,
          metaData: output.origin,
          createdBy: output.createdBy ?? null,
          jobId: output.jobId,
        },
        held.id,
      );
    } catch (err) {
      // The insert may have landed before the failure was seen (a lost reply), or a
      // concurrent attempt of the same job may have won: either way its record
      // points at this key.
      const written = await this.existing(output.jobId).catch(() => undefined);
      if (written) {
        // Another attempt's record (ours refused as a duplicate) counted itself; after a
        // lost reply the record is ours and so is the count.
        if (isDuplicateKey(err)) await release();
        else this.settle(held);
        return written;
      }
      await release();
      // Certainly no record: remove the object (a retry writes it again).
      if (written === null) await this.removeObject(key);
      // Otherwise MongoDB could not even be asked; a retry settles the object, and
      // after the last attempt the reconciliation command finds it.
      throw err;
    }
    if (output.signal?.aborted) {
      // The job failed while its record was inserted: record, booking and object taken back.
      await this.deps.media.removeByIds([record.id]);
      await release();
      await this.removeObject(key);
      output.signal.throwIfAborted();
    }
    this.settle(held);
    if (folder && !(await this.deps.folders.isLive(orgId, folder.id))) {
      // The folder was deleted while the result was written: the result goes with it
      // (a recursive delete that listed it already takes it itself).
      await this.deps.deletion.delete(record);
      throw Errors.folderNotFound(folder.id);
    }
    return record;
  }

  /**
   * The booking's record is in: settled off the job's path (one that fails
   * leaves a booking whose record exists, which its expiry only settles).
   */
  private settle(booking: Booking): void {
    this.deps.usage.settle([booking]).catch((err: unknown) => {
      this.deps.logger.debug({ err, id: booking.id }, 'booking not settled; its expiry will');
    });
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
