/**
 * `Idempotency-Key` entries in Redis: who holds a key, and what its first
 * request left for retries. A key belongs to one token
 * (`<prefix><org>:<tokenId>:<sha256 of key>`): another token of the same
 * organization, with other scopes, never sees its answers.
 *
 * An entry is one of:
 *  - `running`: a request holds the key (`runningTtlMs`, for a process that
 *    dies mid-request);
 *  - `done`: the first request's answer (status, body, Location), kept
 *    `ttlMs`; written when the work has committed, before the answer is
 *    sent, so a client that dropped its connection, or a retry that comes
 *    the moment the answer arrives, finds it;
 *  - `job`: the request queued a job that makes its outcome (a convert or a
 *    merge that answered 504 or 202): a retry gets the job's outcome (its
 *    record once made, else the same pending answer), never a second job.
 *
 * Writes that must land (an outcome, a job, a release) are tried at once
 * within `attemptMs`; if Redis does not take them (restarting, cut off) they
 * are retried in the background, in order, until it does or `runningTtlMs`
 * has passed, so the key is not left "running" (409) by a Redis blip.
 */
import { createHash, randomUUID } from 'node:crypto';
import { Errors } from '@shared/errors';
import type { Logger } from '@shared/logger';
import type { RedisConnection } from '@shared/queue/redis';
import type { Organization } from '@shared/repositories/organizations.repository';
import { withTimeout } from '@shared/with-timeout';
import type { JobAnswer, JobsService } from './jobs.service';

/** Whose key it is. */
export interface IdempotencyScope {
  organization: Organization;
  tokenId: string;
  /** The `Idempotency-Key` header as sent. */
  key: string;
}

/** The first request's answer. */
export interface DoneEntry {
  state: 'done';
  fingerprint: string;
  status: number;
  location?: string | undefined;
  body: unknown;
}

/** The job that makes the first request's outcome. */
export interface JobEntry {
  state: 'job';
  fingerprint: string;
  jobId: string;
  /** The first request preferred an answer at once (202) over waiting (504 when too long). */
  async: boolean;
}

type Entry = { state: 'running'; claim: string } | DoneEntry | JobEntry;

/** What a request carrying a key may do. */
export type Admission =
  /** It holds the key: run, and tell the claim what came of it. */
  | { kind: 'run'; claim: Claim }
  /** Another request holds it (409). */
  | { kind: 'busy' }
  /** The first request answered: replay it (for the same request). */
  | { kind: 'done'; entry: DoneEntry }
  /** The first request's job has answered or is running: its answer (for the same request). */
  | { kind: 'job'; entry: JobEntry; answer: JobAnswer; raw: string };

/** What one request holding a key reports, and the writes that follow. */
export class Claim {
  private job: Promise<void> | undefined;

  constructor(
    private readonly store: IdempotencyService,
    readonly entryKey: string,
    private readonly running: string,
    /** The request's fingerprint (read once its body has ended). */
    private readonly fingerprint: () => Promise<string>,
  ) {}

  /** The request queued `jobId` to make its outcome: a retry now gets the job's outcome. */
  jobQueued(jobId: string, async: boolean): void {
    this.job = this.fingerprint()
      .then((fingerprint) =>
        this.store.save(this.entryKey, { state: 'job', fingerprint, jobId, async }),
      )
      .catch((err: unknown) => this.store.warn(err));
  }

  /**
   * The request's outcome, before its answer is sent (resolves once Redis
   * took it, or after the first try). A success is kept for retries; a
   * failure frees the key, unless a job was queued (its outcome decides).
   */
  async finish(status: number, body: unknown, location: string | undefined): Promise<void> {
    const success = status >= 200 && status < 300;
    // The job entry stands: its job decides what a retry gets.
    if (this.job && (!success || status === 202)) return void (await this.job);
    if (!success) return void (await this.store.release(this.entryKey, this.running));
    const fingerprint = await this.fingerprint();
    await this.store.save(this.entryKey, { state: 'done', fingerprint, status, location, body });
  }
}

export class IdempotencyService {
  private readonly ttlMs: number;
  private readonly runningTtlMs: number;
  private readonly attemptMs: number;
  private readonly writes: DurableWrites;

  constructor(
    private readonly deps: {
      /** The fail-fast command connection; without it, keyed requests are refused (503). */
      redis: RedisConnection | undefined;
      /** Prefix of the entries' keys (includes QUEUE_PREFIX). */
      keyPrefix: string;
      jobs: Pick<JobsService, 'recall'>;
      logger: Logger;
      /** How long an answer is kept for retries (default 24 h). */
      ttlMs?: number;
      /** How long a request that never finishes holds its key, and writes are retried (default 15 min). */
      runningTtlMs?: number;
      /** How long one Redis command may take (default 1 s). */
      attemptMs?: number;
    },
  ) {
    this.ttlMs = deps.ttlMs ?? 24 * 3_600_000;
    this.runningTtlMs = deps.runningTtlMs ?? 15 * 60_000;
    this.attemptMs = deps.attemptMs ?? 1_000;
    this.writes = new DurableWrites(this.attemptMs, this.runningTtlMs, deps.logger);
  }

  /** Whether keyed requests can be served at all (Redis is configured). */
  get enabled(): boolean {
    return this.deps.redis !== undefined;
  }

  /**
   * Claims the key for this request, or says what holds it. A job entry
   * whose job will never answer (failed, or gone) is claimed anew: the key
   * is free again, as after any failure.
   */
  async admit(scope: IdempotencyScope, fingerprint: () => Promise<string>): Promise<Admission> {
    const redis = this.redis();
    const entryKey = this.entryKeyOf(scope);
    // What this process still owes Redis for this key lands first (a retry after a blip).
    await this.writes.flush(entryKey);
    const running = JSON.stringify({ state: 'running', claim: randomUUID() } satisfies Entry);
    const claimed = await this.command(() =>
      redis.set(entryKey, running, 'PX', this.runningTtlMs, 'NX'),
    );
    if (claimed === 'OK') return { kind: 'run', claim: this.claim(entryKey, running, fingerprint) };
    const raw = await this.command(() => redis.get(entryKey));
    const entry = parseEntry(raw);
    if (!entry || entry.state === 'running') return { kind: 'busy' };
    if (entry.state === 'done') return { kind: 'done', entry };
    const answer = await this.deps.jobs.recall(scope.organization, entry.jobId);
    if (answer && answer.kind !== 'failed') return { kind: 'job', entry, answer, raw: raw! };
    // Failed or gone: the key is free; whoever swaps the entry first runs.
    const swapped = await this.command(() =>
      redis.eval(SWAP, 1, entryKey, raw!, running, String(this.runningTtlMs)),
    );
    return swapped === 1
      ? { kind: 'run', claim: this.claim(entryKey, running, fingerprint) }
      : { kind: 'busy' };
  }

  /**
   * The answer of a job entry for a retry that waits as the first request
   * did (up to `waitMs`): the record once made, else the pending answer. A
   * job that fails meanwhile frees the key, and its failure is thrown.
   */
  async awaitJob(
    scope: IdempotencyScope,
    admitted: { entry: JobEntry; raw: string },
    waitMs: number,
  ): Promise<JobAnswer> {
    const { jobId } = admitted.entry;
    const answer = await this.deps.jobs.recall(scope.organization, jobId, waitMs);
    if (answer && answer.kind !== 'failed') return answer;
    // Failed (or gone meanwhile): the key is free again, if it still names that job.
    const redis = this.redis();
    const entryKey = this.entryKeyOf(scope);
    await this.writes.write(entryKey, () => redis.eval(SWAP, 1, entryKey, admitted.raw, '', '0'));
    throw answer ? answer.error : Errors.jobNotFound(jobId);
  }

  /** Keeps `entry` for retries (`ttlMs`); see DurableWrites for when Redis does not answer. */
  async save(entryKey: string, entry: DoneEntry | JobEntry): Promise<void> {
    const redis = this.redis();
    const value = JSON.stringify(entry);
    await this.writes.write(entryKey, () => redis.set(entryKey, value, 'PX', this.ttlMs));
  }

  /** Frees the key, if it is still held by the claim `running`. */
  async release(entryKey: string, running: string): Promise<void> {
    const redis = this.redis();
    await this.writes.write(entryKey, () => redis.eval(SWAP, 1, entryKey, running, '', '0'));
  }

  warn(err: unknown): void {
    this.deps.logger.warn({ err }, 'could not keep an idempotent outcome');
  }

  private claim(entryKey: string, running: string, fingerprint: () => Promise<string>): Claim {
    return new Claim(this, entryKey, running, fingerprint);
  }

  private entryKeyOf(scope: IdempotencyScope): string {
    const hash = createHash('sha256').update(scope.key).digest('hex');
    return `${this.deps.keyPrefix}${scope.organization.id}:${scope.tokenId}:${hash}`;
  }

  private redis(): RedisConnection {
    if (!this.deps.redis) throw Errors.unavailable('Redis');
    return this.deps.redis;
  }

  /** A Redis command whose failure means "Redis is unavailable" (503), bounded in time. */
  private async command<T>(run: () => Promise<T>): Promise<T> {
    try {
      return await withTimeout(run(), this.attemptMs, 'Redis');
    } catch (err) {
      throw Errors.unavailable('Redis', err);
    }
  }
}

/**
 * Replaces (or, with an empty value, deletes) KEYS[1] only while it still
 * holds ARGV[1]: another request's claim is never overwritten or freed.
 */
const SWAP = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1])
else redis.call('SET', KEYS[1], ARGV[2], 'PX', tonumber(ARGV[3])) end
return 1`;

function parseEntry(raw: string | null): Entry | null {
  if (!raw) return null;
  try {
    return JSON.parse(raw) as Entry;
  } catch {
    return null;
  }
}

interface Queued {
  items: { command: () => Promise<unknown>; tried: (written: boolean) => void }[];
  deadline: number;
  delayMs: number;
  busy: boolean;
  timer?: NodeJS.Timeout | undefined;
}

/**
 * Redis writes that must land, per entry and in order: each is tried at
 * once (within `attemptMs`); when Redis does not take it, it and the writes
 * behind it are retried in the background (100 ms, doubling to 2 s) until
 * they land or `retryForMs` has passed (then an error is logged: the
 * `running` entry expires by itself). `write` resolves after the first try.
 */
class DurableWrites {
  private readonly queues = new Map<string, Queued>();

  constructor(
    private readonly attemptMs: number,
    private readonly retryForMs: number,
    private readonly logger: Logger,
  ) {}

  /** Resolves once the write landed (true) or its first try failed (false: it is retried). */
  write(key: string, command: () => Promise<unknown>): Promise<boolean> {
    let queue = this.queues.get(key);
    if (!queue) {
      queue = { items: [], deadline: Date.now() + this.retryForMs, delayMs: 100, busy: false };
      this.queues.set(key, queue);
    }
    const waiting = queue;
    return new Promise<boolean>((tried) => {
      waiting.items.push({ command, tried });
      if (waiting.timer)
        tried(false); // behind a write Redis refused: it waits its turn
      else if (!waiting.busy) void this.pump(key, waiting);
    });
  }

  /** Tries what still waits for `key` now (a retry of its request came in). */
  async flush(key: string): Promise<void> {
    const queue = this.queues.get(key);
    if (!queue?.timer) return;
    clearTimeout(queue.timer);
    queue.timer = undefined;
    await this.pump(key, queue);
  }

  private async pump(key: string, queue: Queued): Promise<void> {
    queue.busy = true;
    try {
      while (queue.items.length > 0) {
        const item = queue.items[0]!;
        try {
          await withTimeout(item.command(), this.attemptMs, 'Redis');
        } catch (err) {
          for (const waiting of queue.items) waiting.tried(false);
          if (Date.now() >= queue.deadline) {
            this.logger.error(
              { err, writes: queue.items.length },
              'gave up keeping an idempotent outcome: Redis did not take it in time',
            );
            this.queues.delete(key);
            return;
          }
          queue.timer = setTimeout(() => {
            queue.timer = undefined;
            void this.pump(key, queue);
          }, queue.delayMs).unref();
          queue.delayMs = Math.min(queue.delayMs * 2, 2_000);
          return;
        }
        item.tried(true);
        queue.items.shift();
        queue.delayMs = 100;
      }
      this.queues.delete(key);
    } finally {
      queue.busy = false;
    }
  }
}
