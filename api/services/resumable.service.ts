/**
 * Resumable uploads (tus 1.0, docs/resumable-uploads.md): the protocol's
 * state and bytes, kept where every API replica finds them, so that any
 * replica serves any request of an upload (no sticky sessions).
 *
 * - State: one JSON value per upload in Redis (shared/resumable-uploads.ts),
 *   with two sorted sets by expiry: the organization's uploads in progress
 *   (the `RESUMABLE_MAX_INCOMPLETE` cap) and every upload (the cleanup).
 * - Bytes: one multipart upload in the store per tus upload, made with its
 *   first whole part, to the file's final key. A PATCH's bytes are cut into
 *   parts of the upload's part size (`S3_PART_SIZE`, larger when the length,
 *   or MAX_FILE_SIZE for a deferred one, needs more than RESUMABLE_MAX_PARTS);
 *   the bytes past the last whole part are kept as one temporary object, the
 *   tail, put in front of the next PATCH's bytes. A PATCH cut by the network
 *   keeps what arrived (without a checksum), one whose checksum fails keeps
 *   nothing (its parts are sent again under the same numbers).
 * - Completion: the store joins the parts (CompleteMultipartUpload: no byte
 *   is copied), then the record is written through the same path as every
 *   upload (UploadService.recordStored, shared/media-creation.ts). The
 *   SHA-256 is computed as the bytes arrive, kept in the memory of the API
 *   process that took the PATCHes; when another process took one, the joined
 *   file is read back once for it. A file smaller than one part goes through
 *   `UploadService.uploadStream` as a `POST /media/upload` would.
 * - A lock per upload in Redis (SET NX with a TTL renewed while a PATCH
 *   streams): a second writer asks the holder to let go (the release request:
 *   the holder ends its PATCH at the bytes it has, keeps them and answers),
 *   waits a bounded time, else gets 423.
 */
import { createHash, randomUUID, type Hash } from 'node:crypto';
import { once } from 'node:events';
import { PassThrough, Readable } from 'node:stream';
import { LRUCache } from 'lru-cache';
import type { Config } from '@shared/config';
import { Errors, isAppError } from '@shared/errors';
import type { Logger } from '@shared/logger';
import { DETECTION_BYTES, detectType } from '@shared/media/media-types';
import type { MediaRecord, MediaRepository } from '@shared/repositories/media.repository';
import type { UsageRepository } from '@shared/repositories/usage.repository';
import { releaseLock, type RedisConnection } from '@shared/queue/redis';
import {
  removeResumableBytes,
  resumableKeys,
  resumablePrefix,
  type ResumableState,
  type StoredPart,
  type UploadMetadata,
} from '@shared/resumable-uploads';
import { streamed } from '@shared/gc-pacer';
import { BufferPool } from '@shared/storage/buffer-pool';
import { firstBytes, type ObjectStore } from '@shared/storage/object-store';
import type { Caller } from '../domain/caller';
import type { FoldersService } from './folders.service';
import type { IngestService } from './ingest.service';
import type { UploadService } from './upload.service';

export type { ResumableState, UploadMetadata } from '@shared/resumable-uploads';

/** Checksum algorithms of the `checksum` extension (sha1 is the one the spec requires). */
export const CHECKSUM_ALGORITHMS = ['sha1', 'sha256'] as const;
export type ChecksumAlgorithm = (typeof CHECKSUM_ALGORITHMS)[number];

/** Longest decoded `Upload-Metadata` value, and the whole header. */
export const MAX_METADATA_VALUE = 1024;
export const MAX_METADATA_HEADER = 8 * 1024;

/** S3's smallest part (but the last), and its largest. */
const MIN_PART = 5 * 1024 * 1024;
const MAX_PART = 5 * 1024 * 1024 * 1024;

export interface PatchInput {
  offset: number;
  body: Readable;
  /** `Upload-Length`, for a deferred length. */
  length?: number | undefined;
  checksum?: { algorithm: ChecksumAlgorithm; digest: string } | undefined;
  /** The body's `Content-Length`, when it was sent: a part the body will fill is streamed. */
  contentLength?: number | undefined;
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
}

/** How often a held lock is renewed (and a release request looked for), how long a writer waits for one. */
const LOCK_RENEW_MS = 1_000;
const LOCK_WAIT_MS = 4_000;
/** Parts of one PATCH being stored while the next fills. */
const PARTS_IN_FLIGHT = 2;

const RENEW_LOCK = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end`;
/** The state written only while the writer's lock is still its own (`KEYS[1]` lock, `KEYS[2]` state). */
const SAVE_IF_LOCKED = `if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('set', KEYS[2], ARGV[2], 'PX', ARGV[3]) return 1 else return 0 end`;

export class ResumableService {
  private readonly keys: ReturnType<typeof resumableKeys>;
  /** This process, as `hashedBy` names it. */
  private readonly processId = randomUUID();
  /** The SHA-256 of the bytes so far of the uploads this process took the PATCHes of. */
  private readonly hashes = new LRUCache<string, { hash: Hash; offset: number }>({ max: 1000 });
  /** The lock token this process holds for an upload, while it holds it (`locked`). */
  private readonly held = new Map<string, string>();
  /** Part buffers by part size, reused across PATCHes. */
  private readonly pools = new Map<number, BufferPool>();

  constructor(
    private readonly deps: {
      redis: () => RedisConnection | undefined;
      store: ObjectStore;
      uploads: Pick<UploadService, 'uploadStream' | 'recordStored'>;
      ingest: Pick<IngestService, 'prepare'>;
      folders: Pick<FoldersService, 'resolve'>;
      media: Pick<MediaRepository, 'findByKey'>;
      usage: Pick<UsageRepository, 'get'>;
      config: Pick<Config, 'queuePrefix'> & {
        limits: Pick<Config['limits'], 'maxFileSize' | 'acceptedTypes' | 'resumable'>;
      };
      /** The store's part size (S3_PART_SIZE): the smallest a resumable upload's parts are. */
      partSize: number;
      metrics?: ResumableMetrics | undefined;
      logger: Logger;
      /** Work off the answer's path (a finished upload's leftovers removed): the API's background tasks. */
      background: (what: string, task: () => Promise<unknown>) => void;
    },
  ) {
    this.keys = resumableKeys(deps.config.queuePrefix);
  }

  private get redis(): RedisConnection {
    const redis = this.deps.redis();
    if (!redis) throw Errors.unavailable('Redis');
    return redis;
  }

  get expiryMs(): number {
    return this.deps.config.limits.resumable.expiryMs;
  }

  /** Uploads not finished and not expired, every organization (the in-progress gauge). */
  async inProgress(): Promise<number> {
    return this.redis.zcount(this.keys.expiries, String(Date.now()), '+inf');
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
    if ((await redis.zcount(this.keys.org(org.id), String(now), '+inf')) >= maxIncomplete) {
      throw Errors.tooManyIncompleteUploads(maxIncomplete);
    }
    const id = randomUUID().replaceAll('-', '');
    const state: ResumableState = {
      id,
      organizationId: org.id,
      prefix: resumablePrefix(org.slug, id),
      length: input.length,
      offset: 0,
      metadata: input.metadata,
      createdAt: now,
      expiresAt: now + this.expiryMs,
      head: '',
      partial: input.partial,
    };
    await this.save(state);
    await redis.zadd(this.keys.org(org.id), state.expiresAt, state.id);
    await redis.zadd(this.keys.expiries, state.expiresAt, state.id);
    return state;
  }

  /**
   * A final upload (`Upload-Concat: final`): the caller's finished partial
   * uploads, in order, become one file and its record at once; the partials
   * are removed. Another organization's partial is 404, like a missing one.
   *
   * When every partial but the last is at least S3's smallest part, the
   * store copies each partial's object into a part of the file's multipart
   * upload (UploadPartCopy: no byte crosses the API to be written), while the
   * API reads them once for the SHA-256; otherwise the partials are read and
   * streamed to the file's key as a `POST /media/upload` would be.
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
    const id = randomUUID().replaceAll('-', '');
    const state: ResumableState = {
      id,
      organizationId: caller.organization.id,
      prefix: resumablePrefix(caller.organization.slug, id),
      length,
      offset: length,
      metadata,
      createdAt: now,
      expiresAt: now + this.expiryMs,
      head: '',
      partial: false,
      final: partialIds,
    };
    const objects = partials.filter((p) => p.offset > 0).map((p) => p.object!);
    const store = this.deps.store;
    async function* bytes(): AsyncGenerator<Buffer> {
      for (const key of objects) {
        for await (const data of await store.get(key)) yield data as Buffer;
      }
    }
    const sizes = partials.filter((p) => p.offset > 0).map((p) => p.offset);
    const copyable =
      sizes.length > 0 &&
      sizes.every((size, i) => size <= MAX_PART && (i === sizes.length - 1 || size >= MIN_PART));
    let record: MediaRecord;
    if (copyable) {
      const org = caller.organization;
      const spec = { folder: metadata.folder, folderId: metadata.folderId };
      const folder = await this.deps.folders.resolve(org, spec);
      const file = await this.deps.ingest.prepare(
        org,
        await firstBytes(store, objects, DETECTION_BYTES),
        metadata.filename,
        folder,
      );
      const uploadId = await store.multipart.create(file.key, file.type.mime);
      let checksum: string;
      try {
        const [, hex] = await Promise.all([
          (async () => {
            const parts = await Promise.all(
              objects.map(async (key, i) => ({
                part: i + 1,
                etag: await store.multipart.copyPart(file.key, uploadId, i + 1, key),
              })),
            );
            await store.multipart.complete(file.key, uploadId, parts);
          })(),
          sha256Of(Readable.from(bytes(), { objectMode: false })),
        ]);
        checksum = hex;
      } catch (err) {
        await store.multipart.abort(file.key, uploadId).catch(() => undefined);
        throw err;
      }
      const { records } = await this.deps.uploads.recordStored(caller, {
        object: { ...file, bytes: length, checksum: `sha256:${checksum}` },
        keyFolderId: folder?.id ?? null,
        folder: spec,
      });
      record = records[0]!;
    } else {
      const { records } = await this.deps.uploads.uploadStream(caller, {
        stream: Readable.from(bytes(), { objectMode: false }),
        filename: metadata.filename,
        folder: { folder: metadata.folder, folderId: metadata.folderId },
      });
      record = records[0]!;
    }
    state.mediaKey = record.key;
    await this.save(state);
    // The partials' bytes are the record's now: their objects and states go, after the answer
    // (4 partials took 270-330 ms on Swift); a crash before leaves them to the expiry's cleanup.
    this.deps.background('remove concatenated partials', () =>
      Promise.all(partials.map((partial) => this.forget(partial))),
    );
    return { state, record };
  }

  /** The caller's upload: 404 when missing or another organization's, 410 once expired. */
  async find(caller: Caller, id: string): Promise<ResumableState> {
    const raw = /^[0-9a-f]{32}$/.test(id) ? await this.redis.get(this.keys.state(id)) : null;
    if (raw === null) throw Errors.uploadNotFound();
    const state = JSON.parse(raw) as ResumableState;
    if (state.organizationId !== caller.organization.id) throw Errors.uploadNotFound();
    if (state.expired || (state.mediaKey === undefined && state.expiresAt <= Date.now())) {
      throw Errors.uploadExpired();
    }
    return state;
  }

  /**
   * The upload as a HEAD answers it. One whose every byte is stored but
   * whose record a crashed process did not write is finished first (its
   * offset says it is complete: a client would not send a PATCH more).
   */
  async status(caller: Caller, id: string): Promise<ResumableState> {
    const state = await this.find(caller, id);
    if (!state.completing || state.mediaKey !== undefined) return state;
    return this.locked(id, async () => {
      const now = await this.find(caller, id);
      if (now.completing && now.mediaKey === undefined) await this.finish(caller, now);
      return now;
    });
  }

  /**
   * Appends a PATCH's bytes (`core`, `checksum`, deferred length), under the
   * upload's lock. The last byte in makes the record.
   */
  async patch(caller: Caller, id: string, input: PatchInput): Promise<PatchResult> {
    return this.locked(id, async (released) => {
      const state = await this.find(caller, id);
      if (state.final) throw Errors.uploadFinal();
      if (state.completing && state.mediaKey === undefined) {
        // Every byte is stored (a crash cut the completion short): finished now.
        input.body.resume();
        return { state, record: await this.finish(caller, state) };
      }
      if (input.offset !== state.offset) throw Errors.offsetMismatch(state.offset);
      if (state.mediaKey || (state.partial && state.object)) {
        throw Errors.offsetMismatch(state.offset);
      }
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
      const record = await this.append(caller, state, input, released);
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
      else await this.redis.del(this.keys.state(id));
    });
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

  /**
   * The part size of an upload whose length is `length` (null: deferred, up
   * to MAX_FILE_SIZE): the store's, or more when that would need more than
   * RESUMABLE_MAX_PARTS parts.
   */
  private partSizeFor(length: number | null): number {
    const { maxParts } = this.deps.config.limits.resumable;
    const bound = length ?? this.deps.config.limits.maxFileSize;
    return Math.max(this.deps.partSize, MIN_PART, Math.ceil(bound / maxParts));
  }

  private pool(size: number): BufferPool {
    let pool = this.pools.get(size);
    if (!pool) {
      pool = new BufferPool(size, PARTS_IN_FLIGHT + 2);
      this.pools.set(size, pool);
    }
    return pool;
  }

  /**
   * Streams a PATCH body into the upload's parts: the tail first, then the
   * body, each whole part sent to the store (up to PARTS_IN_FLIGHT at once)
   * while the next fills. A part the body will fill (its `Content-Length`
   * says so) goes to the store while it fills, where the store can take it
   * so (`streamPart`); its bytes are kept too, and become the tail if the
   * body stops short. At the end, what does not fill a part becomes the
   * new tail, or, when the upload is complete, its last part (or the whole
   * of a small file). `state` is updated, and saved, once everything is
   * stored; the record is answered when this PATCH completed the upload.
   */
  private async append(
    caller: Caller,
    state: ResumableState,
    input: PatchInput,
    released: AbortSignal,
  ): Promise<MediaRecord | undefined> {
    const { maxFileSize, acceptedTypes } = this.deps.config.limits;
    const store = this.deps.store;
    const quota = caller.organization.quotaBytes;
    const remaining =
      quota === null ? Infinity : quota - (await this.deps.usage.get(caller.organization.id)).bytes;
    const checksum = input.checksum ? createHash(input.checksum.algorithm) : undefined;
    // The file's SHA-256 so far: this process's (a copy: a PATCH that fails leaves it as it was).
    const cached = this.hashes.get(state.id);
    const hash =
      state.offset === 0
        ? createHash('sha256')
        : cached && state.hashedBy === this.processId && cached.offset === state.offset
          ? cached.hash.copy()
          : undefined;
    const partSize = state.multipart?.partSize ?? this.partSizeFor(state.length);
    const pool = this.pool(partSize);
    let head = Buffer.from(state.head, 'base64');
    const checkType = !state.partial && head.length < DETECTION_BYTES;
    const name = state.metadata.filename;
    const start = state.offset;
    let received = 0;

    let multipart = state.multipart;
    const newParts: StoredPart[] = [];
    let nextPart = (multipart?.parts.length ?? 0) + 1;
    const inFlight = new Set<Promise<void>>();
    let failure: Error | undefined;
    const held = new Set<Buffer>();
    const acquire = () => {
      const buffer = pool.acquire();
      held.add(buffer);
      return buffer;
    };
    const giveBack = (buffer: Buffer) => {
      if (held.delete(buffer)) pool.release(buffer);
    };
    let current = acquire();
    let filled = 0;
    const failed = (err: unknown) =>
      void (failure ??= err instanceof Error ? err : new Error(String(err)));
    /** The multipart upload, started (and saved) with the first part that goes to the store. */
    const ensureMultipart = async () => {
      while (inFlight.size >= PARTS_IN_FLIGHT) await Promise.race(inFlight);
      if (failure) throw failure;
      if (!multipart) {
        multipart = await this.startMultipart(caller, state, partSize, head);
        // Saved at once: a PATCH that fails from here leaves an upload the cleanup can find.
        await this.save({ ...state, multipart });
      }
      return multipart;
    };
    /** A part's PUT tracked until it settles; its buffer goes back to the pool then. */
    const track = (sent: Promise<unknown>, buffer: Buffer) => {
      const tracked: Promise<void> = sent
        .then(() => undefined, failed)
        .finally(() => {
          giveBack(buffer);
          inFlight.delete(tracked);
        });
      inFlight.add(tracked);
      current = acquire();
      filled = 0;
    };
    /** Sends the full buffer as the next part (made when the first whole part is there). */
    const flush = async () => {
      const { key, uploadId } = await ensureMultipart();
      const part = nextPart++;
      const buffer = current;
      track(
        store.multipart
          .putPart(key, uploadId, part, buffer)
          .then((etag) => void newParts.push({ part, etag, size: buffer.length })),
        buffer,
      );
    };

    // A part streamed while it fills: what the body has of it is written as it comes.
    const streamPart = store.multipart.streamPart?.bind(store.multipart);
    // Where this PATCH's bytes will end (past the upload's length, the PATCH is refused there).
    const bodyEnd =
      input.contentLength === undefined
        ? undefined
        : Math.min(start + input.contentLength, state.length ?? Infinity);
    let streaming:
      { body: PassThrough; sent: Promise<void>; part: number; size: number } | undefined;
    /** Where in the file the part filling now starts (the tail's bytes come before `start`). */
    let partStart = start;
    /** The size of the part filling now, when it can be streamed: this PATCH brings all of it. */
    const streamable = (): number | undefined => {
      if (!streamPart || bodyEnd === undefined || head.length < DETECTION_BYTES) return undefined;
      if (partStart + partSize <= bodyEnd) return partSize;
      // The upload's last part, shorter, after stored ones (a smaller file is not multipart).
      const last = state.length !== null && bodyEnd === state.length && multipart !== undefined;
      return last && bodyEnd > partStart ? bodyEnd - partStart : undefined;
    };
    const write = async (data: Buffer) => {
      const { body, sent } = streaming!;
      if (!body.write(data)) await Promise.race([once(body, 'drain'), sent]);
    };
    const openStream = async (size: number) => {
      const { key, uploadId } = await ensureMultipart();
      const part = nextPart++;
      const body = new PassThrough();
      // Its failure is the part's (`sent`), whenever it comes.
      body.on('error', () => undefined);
      const bytes = current.subarray(0, size);
      const sent = streamPart!(key, uploadId, part, size, body, bytes).then(
        (etag) => void newParts.push({ part, etag, size }),
      );
      sent.catch(() => undefined);
      streaming = { body, sent, part, size };
      if (filled > 0) await write(current.subarray(0, filled));
    };
    const endStream = () => {
      const { body, sent } = streaming!;
      streaming = undefined;
      body.end();
      track(sent, current);
    };
    /** The body stopped short of the streamed part: nothing of it is stored, its bytes stay here. */
    const stopStream = async () => {
      if (!streaming) return;
      const { body, sent, part } = streaming;
      streaming = undefined;
      body.destroy(new Error('the PATCH ended before its part was whole'));
      await sent.catch(() => undefined);
      nextPart = part;
    };

    try {
      if (state.tail) {
        for await (const data of await store.get(state.tail.key)) {
          filled += (data as Buffer).copy(current, filled);
        }
        partStart = start - filled;
      }
      const iterator = input.body[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
      for (;;) {
        if (released.aborted) break; // another writer asked for the lock: keep what came
        let next: IteratorResult<Buffer>;
        try {
          next = await iterator.next();
        } catch (err) {
          // The client went away: without a checksum the bytes that came are kept.
          if (!checksum) break;
          throw err;
        }
        if (next.done) break;
        let chunk = next.value;
        received += chunk.length;
        streamed(chunk.length);
        const total = start + received;
        if (state.length !== null && total > state.length) {
          throw Errors.payloadTooLarge(`The upload's length is ${state.length} bytes`);
        }
        if (total > maxFileSize) throw Errors.fileTooLarge(maxFileSize, name);
        if (total > remaining) throw Errors.quotaExceeded(quota ?? 0);
        hash?.update(chunk);
        checksum?.update(chunk);
        this.deps.metrics?.resumableBytesReceived(chunk.length);
        if (head.length < DETECTION_BYTES) {
          head = Buffer.concat([head, chunk.subarray(0, DETECTION_BYTES - head.length)]);
          if (checkType && head.length >= DETECTION_BYTES) {
            const type = await detectType(head);
            if (!type || !acceptedTypes.includes(type.mime)) {
              throw Errors.unsupportedType(
                `${name ? `"${name}"` : 'The file'} is not an accepted type (${acceptedTypes.join(', ')}); types are detected from the file's content`,
              );
            }
          }
        }
        while (chunk.length > 0) {
          if (!streaming) {
            const size = streamable();
            if (size !== undefined) await openStream(size);
          }
          const n = chunk.copy(current, filled, 0, (streaming?.size ?? partSize) - filled);
          if (streaming) await write(current.subarray(filled, filled + n));
          filled += n;
          chunk = chunk.subarray(n);
          if (streaming && filled === streaming.size) {
            partStart += streaming.size;
            endStream();
          } else if (filled === partSize) {
            await flush();
            partStart += partSize;
          }
        }
      }
      await stopStream();
      await Promise.all(inFlight);
      if (failure) throw failure;
    } catch (err) {
      await stopStream();
      await Promise.allSettled(inFlight);
      for (const buffer of [...held]) giveBack(buffer);
      if (isAppError(err) && err.status === 415) await this.forget(state);
      throw err;
    }

    try {
      if (input.checksum && checksum!.digest('base64') !== input.checksum.digest) {
        // Nothing kept: the parts sent are sent again, under the same numbers, by the next PATCH.
        throw Errors.checksumMismatch(state.offset);
      }
      const offset = start + received;
      const oldTail = state.tail;
      const rest = current.subarray(0, filled);
      newParts.sort((a, b) => a.part - b.part);
      state.offset = offset;
      state.head = head.toString('base64');
      if (multipart) state.multipart = { ...multipart, parts: [...multipart.parts, ...newParts] };
      state.tail = undefined;
      const complete = state.length !== null && offset === state.length;

      if (complete && !state.multipart) {
        // Smaller than one part: stored and recorded as a POST /media/upload would be.
        if (state.partial) {
          const key = `${state.prefix}data`;
          await store.put(key, Buffer.from(rest), { contentType: 'application/octet-stream' });
          state.object = key;
          await this.save(state);
          if (oldTail) await store.remove(oldTail.key);
          return undefined;
        }
        return await this.completeSmall(caller, state, Buffer.from(rest));
      }
      if (complete) {
        const mp = state.multipart!;
        if (rest.length > 0) {
          const etag = await store.multipart.putPart(mp.key, mp.uploadId, nextPart, rest);
          mp.parts.push({ part: nextPart, etag, size: rest.length });
        }
        if (state.partial) {
          // A partial upload's object, for its final concatenation to copy.
          await store.multipart.complete(
            mp.key,
            mp.uploadId,
            mp.parts.map(({ part, etag }) => ({ part, etag })),
          );
          state.object = mp.key;
          state.multipart = undefined;
          await this.save(state);
          if (oldTail) await store.remove(oldTail.key);
          return undefined;
        }
        state.completing = { checksum: hash ? hash.digest('hex') : null };
        await this.save(state);
        if (oldTail) await store.remove(oldTail.key);
        return await this.finish(caller, state);
      }
      if (rest.length > 0) {
        // Named by the offset it ends at: a new object each time, the state names the one that counts.
        state.tail = { key: `${state.prefix}tail-${offset}`, size: rest.length };
        await store.put(state.tail.key, Buffer.from(rest), {
          contentType: 'application/octet-stream',
        });
      }
      state.hashedBy = hash ? this.processId : null;
      await this.save(state);
      if (hash) this.hashes.set(state.id, { hash, offset });
      else this.hashes.delete(state.id);
      if (oldTail && oldTail.key !== state.tail?.key) await store.remove(oldTail.key);
      return undefined;
    } finally {
      for (const buffer of [...held]) giveBack(buffer);
    }
  }

  /** The store's multipart upload of an upload: to the file's final key (its type checked), or a partial's own object. */
  private async startMultipart(
    caller: Caller,
    state: ResumableState,
    partSize: number,
    first: Buffer,
  ): Promise<NonNullable<ResumableState['multipart']>> {
    const store = this.deps.store;
    if (state.partial) {
      const key = `${state.prefix}data`;
      const uploadId = await store.multipart.create(key, 'application/octet-stream');
      return { key, uploadId, partSize, parts: [] };
    }
    const org = caller.organization;
    const folder = await this.deps.folders.resolve(org, {
      folder: state.metadata.folder,
      folderId: state.metadata.folderId,
    });
    const file = await this.deps.ingest.prepare(org, first, state.metadata.filename, folder);
    const uploadId = await store.multipart.create(file.key, file.type.mime);
    return {
      key: file.key,
      uploadId,
      partSize,
      parts: [],
      type: file.type,
      name: file.name,
      folderId: folder?.id ?? null,
    };
  }

  /** A file smaller than one part: through the upload path, then the upload is done. */
  private async completeSmall(
    caller: Caller,
    state: ResumableState,
    data: Buffer,
  ): Promise<MediaRecord> {
    let record: MediaRecord;
    try {
      const { records } = await this.deps.uploads.uploadStream(caller, {
        stream: Readable.from([data]),
        filename: state.metadata.filename,
        folder: { folder: state.metadata.folder, folderId: state.metadata.folderId },
      });
      record = records[0]!;
    } catch (err) {
      await this.forget(state);
      throw err;
    }
    return this.done(state, record);
  }

  /**
   * Joins the parts of an upload whose every byte is stored (unless a crash
   * left them joined already) and writes the record (unless it was written:
   * then the upload is only marked done).
   */
  private async finish(caller: Caller, state: ResumableState): Promise<MediaRecord> {
    const store = this.deps.store;
    const mp = state.multipart!;
    const org = caller.organization;
    const written = await this.deps.media.findByKey(org.id, mp.key);
    if (written) return this.done(state, written);
    let record: MediaRecord;
    try {
      await store.multipart
        .complete(
          mp.key,
          mp.uploadId,
          mp.parts.map(({ part, etag }) => ({ part, etag })),
        )
        .catch(async (err: unknown) => {
          // A crash after the parts were joined left the object (the key is this upload's alone).
          if (!(await store.stat(mp.key))) throw err;
        });
      const hex = state.completing?.checksum ?? (await sha256Of(await store.get(mp.key)));
      const { records } = await this.deps.uploads.recordStored(caller, {
        object: {
          key: mp.key,
          type: mp.type!,
          name: mp.name!,
          bytes: state.length!,
          checksum: `sha256:${hex}`,
        },
        keyFolderId: mp.folderId ?? null,
        folder: { folder: state.metadata.folder, folderId: state.metadata.folderId },
      });
      record = records[0]!;
    } catch (err) {
      // Refused (quota, duplicate, folder gone): the record's path removed the object.
      if (isAppError(err) && err.status < 500) await this.forget(state);
      throw err;
    }
    return this.done(state, record);
  }

  /** The upload has its record: its state says so (HEAD answers Media-Key), its leftovers go. */
  private async done(state: ResumableState, record: MediaRecord): Promise<MediaRecord> {
    const { prefix } = state;
    state.mediaKey = record.key;
    state.completing = undefined;
    state.multipart = undefined;
    state.tail = undefined;
    await this.save(state, { fenced: false });
    await this.redis
      .multi()
      .zrem(this.keys.org(state.organizationId), state.id)
      .zrem(this.keys.expiries, state.id)
      .exec();
    this.hashes.delete(state.id);
    // What may be left under its prefix (its tail; one a lapsed writer stored): after the answer.
    this.deps.background('remove a finished upload’s leftovers', () =>
      removeResumableBytes(this.deps.store, { prefix, multipart: undefined }),
    );
    return record;
  }

  /**
   * Writes the upload's state. Under its lock (`locked`), only while the lock
   * is still this writer's: a writer that stalled past RESUMABLE_LOCK_TTL_MS,
   * whose lock another request then took, gets 423 instead of writing over
   * the newer state (its bytes past the saved offset are sent again).
   * `fenced: false` for the state that says the record exists, which must be
   * written whoever holds the lock.
   */
  private async save(state: ResumableState, { fenced = true } = {}): Promise<void> {
    // A finished upload answers HEAD (with Media-Key) until its expiry; an unfinished one a while after.
    const ttl = Math.max(
      1000,
      state.expiresAt - Date.now() + (state.mediaKey ? 0 : 24 * 60 * 60 * 1000),
    );
    const token = fenced ? this.held.get(state.id) : undefined;
    if (token === undefined) {
      await this.redis.set(this.keys.state(state.id), JSON.stringify(state), 'PX', ttl);
      return;
    }
    const saved = await this.redis.eval(
      SAVE_IF_LOCKED,
      2,
      this.keys.lock(state.id),
      this.keys.state(state.id),
      token,
      JSON.stringify(state),
      String(ttl),
    );
    if (saved !== 1) throw Errors.uploadLocked();
  }

  /** Removes an upload: its multipart upload, its objects, its state, its places in the indexes. */
  private async forget(state: ResumableState): Promise<void> {
    await removeResumableBytes(this.deps.store, state);
    this.hashes.delete(state.id);
    const redis = this.redis;
    await redis.del(this.keys.state(state.id));
    await redis.zrem(this.keys.org(state.organizationId), state.id);
    await redis.zrem(this.keys.expiries, state.id);
  }

  /**
   * Runs `work` holding the upload's lock. A lock held elsewhere is asked to
   * let go (the release request) and waited for up to LOCK_WAIT_MS, then 423.
   * `work` is given a signal that fires when another writer asks for the lock.
   */
  private async locked<T>(id: string, work: (released: AbortSignal) => Promise<T>): Promise<T> {
    const redis = this.redis;
    const token = randomUUID();
    const lockKey = this.keys.lock(id);
    const releaseKey = this.keys.release(id);
    const ttl = this.deps.config.limits.resumable.lockTtlMs;
    const deadline = Date.now() + LOCK_WAIT_MS;
    let waited = false;
    while ((await redis.set(lockKey, token, 'PX', ttl, 'NX')) !== 'OK') {
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
    this.held.set(id, token);
    const released = new AbortController();
    const renew = setInterval(() => {
      void (async () => {
        // Not renewed: the lock lapsed and another writer may have it; stop taking bytes.
        const renewed = await redis.eval(RENEW_LOCK, 1, lockKey, token, String(ttl));
        if (renewed !== 1 || (await redis.exists(releaseKey)) === 1) released.abort();
      })().catch((err: unknown) =>
        this.deps.logger.warn({ err, upload: id }, 'could not renew a resumable upload lock'),
      );
    }, LOCK_RENEW_MS);
    try {
      return await work(released.signal);
    } finally {
      clearInterval(renew);
      if (this.held.get(id) === token) this.held.delete(id);
      await releaseLock(redis, lockKey, token).catch((err: unknown) =>
        this.deps.logger.warn({ err, upload: id }, 'could not release a resumable upload lock'),
      );
    }
  }
}

/** The SHA-256 (hex) of a stream's bytes. */
async function sha256Of(stream: Readable): Promise<string> {
  const hash = createHash('sha256');
  for await (const data of stream) hash.update(data as Buffer);
  return hash.digest('hex');
}
