/**
 * Resumable uploads (tus 1.0, docs/resumable-uploads.md): the protocol's
 * state and bytes, kept where every API replica finds them, so that any
 * replica serves any request of an upload (no sticky sessions).
 *
 * - State: one JSON value per upload in Redis (`<prefix>:tus:{<id>}`), with
 *   two sorted sets by expiry: the organization's uploads in progress (the
 *   `RESUMABLE_MAX_INCOMPLETE` cap) and every upload (the cleanup).
 * - Bytes: each PATCH's bytes become one temporary object
 *   (`<org>/.tmp/tus/<id>/<offset>`), written through the object store like
 *   any other (S3 or the file system); a PATCH cut by the network keeps what
 *   arrived (without a checksum), one whose checksum fails keeps nothing.
 * - Completion: the temporary objects are read back in order and streamed
 *   through the same path as `POST /media/upload` (UploadService.uploadStream:
 *   type detection, size and quota metering, SHA-256, key, record, usage,
 *   `media.created`), then removed.
 * - A lock per upload in Redis (SET NX with a TTL renewed while a PATCH
 *   streams): a second writer asks the holder to let go (the release request:
 *   the holder ends its PATCH at the bytes it has, keeps them and answers),
 *   waits a bounded time, else gets 423.
 */
import { createHash, randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import type { Config } from '@shared/config';
import { Errors, isAppError } from '@shared/errors';
import type { Logger } from '@shared/logger';
import { DETECTION_BYTES, detectType } from '@shared/media/media-types';
import type { MediaRecord } from '@shared/repositories/media.repository';
import type { UsageRepository } from '@shared/repositories/usage.repository';
import type { RedisConnection } from '@shared/queue/redis';
import type { ObjectStore } from '@shared/storage/object-store';
import type { Caller } from '../domain/caller';
import type { UploadService } from './upload.service';

/** Checksum algorithms of the `checksum` extension (sha1 is the one the spec requires). */
export const CHECKSUM_ALGORITHMS = ['sha1', 'sha256'] as const;
export type ChecksumAlgorithm = (typeof CHECKSUM_ALGORITHMS)[number];

/** Longest decoded `Upload-Metadata` value, and the whole header. */
export const MAX_METADATA_VALUE = 1024;
export const MAX_METADATA_HEADER = 8 * 1024;

/** What `Upload-Metadata` may say of the file (the keys Uppy and tus-js-client send). */
export interface UploadMetadata {
  filename?: string | undefined;
  filetype?: string | undefined;
  folder?: string | undefined;
  folderId?: string | undefined;
}

export interface ResumableState {
  id: string;
  organizationId: number;
  /** null: deferred (`Upload-Defer-Length: 1`) until a PATCH says it. */
  length: number | null;
  offset: number;
  metadata: UploadMetadata;
  createdAt: number;
  expiresAt: number;
  /** The temporary objects, in order. */
  chunks: { key: string; size: number }[];
  /** Up to DETECTION_BYTES of the first bytes (base64), for the type check. */
  head: string;
  /** `Upload-Concat: partial`: never a record of its own. */
  partial: boolean;
  /** `Upload-Concat: final`: the partial uploads' URLs it was made of. */
  final?: string[] | undefined;
  /** Once the record is written: its key (the `Media-Key` header). */
  mediaKey?: string | undefined;
  /** Set by the cleanup once expired and removed (answers 410 until the state itself expires). */
  expired?: boolean | undefined;
}

export interface PatchInput {
  offset: number;
  body: Readable;
  /** `Upload-Length`, for a deferred length. */
  length?: number | undefined;
  checksum?: { algorithm: ChecksumAlgorithm; digest: string } | undefined;
}

export interface PatchResult {
  state: ResumableState;
  /** Set when this request completed the upload. */
  record?: MediaRecord | undefined;
}

/** Resumable uploads' metrics (shared/metrics.ts). */
export interface ResumableMetrics {
  resumableBytesReceived(bytes: number): void;
  resumableLockWait(outcome: 'acquired' | 'refused'): void;
  resumableExpiredCleaned(count: number): void;
}

/** How long a lock lives without renewal, how often it is renewed, how long a writer waits for one. */
const LOCK_TTL_MS = 10_000;
const LOCK_RENEW_MS = 1_000;
const LOCK_WAIT_MS = 4_000;
/** How long an expired upload answers 410 (then 404). */
const TOMBSTONE_MS = 24 * 60 * 60 * 1000;

const RELEASE_LOCK = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`;
const RENEW_LOCK = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end`;

export class ResumableService {
  private readonly prefix: string;

  constructor(
    private readonly deps: {
      redis: () => RedisConnection | undefined;
      store: ObjectStore;
      uploads: Pick<UploadService, 'uploadStream'>;
      usage: Pick<UsageRepository, 'get'>;
      config: Pick<Config, 'queuePrefix'> & {
        limits: Pick<Config['limits'], 'maxFileSize' | 'acceptedTypes' | 'resumable'>;
      };
      metrics?: ResumableMetrics | undefined;
      logger: Logger;
    },
  ) {
    this.prefix = `${deps.config.queuePrefix}:tus`;
  }

  private get redis(): RedisConnection {
    const redis = this.deps.redis();
    if (!redis) throw Errors.unavailable('Redis');
    return redis;
  }

  private stateKey = (id: string) => `${this.prefix}:{${id}}`;
  private lockKey = (id: string) => `${this.prefix}:{${id}}:lock`;
  private releaseKey = (id: string) => `${this.prefix}:{${id}}:release`;
  private orgKey = (orgId: number) => `${this.prefix}:org:${orgId}`;
  private get expiriesKey() {
    return `${this.prefix}:expiries`;
  }

  get expiryMs(): number {
    return this.deps.config.limits.resumable.expiryMs;
  }

  /** Uploads not finished and not expired, every organization (the in-progress gauge). */
  async inProgress(): Promise<number> {
    return this.redis.zcount(this.expiriesKey, String(Date.now()), '+inf');
  }

  /**
   * Creates an upload (`creation`, `creation-defer-length`, `concatenation`):
   * the size against MAX_FILE_SIZE and the quota (413), the organization's
   * uploads in progress against RESUMABLE_MAX_INCOMPLETE (429).
   */
  async create(
    caller: Caller,
    input: { length: number | null; metadata: UploadMetadata; partial: boolean },
  ): Promise<ResumableState> {
    const org = caller.organization;
    if (input.length !== null) await this.checkSize(caller, input.length, input.metadata);
    const now = Date.now();
    const { maxIncomplete } = this.deps.config.limits.resumable;
    const redis = this.redis;
    if ((await redis.zcount(this.orgKey(org.id), String(now), '+inf')) >= maxIncomplete) {
      throw Errors.tooManyIncompleteUploads(maxIncomplete);
    }
    const state: ResumableState = {
      id: randomUUID().replaceAll('-', ''),
      organizationId: org.id,
      length: input.length,
      offset: 0,
      metadata: input.metadata,
      createdAt: now,
      expiresAt: now + this.expiryMs,
      chunks: [],
      head: '',
      partial: input.partial,
    };
    await this.save(state);
    await redis.zadd(this.orgKey(org.id), state.expiresAt, state.id);
    await redis.zadd(this.expiriesKey, state.expiresAt, state.id);
    return state;
  }

  /**
   * A final upload (`Upload-Concat: final`): the caller's finished partial
   * uploads, in order, become one file and its record at once; the partials
   * are removed. Another organization's partial is 404, like a missing one.
   */
  async concatenate(
    caller: Caller,
    partialIds: string[],
    metadata: UploadMetadata,
  ): Promise<PatchResult> {
    const partials: ResumableState[] = [];
    for (const id of partialIds) {
      const partial = await this.find(caller, id);
      if (!partial.partial || partial.length === null || partial.offset !== partial.length) {
        throw Errors.badRequest(`Upload ${id} is not a finished partial upload`);
      }
      partials.push(partial);
    }
    const length = partials.reduce((n, p) => n + p.offset, 0);
    await this.checkSize(caller, length, metadata);
    const now = Date.now();
    const state: ResumableState = {
      id: randomUUID().replaceAll('-', ''),
      organizationId: caller.organization.id,
      length,
      offset: length,
      metadata,
      createdAt: now,
      expiresAt: now + this.expiryMs,
      chunks: partials.flatMap((p) => p.chunks),
      head: '',
      partial: false,
      final: partialIds,
    };
    const record = await this.complete(caller, state, { removeOnFailure: false });
    // The partials' bytes are the record's now: their objects and states go.
    for (const partial of partials) await this.forget(partial);
    return { state, record };
  }

  /** The caller's upload: 404 when missing or another organization's, 410 once expired. */
  async find(caller: Caller, id: string): Promise<ResumableState> {
    const raw = /^[0-9a-f]{32}$/.test(id) ? await this.redis.get(this.stateKey(id)) : null;
    if (raw === null) throw Errors.notFound('No such upload');
    const state = JSON.parse(raw) as ResumableState;
    if (state.organizationId !== caller.organization.id) throw Errors.notFound('No such upload');
    if (state.expired || (state.mediaKey === undefined && state.expiresAt <= Date.now())) {
      throw Errors.uploadExpired();
    }
    return state;
  }

  /**
   * Appends a PATCH's bytes (`core`, `checksum`, deferred length), under the
   * upload's lock. The last byte in makes the record.
   */
  async patch(caller: Caller, id: string, input: PatchInput): Promise<PatchResult> {
    return this.locked(id, async (released) => {
      const state = await this.find(caller, id);
      if (state.final) throw Errors.uploadFinal();
      if (input.offset !== state.offset) throw Errors.offsetMismatch(state.offset);
      if (input.length !== undefined) {
        if (state.length !== null && state.length !== input.length) {
          throw Errors.badRequest('Upload-Length cannot change once known');
        }
        if (state.length === null) {
          if (input.length < state.offset) {
            throw Errors.badRequest('Upload-Length is less than the bytes already received');
          }
          await this.checkSize(caller, input.length, state.metadata);
          state.length = input.length;
        }
      }
      if (state.length !== null && state.offset === state.length && !state.mediaKey) {
        input.body.resume();
      } else if (state.mediaKey) {
        throw Errors.offsetMismatch(state.offset);
      } else {
        await this.append(caller, state, input, released);
      }
      let record: MediaRecord | undefined;
      if (state.length !== null && state.offset === state.length && !state.partial) {
        record = await this.complete(caller, state, { removeOnFailure: true });
      } else {
        await this.save(state);
      }
      return { state, record };
    });
  }

  /** `termination`: the upload's bytes and state removed (then 404). */
  async terminate(caller: Caller, id: string): Promise<void> {
    await this.locked(id, async () => {
      const state = await this.find(caller, id).catch((err: unknown) => {
        // An expired upload can be terminated too (its bytes go at once).
        if (isAppError(err) && err.code === 'UPLOAD_EXPIRED') return null;
        throw err;
      });
      if (state) await this.forget(state);
      else await this.redis.del(this.stateKey(id));
    });
  }

  /**
   * Removes expired uploads' temporary objects and marks them expired (410
   * until the state itself lapses): the scheduled cleanup. Returns how many.
   */
  async cleanupExpired(now = Date.now()): Promise<number> {
    const redis = this.redis;
    const ids = await redis.zrangebyscore(this.expiriesKey, 0, now, 'LIMIT', 0, 500);
    let cleaned = 0;
    for (const id of ids) {
      const raw = await redis.get(this.stateKey(id));
      const state = raw === null ? null : (JSON.parse(raw) as ResumableState);
      if (state && state.mediaKey === undefined) {
        await this.removeChunks(state);
        state.expired = true;
        state.chunks = [];
        await redis.set(this.stateKey(id), JSON.stringify(state), 'PX', TOMBSTONE_MS);
        await redis.zrem(this.orgKey(state.organizationId), id);
        cleaned += 1;
      }
      await redis.zrem(this.expiriesKey, id);
    }
    if (cleaned > 0) {
      this.deps.metrics?.resumableExpiredCleaned(cleaned);
      this.deps.logger.info({ cleaned }, 'expired resumable uploads removed');
    }
    return cleaned;
  }

  private async checkSize(caller: Caller, length: number, metadata: UploadMetadata): Promise<void> {
    const { maxFileSize } = this.deps.config.limits;
    if (length > maxFileSize) throw Errors.fileTooLarge(maxFileSize, metadata.filename);
    const quota = caller.organization.quotaBytes;
    if (quota !== null) {
      const { bytes } = await this.deps.usage.get(caller.organization.id);
      if (bytes + length > quota) throw Errors.quotaExceeded(quota);
    }
  }

  /** Streams the PATCH body to one temporary object; updates `state` once it is stored. */
  private async append(
    caller: Caller,
    state: ResumableState,
    input: PatchInput,
    released: AbortSignal,
  ): Promise<void> {
    const { maxFileSize, acceptedTypes } = this.deps.config.limits;
    const quota = caller.organization.quotaBytes;
    const remaining =
      quota === null ? Infinity : quota - (await this.deps.usage.get(caller.organization.id)).bytes;
    const hash = input.checksum ? createHash(input.checksum.algorithm) : undefined;
    let head = Buffer.from(state.head, 'base64');
    const checkType = !state.partial && head.length < DETECTION_BYTES;
    let received = 0;
    const start = state.offset;
    const metrics = this.deps.metrics;
    const name = state.metadata.filename;
    async function* body(): AsyncGenerator<Buffer> {
      const iterator = input.body[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
      for (;;) {
        let next: IteratorResult<Buffer>;
        try {
          if (released.aborted) return; // another writer asked for the lock: keep what came
          next = await iterator.next();
        } catch (err) {
          // The client went away: without a checksum the bytes that came are kept.
          if (!hash) return;
          throw err;
        }
        if (next.done) return;
        const chunk = next.value;
        received += chunk.length;
        const total = start + received;
        if (state.length !== null && total > state.length) {
          throw Errors.payloadTooLarge(`The upload's length is ${state.length} bytes`);
        }
        if (total > maxFileSize) throw Errors.fileTooLarge(maxFileSize, name);
        if (total > remaining) throw Errors.quotaExceeded(quota ?? 0);
        hash?.update(chunk);
        metrics?.resumableBytesReceived(chunk.length);
        if (checkType && head.length < DETECTION_BYTES) {
          head = Buffer.concat([head, chunk.subarray(0, DETECTION_BYTES - head.length)]);
          if (head.length >= DETECTION_BYTES) {
            const type = await detectType(head);
            if (!type || !acceptedTypes.includes(type.mime)) {
              throw Errors.unsupportedType(
                `${name ? `"${name}"` : 'The file'} is not an accepted type (${acceptedTypes.join(', ')}); types are detected from the file's content`,
              );
            }
          }
        }
        yield chunk;
      }
    }
    const key = `${this.temporaryPrefix(caller, state.id)}${start}`;
    try {
      const source = Readable.from(body(), { objectMode: false });
      await this.deps.store.put(key, source, { contentType: 'application/octet-stream' });
    } catch (err) {
      if (isAppError(err) && err.status === 415) await this.forget(state);
      throw err;
    }
    if (input.checksum && hash!.digest('base64') !== input.checksum.digest) {
      await this.deps.store.remove(key);
      throw Errors.checksumMismatch(state.offset);
    }
    if (received > 0) {
      state.chunks.push({ key, size: received });
      state.offset += received;
      state.head = head.toString('base64');
    } else {
      await this.deps.store.remove(key);
    }
  }

  /** The record from the upload's temporary objects; the objects go either way. */
  private async complete(
    caller: Caller,
    state: ResumableState,
    options: { removeOnFailure: boolean },
  ): Promise<MediaRecord> {
    const store = this.deps.store;
    const chunks = state.chunks;
    async function* bytes(): AsyncGenerator<Buffer> {
      for (const chunk of chunks) {
        for await (const data of await store.get(chunk.key)) yield data as Buffer;
      }
    }
    let record: MediaRecord;
    try {
      const { records } = await this.deps.uploads.uploadStream(caller, {
        stream: Readable.from(bytes(), { objectMode: false }),
        filename: state.metadata.filename,
        folder: { folder: state.metadata.folder, folderId: state.metadata.folderId },
      });
      record = records[0]!;
    } catch (err) {
      if (options.removeOnFailure) await this.forget(state);
      throw err;
    }
    state.mediaKey = record.key;
    await this.removeChunks(state);
    state.chunks = [];
    await this.save(state);
    const redis = this.redis;
    await redis.zrem(this.orgKey(state.organizationId), state.id);
    await redis.zrem(this.expiriesKey, state.id);
    return record;
  }

  private temporaryPrefix(caller: Caller, id: string): string {
    return `${caller.organization.slug}/.tmp/tus/${id}/`;
  }

  private async save(state: ResumableState): Promise<void> {
    // A finished upload answers HEAD (with Media-Key) until its expiry; an unfinished one a while after.
    const ttl = Math.max(1000, state.expiresAt - Date.now() + (state.mediaKey ? 0 : TOMBSTONE_MS));
    await this.redis.set(this.stateKey(state.id), JSON.stringify(state), 'PX', ttl);
  }

  private async removeChunks(state: ResumableState): Promise<void> {
    if (state.chunks.length === 0) return;
    await this.deps.store.removeMany(state.chunks.map((c) => c.key));
  }

  /** Removes an upload: its objects, its state, its places in the indexes. */
  private async forget(state: ResumableState): Promise<void> {
    await this.removeChunks(state);
    const redis = this.redis;
    await redis.del(this.stateKey(state.id));
    await redis.zrem(this.orgKey(state.organizationId), state.id);
    await redis.zrem(this.expiriesKey, state.id);
  }

  /**
   * Runs `work` holding the upload's lock. A lock held elsewhere is asked to
   * let go (the release request) and waited for up to LOCK_WAIT_MS, then 423.
   * `work` is given a signal that fires when another writer asks for the lock.
   */
  private async locked<T>(id: string, work: (released: AbortSignal) => Promise<T>): Promise<T> {
    const redis = this.redis;
    const token = randomUUID();
    const lockKey = this.lockKey(id);
    const releaseKey = this.releaseKey(id);
    const deadline = Date.now() + LOCK_WAIT_MS;
    let waited = false;
    while ((await redis.set(lockKey, token, 'PX', LOCK_TTL_MS, 'NX')) !== 'OK') {
      if (!waited) {
        waited = true;
        await redis.set(releaseKey, token, 'PX', LOCK_WAIT_MS);
      }
      if (Date.now() >= deadline) {
        this.deps.metrics?.resumableLockWait('refused');
        throw Errors.uploadLocked();
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    if (waited) this.deps.metrics?.resumableLockWait('acquired');
    await redis.del(releaseKey);
    const released = new AbortController();
    const renew = setInterval(() => {
      void (async () => {
        await redis.eval(RENEW_LOCK, 1, lockKey, token, String(LOCK_TTL_MS));
        if ((await redis.exists(releaseKey)) === 1) released.abort();
      })().catch((err: unknown) =>
        this.deps.logger.warn({ err, upload: id }, 'could not renew a resumable upload lock'),
      );
    }, LOCK_RENEW_MS);
    try {
      return await work(released.signal);
    } finally {
      clearInterval(renew);
      await redis
        .eval(RELEASE_LOCK, 1, lockKey, token)
        .catch((err: unknown) =>
          this.deps.logger.warn({ err, upload: id }, 'could not release a resumable upload lock'),
        );
    }
  }
}
