/**
 * A job's output bytes handed from the worker to the API requests waiting
 * for that job, beside the object store: a first render's variant, which the
 * API would otherwise read back from storage right after the worker wrote it
 * there (a storage round trip on the answer's path, and the store's CPU).
 *
 * The worker writes the bytes under a key named after the job, with a short
 * lifetime (HANDOFF_TTL_MS), before the job completes; every API request
 * waiting on that job (identical renders share one job, across API replicas)
 * reads them once the job has completed. It is an optimisation only: the
 * object in storage stays the truth, and whatever is missing here (Redis
 * away, bytes over the size bound, the lifetime run out, a value that does
 * not match) is read from storage as before.
 *
 * Redis memory: at most (renders per second) × HANDOFF_TTL_MS × the size
 * bound (`RENDER_HANDOFF_MAX_BYTES`, 0 turns the handoff off); typical
 * thumbnails are tens of KB. Nothing is kept past the lifetime.
 */
import type { Logger } from '../logger';
import { waitForRedis, type RedisConnection } from './redis';

/** How long handed-over bytes wait for the requests of their job (they read them at once). */
export const HANDOFF_TTL_MS = 10_000;
/** How long an offer waits for a connection not ready yet (a fresh worker's) before storage is the way. */
const OFFER_READY_WAIT_MS = 1_000;

export function handoffKey(queuePrefix: string, jobId: string): string {
  return `${queuePrefix}:handoff:${jobId}`;
}

export class JobHandoff {
  constructor(
    private readonly deps: {
      /** A fail-fast connection: a handoff never waits for Redis to come back. */
      redis: () => RedisConnection;
      queuePrefix: string;
      /** Largest value handed over; larger ones (and any when 0) go through storage only. */
      maxBytes: number;
      logger: Logger;
    },
  ) {}

  /** Whether bytes of this size are handed over at all. */
  accepts(bytes: number): boolean {
    return bytes > 0 && bytes <= this.deps.maxBytes;
  }

  /**
   * Hands `data` over for the job's waiters; never fails (they fall back to
   * storage). True when the bytes are there for them.
   */
  async offer(jobId: string, data: Buffer): Promise<boolean> {
    if (!this.accepts(data.length)) return false;
    try {
      const redis = this.deps.redis();
      // A worker makes this fail-fast connection on its first offer: ready first, within a bound.
      await waitForRedis(redis, OFFER_READY_WAIT_MS);
      await redis.set(handoffKey(this.deps.queuePrefix, jobId), data, 'PX', HANDOFF_TTL_MS);
      return true;
    } catch (err) {
      this.deps.logger.debug({ err, jobId }, 'job output not handed over (read from storage)');
      return false;
    }
  }

  /**
   * The bytes the job handed over, if they are there and of the expected
   * length; null otherwise (the caller reads storage).
   */
  async take(jobId: string, expectedBytes: number): Promise<Buffer | null> {
    if (!this.accepts(expectedBytes)) return null;
    try {
      const data = await this.deps.redis().getBuffer(handoffKey(this.deps.queuePrefix, jobId));
      return data?.length === expectedBytes ? data : null;
    } catch (err) {
      this.deps.logger.debug({ err, jobId }, 'handed-over job output not read (read from storage)');
      return null;
    }
  }
}
