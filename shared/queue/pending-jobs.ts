/**
 * Each organization's unfinished jobs, kept in Redis so every API replica and
 * worker sees them: a sorted set per organization (job id, scored by when it
 * was queued). A job is admitted only while its organization has fewer than
 * `cap` unfinished jobs (past it: 429 with Retry-After, nothing queued). The
 * order in which admitted jobs run is the fair gate's (fair-gate.ts).
 *
 * The worker removes a job when it ends for good (completed, or failed after
 * its last attempt, or stalled too often). An entry older than `staleMs` (one
 * hour: a job lost with its Redis data, say) no longer counts.
 */
import type { RedisConnection } from './redis';

/** Admits a job: ZCARD after dropping stale entries; over the cap -1, else ZADD and the count before it. */
const ADMIT = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
local n = redis.call('ZCARD', KEYS[1])
if n >= tonumber(ARGV[3]) then return -1 end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return n
`;

/** What `defineCommand` adds to a connection: the script by its SHA (EVALSHA, EVAL only once). */
type WithAdmit = { mediaAdmitJob(key: string, ...args: string[]): Promise<number> };

export class PendingJobs {
  /** Connections the admission script is defined on (once each, not per job). */
  private readonly defined = new WeakSet<RedisConnection>();

  constructor(
    private readonly redis: () => RedisConnection,
    /** The queue prefix (a hash tag on a cluster: the sets live in the queues' slot). */
    private readonly prefix: string,
    private readonly options: { cap: number; staleMs?: number },
  ) {}

  private key(organizationId: number): string {
    return `${this.prefix}:pending:${organizationId}`;
  }

  /**
   * Counts a job as its organization's: the number it already had unfinished,
   * or null when that is at the cap already.
   */
  async admit(organizationId: number, jobId: string): Promise<number | null> {
    const now = Date.now();
    const staleMs = this.options.staleMs ?? 3_600_000;
    const n = await this.admitScript().mediaAdmitJob(
      this.key(organizationId),
      String(now),
      String(now - staleMs),
      String(this.options.cap),
      jobId,
      String(staleMs),
    );
    return n < 0 ? null : n;
  }

  /** The connection with ADMIT defined: sent by its SHA, its text only when Redis lacks it. */
  private admitScript(): WithAdmit {
    const redis = this.redis();
    if (!this.defined.has(redis)) {
      redis.defineCommand('mediaAdmitJob', { numberOfKeys: 1, lua: ADMIT });
      this.defined.add(redis);
    }
    return redis as unknown as WithAdmit;
  }

  /** The job has ended (or was never queued): it no longer counts. */
  async release(organizationId: number, jobId: string): Promise<void> {
    await this.redis().zrem(this.key(organizationId), jobId);
  }

  async count(organizationId: number): Promise<number> {
    return this.redis().zcard(this.key(organizationId));
  }
}
