/**
 * Direct-to-storage uploads' state (docs/direct-uploads.md), kept in Redis
 * where every API replica and the worker find it: one JSON value per upload
 * (`<prefix>:direct:{<id>}`) and two sorted sets by expiry, the
 * organization's uploads not completed (DIRECT_UPLOAD_MAX_INCOMPLETE) and
 * every upload not completed (the cleanup). The API writes it
 * (api/services/direct-upload.service.ts); the scheduled cleanup
 * (`upload.expire-direct` on the maintenance queue,
 * worker/processors/expire-direct-uploads.processor.ts) removes what an
 * upload never completed left: its object in quarantine, its multipart
 * upload, its quota booking (which also expires on its own at the upload's
 * expiry: usage.repository.ts).
 *
 * The quarantine: every upload's bytes go to `<org>/.tmp/direct/<id>`
 * (the presigned requests name that key and no other), never to a key a
 * record could have; `reconcile` leaves that prefix alone until the expiry.
 */
import type { ChainableCommander } from 'ioredis';
import { Errors } from '../errors';
import type { Logger } from '../logger';
import { releaseLock, waitForRedis, type RedisConnection } from '../queue/redis';
import type { Booking, UsageRepository } from '../repositories/usage.repository';
import type { ObjectStore } from '../storage/object-store';

/** Where an organization's direct uploads' bytes wait for their completion. */
export const DIRECT_SEGMENT = '/.tmp/direct/';

export function quarantineKey(orgSlug: string, id: string): string {
  return `${orgSlug}${DIRECT_SEGMENT}${id}`;
}

/** How long a completed upload's state answers a repeated completion (its record again). */
const COMPLETED_KEPT_MS = 24 * 60 * 60 * 1000;
/** How long a completion holds its upload (a copy of a large object may take a while). */
const COMPLETION_LOCK_MS = 15 * 60 * 1000;

export type DirectUploadMethod = 'post' | 'put' | 'multipart';

export interface DirectUploadState {
  id: string;
  organizationId: number;
  /** The quarantine key the bytes go to. */
  key: string;
  /** The file's display name (safe), and the declared size and type. */
  name: string;
  bytes: number;
  contentType: string;
  /** The SHA-256 (hex) the client declared, checked at completion. */
  sha256?: string | undefined;
  folder?: string | undefined;
  folderId?: string | undefined;
  method: DirectUploadMethod;
  /** The multipart upload's id and part size (`multipart`). */
  uploadId?: string | undefined;
  partSize?: number | undefined;
  /** The record's id, taken at the request, and the quota booking made under it. */
  mediaId: number;
  bookingUntil: number;
  createdAt: number;
  expiresAt: number;
  /** Set once the record is written. */
  completed?: { mediaId: number } | undefined;
  /**
   * Set when the client cancelled it (`DELETE`): its bytes, multipart upload
   * and booking are gone, and the state stays until the expiry, so that the
   * cleanup then removes an object a presigned request still put.
   */
  cancelled?: true | undefined;
}

/** The booking a state holds, as usage.repository.ts knows it. */
export function bookingOf(state: DirectUploadState): Booking {
  return {
    organizationId: state.organizationId,
    id: state.mediaId,
    usage: { bytes: state.bytes, files: 1 },
    until: new Date(state.bookingUntil),
  };
}

export class DirectUploads {
  private readonly prefix: string;

  constructor(
    private readonly deps: {
      redis: () => RedisConnection | undefined;
      store: Pick<ObjectStore, 'remove' | 'abortIncompleteUpload'>;
      usage: Pick<UsageRepository, 'cancel'>;
      queuePrefix: string;
      logger: Logger;
      /** Counts what the expiry cleanup removed (the worker's metrics). */
      metrics?: { directExpiredCleaned(count: number): void };
    },
  ) {
    this.prefix = `${deps.queuePrefix}:direct`;
  }

  private get redis(): RedisConnection {
    const redis = this.deps.redis();
    if (!redis) throw Errors.unavailable('Redis');
    return redis;
  }

  private stateKey = (id: string) => `${this.prefix}:{${id}}`;
  private lockKey = (id: string) => `${this.prefix}:{${id}}:lock`;
  private orgKey = (orgId: number) => `${this.prefix}:org:${orgId}`;
  private get expiriesKey() {
    return `${this.prefix}:expiries`;
  }

  /**
   * Resolves once the connection is ready: a worker makes its fail-fast
   * connection on first use, and a command sent before it is ready fails at
   * once instead of waiting ("Stream isn't writeable"). The API does not
   * call it: its connection is ready from its start, and its requests fail
   * fast on an outage.
   */
  async ready(): Promise<void> {
    await waitForRedis(this.redis);
  }

  /** The organization's uploads requested and neither completed nor expired. */
  incomplete(organizationId: number, now = Date.now()): Promise<number> {
    return this.redis.zcount(this.orgKey(organizationId), String(now), '+inf');
  }

  /** Records a new upload (and its place in both sets), in one round trip. */
  async add(state: DirectUploadState): Promise<void> {
    await exec(
      this.redis
        .multi()
        .set(this.stateKey(state.id), JSON.stringify(state), 'PX', this.ttlOf(state))
        .zadd(this.orgKey(state.organizationId), state.expiresAt, state.id)
        .zadd(this.expiriesKey, state.expiresAt, state.id),
    );
  }

  async get(id: string): Promise<DirectUploadState | null> {
    if (!/^[0-9a-f]{32}$/.test(id)) return null;
    const raw = await this.redis.get(this.stateKey(id));
    return raw === null ? null : (JSON.parse(raw) as DirectUploadState);
  }

  /** Marks the upload completed (its record written): kept a day for a repeated completion. */
  async completed(state: DirectUploadState, mediaId: number): Promise<void> {
    state.completed = { mediaId };
    await exec(
      this.redis
        .multi()
        .set(this.stateKey(state.id), JSON.stringify(state), 'PX', COMPLETED_KEPT_MS)
        .zrem(this.orgKey(state.organizationId), state.id)
        .zrem(this.expiriesKey, state.id),
    );
  }

  /** Forgets an upload that ended without a record (refused at completion, or expired). */
  async forget(state: DirectUploadState): Promise<void> {
    await exec(
      this.redis
        .multi()
        .del(this.stateKey(state.id))
        .zrem(this.orgKey(state.organizationId), state.id)
        .zrem(this.expiriesKey, state.id),
    );
  }

  /**
   * Cancels an upload that has no record: its bytes, its multipart upload and
   * its booking go now; it no longer counts against the organization's cap.
   * Its state stays (cancelled) until its expiry, when the cleanup removes
   * what a presigned request, still valid until then, may have put.
   */
  async cancel(state: DirectUploadState): Promise<void> {
    await this.release(state);
    state.cancelled = true;
    await this.save(state);
    await this.redis.zrem(this.orgKey(state.organizationId), state.id);
  }

  /** Runs `work` holding the upload's completion lock; null when another completion holds it. */
  async locked<T>(id: string, work: () => Promise<T>): Promise<{ value: T } | null> {
    const redis = this.redis;
    const token = `${process.pid}:${Date.now()}:${Math.random()}`;
    if ((await redis.set(this.lockKey(id), token, 'PX', COMPLETION_LOCK_MS, 'NX')) !== 'OK') {
      return null;
    }
    try {
      return { value: await work() };
    } finally {
      await releaseLock(redis, this.lockKey(id), token);
    }
  }

  /**
   * Removes what uploads never completed left once past their expiry: the
   * object in quarantine, the multipart upload, the booking, the state. An
   * upload whose completion is running is left to it. Answers how many.
   */
  async cleanupExpired(now = Date.now()): Promise<number> {
    await this.ready();
    const redis = this.redis;
    const ids = await redis.zrangebyscore(this.expiriesKey, 0, now, 'LIMIT', 0, 500);
    let cleaned = 0;
    for (const id of ids) {
      if ((await redis.exists(this.lockKey(id))) === 1) continue;
      const state = await this.get(id);
      if (state?.cancelled) {
        // Its multipart upload and booking went at the cancel: only a late object may be left.
        await this.deps.store.remove(state.key);
        await this.forget(state);
      } else if (state && !state.completed) {
        await this.discard(state);
        cleaned += 1;
      } else {
        await redis.zrem(this.expiriesKey, id);
      }
    }
    if (cleaned > 0) this.deps.logger.info({ cleaned }, 'expired direct uploads removed');
    this.deps.metrics?.directExpiredCleaned(cleaned);
    return cleaned;
  }

  /** An upload that will get no record: its bytes, its multipart upload, its booking, its state. */
  async discard(state: DirectUploadState): Promise<void> {
    await this.release(state);
    await this.forget(state);
  }

  /** What an upload without a record holds: its multipart upload, its object, its booking. */
  private async release(state: DirectUploadState): Promise<void> {
    const { store, usage } = this.deps;
    if (state.uploadId) {
      await store.abortIncompleteUpload({
        key: state.key,
        uploadId: state.uploadId,
        initiated: new Date(state.createdAt),
      });
    }
    await store.remove(state.key);
    await usage.cancel([bookingOf(state)]);
  }

  private async save(state: DirectUploadState): Promise<void> {
    await this.redis.set(this.stateKey(state.id), JSON.stringify(state), 'PX', this.ttlOf(state));
  }

  /** Kept a while past the expiry, so that the cleanup (or a late completion: 410) finds it. */
  private ttlOf(state: DirectUploadState): number {
    return Math.max(1000, state.expiresAt - Date.now() + COMPLETED_KEPT_MS);
  }
}

/**
 * Runs a transaction (one round trip; on a Redis Cluster every key shares
 * QUEUE_PREFIX's hash tag, which comes first in them): a command's error
 * rejects, as it would on its own.
 */
async function exec(transaction: ChainableCommander): Promise<void> {
  const results = await transaction.exec();
  if (results === null) throw new Error('Redis discarded the transaction');
  for (const [err] of results) if (err) throw err;
}
