/**
 * The producer side of the job queues (BullMQ), as the API uses it: add a job,
 * wait for its outcome, look a job up. Services see this interface only, never
 * BullMQ itself.
 */
export type { JobOutcome, JobQueue, JobSnapshot, JobState } from './job-types';
export { errorOfFailure } from './job-types';
import type { EventEmitter } from 'node:events';
import { Job, Queue, QueueEvents, type JobType } from 'bullmq';
import { QUEUE_NAMES, type Config, type QueueName } from '../config';
import { Errors, isAppError } from '../errors';
import {
  type JobProgress,
  EVENTS_MAX_LEN,
  JOB_OPTIONS,
  JOB_OPTIONS_OF,
  JOB_QUEUES,
  newJobId,
  queueOfJobId,
  type AnyJobPayload,
  type JobName,
  type JobPayloads,
  type JobResults,
} from '../jobs';
import type { Logger } from '../logger';
import { timeDependency, type DependencyMetrics } from '../metrics';
import { currentJobTrace, inSpan, SpanKind } from '../tracing';
import {
  errorOfFailure,
  UNFINISHED_STATES,
  type JobOutcome,
  type JobQueue,
  type JobSnapshot,
  type JobState,
} from './job-types';
import { FairGate, HOLD_DELAY_MS, type Released } from './fair-gate';
import { PendingJobs } from './pending-jobs';
import { createRedis, waitForRedis, type RedisConnection, type RedisRole } from './redis';

/** How a job is queued. */
export interface AddOptions {
  /** Its estimated work is long (shared/media/work.ts): the fair gate caps such jobs per organization. */
  heavy?: boolean;
  /**
   * Not counted against the organization's MAX_PENDING_JOBS (the service's
   * own work, such as event deliveries: a client's requests never wait on
   * it); the fair gate still orders it.
   */
  uncapped?: boolean;
}

/** How long a wait gives the events connection to come back before answering `unavailable`. */
export const EVENTS_READY_GRACE_MS = 2_000;

/** Errors from Redis itself (connection refused, offline) become a 503. */
function redisCall<T>(fn: () => Promise<T>): Promise<T> {
  return fn().catch((err: unknown) => {
    if (isAppError(err)) throw err;
    throw Errors.unavailable('Redis', err);
  });
}

export class BullJobQueue implements JobQueue {
  private readonly queues = new Map<QueueName, Queue>();
  private readonly events = new Map<QueueName, QueueEvents>();
  /** Each QueueEvents' own connection (watched by `wait`). */
  private readonly eventsConnections = new Map<QueueName, RedisConnection>();
  /** Waits to end when a queue's events connection closes (one `close` listener fans out). */
  private readonly onEventsLost = new Map<QueueName, Set<() => void>>();
  private readonly connections: RedisConnection[] = [];

  /** Each organization's unfinished jobs: the cap (MAX_PENDING_JOBS). */
  private readonly pending: PendingJobs;
  /** Which jobs the workers may take: fair between organizations, in order within one. */
  readonly gate: FairGate;

  constructor(
    private readonly config: Pick<Config, 'redisUrl' | 'queuePrefix'> & {
      /** Unfinished jobs an organization may have (MAX_PENDING_JOBS); unbounded when absent. */
      maxPendingJobs?: number;
      /** The fair gate's shares (defaults: JOB_RESERVED_SLOTS 1, JOB_QUEUED_PER_SLOT 2). */
      fairQueues?: Config['fairQueues'];
    },
    private readonly logger: Logger,
    /** Times the producer's calls to Redis (add, get, counts, ping…) for the dependency metrics. */
    private readonly metrics?: DependencyMetrics,
  ) {
    this.pending = new PendingJobs(() => this.producer(), config.queuePrefix, {
      cap: config.maxPendingJobs ?? Number.MAX_SAFE_INTEGER,
    });
    this.gate = new FairGate(
      () => this.producer(),
      config.queuePrefix,
      config.fairQueues ?? { reservedSlots: 1, queuedPerSlot: 2 },
    );
  }

  /** A call to Redis: timed, and a 503 when Redis itself fails. */
  private call<T>(operation: string, fn: () => Promise<T>): Promise<T> {
    return timeDependency(
      this.metrics,
      'redis',
      operation,
      () => redisCall(fn),
      (err) => !isAppError(err) || err.status >= 500,
    );
  }

  private connection(role: RedisRole): RedisConnection {
    if (!this.config.redisUrl) throw new Error('REDIS_URL is not set');
    const redis = createRedis(this.config.redisUrl, role, this.logger);
    this.connections.push(redis);
    return redis;
  }

  private producerConnection: RedisConnection | undefined;

  /** The producers' connection, for readers of the queues' own keys (worker/events/job-events.ts). */
  redis(): RedisConnection {
    return this.producer();
  }

  /** One fail-fast connection shared by the producers of every queue. */
  private producer(): RedisConnection {
    this.producerConnection ??= this.connection('producer');
    return this.producerConnection;
  }

  queue(name: QueueName): Queue {
    let queue = this.queues.get(name);
    if (!queue) {
      queue = new Queue(name, {
        connection: this.producer(),
        prefix: this.config.queuePrefix,
        streams: { events: { maxLen: EVENTS_MAX_LEN } },
      });
      queue.on('error', (err) => this.logger.warn({ err, queue: name }, 'queue error'));
      this.queues.set(name, queue);
    }
    return queue;
  }

  private queueEvents(name: QueueName): QueueEvents {
    let events = this.events.get(name);
    if (!events) {
      const connection = this.connection('events');
      this.eventsConnections.set(name, connection);
      const waiters = new Set<() => void>();
      this.onEventsLost.set(name, waiters);
      connection.on('close', () => {
        for (const lost of [...waiters]) lost();
      });
      events = new QueueEvents(name, {
        connection,
        prefix: this.config.queuePrefix,
      });
      events.on('error', (err) => this.logger.warn({ err, queue: name }, 'queue events error'));
      // Requests that share a job (renders) each listen for its outcome: many at once is normal.
      events.setMaxListeners(1_000);
      this.events.set(name, events);
    }
    return events;
  }

  /** Starts listening for job outcomes (so the first request does not pay for it). */
  async init(): Promise<void> {
    await Promise.all(
      QUEUE_NAMES.map(async (q) => {
        await this.queue(q).waitUntilReady();
        await this.queueEvents(q).waitUntilReady();
      }),
    );
  }

  /**
   * Queues a job under its organization's cap (else 429). The fair gate
   * decides whether the workers may take it now; if not, it is added held
   * (delayed) and released in its organization's order.
   */
  async add<N extends JobName>(
    name: N,
    payload: JobPayloads[N],
    jobUuid: string,
    options: AddOptions = {},
  ): Promise<string> {
    const jobId = newJobId(name, jobUuid);
    const queue = JOB_QUEUES[name];
    const org = payload.organizationId;
    if (!options.uncapped) {
      const admitted = await this.call('admit', () => this.pending.admit(org, jobId));
      if (admitted === null) throw Errors.tooManyJobs(this.config.maxPendingJobs ?? 0);
    }
    // The worker's `process` span is a child of this one: its context travels in the payload.
    await inSpan(
      `send ${queue}`,
      SpanKind.PRODUCER,
      {
        'messaging.system': 'bullmq',
        'messaging.operation.type': 'send',
        'messaging.destination.name': queue,
        'messaging.message.id': jobId,
        'media.job.name': name,
      },
      async () => {
        const trace = currentJobTrace();
        const data = trace ? { ...payload, trace } : payload;
        const runs = await this.call('enter', () =>
          this.gate.enter(queue, org, jobId, options.heavy ?? false),
        );
        await this.call('add', () =>
          this.queue(queue).add(name, data, {
            ...JOB_OPTIONS,
            ...JOB_OPTIONS_OF[name],
            jobId,
            ...(runs ? {} : { delay: HOLD_DELAY_MS }),
          }),
        );
        // Held: released meanwhile by a job of its organization that ended?
        if (!runs && (await this.call('confirm', () => this.gate.confirm(queue, jobId)))) {
          await this.promote(queue, jobId);
        }
      },
    ).catch(async (err: unknown) => {
      // Not queued: it does not count, and what it held back may run.
      await this.pending.release(org, jobId).catch(() => undefined);
      await this.finish(queue, org, jobId).catch(() => undefined);
      throw err;
    });
    return jobId;
  }

  /**
   * Queues a job outside the organization's cap and the fair gate, at once or
   * after `delayMs`: for webhook deliveries, whose fairness is per endpoint
   * (worker/webhooks/) and whose retries wait hours. Queued twice under the
   * same id, it is one job.
   */
  async schedule<N extends JobName>(
    name: N,
    payload: JobPayloads[N],
    jobUuid: string,
    options: { delayMs?: number } = {},
  ): Promise<string> {
    const jobId = newJobId(name, jobUuid);
    await this.call('add', () =>
      this.queue(JOB_QUEUES[name]).add(name, payload, {
        ...JOB_OPTIONS,
        jobId,
        ...(options.delayMs ? { delay: options.delayMs } : {}),
      }),
    );
    return jobId;
  }

  /**
   * Runs a job every `everyMs` (a BullMQ job scheduler named after the job:
   * scheduling it again, from any process, only updates its interval).
   * Outside the organizations' caps and the fair gate.
   */
  async repeat<N extends JobName>(
    name: N,
    payload: JobPayloads[N],
    everyMs: number,
  ): Promise<void> {
    await this.call('add', () =>
      this.queue(JOB_QUEUES[name]).upsertJobScheduler(
        name,
        { every: everyMs },
        {
          name,
          data: payload,
          opts: {
            attempts: JOB_OPTIONS.attempts,
            backoff: JOB_OPTIONS.backoff,
            removeOnComplete: JOB_OPTIONS.removeOnComplete,
            removeOnFail: JOB_OPTIONS.removeOnFail,
          },
        },
      ),
    );
  }

  /**
   * `schedule` for many jobs of one name at once, at once: one round trip to
   * Redis (BullMQ's `addBulk`) however many. A job whose id exists already
   * stays as it is, as with `schedule`.
   */
  async scheduleMany<N extends JobName>(
    name: N,
    jobs: { payload: JobPayloads[N]; jobUuid: string }[],
  ): Promise<string[]> {
    if (jobs.length === 0) return [];
    const queued = jobs.map((j) => ({
      name,
      data: j.payload,
      opts: { ...JOB_OPTIONS, jobId: newJobId(name, j.jobUuid) },
    }));
    await this.call('add', () => this.queue(JOB_QUEUES[name]).addBulk(queued));
    return queued.map((j) => j.opts.jobId);
  }

  /** Waits (at most `timeoutMs`) for the producer connection: a fresh process's first calls. */
  async ready(timeoutMs = 5_000): Promise<void> {
    await redisCall(() => waitForRedis(this.producer(), timeoutMs));
  }

  /** A job has ended for good (the worker says so): it no longer counts, and what it held back may run. */
  async ended(queue: QueueName, organizationId: number, jobId: string): Promise<void> {
    await Promise.all([
      this.pending.release(organizationId, jobId),
      this.finish(queue, organizationId, jobId),
    ]);
  }

  /** A job has ended for good (or was never queued): the gate forgets it and releases what it held back. */
  async finish(queue: QueueName, organizationId: number, jobId: string): Promise<void> {
    const released = await this.gate.finish(queue, organizationId, jobId);
    await this.promoteAll(queue, released);
  }

  /**
   * What the gate may release now (slots came or went; a process died
   * between releasing and promoting), and its entries of jobs that ended
   * without `finish` (a killed process) dropped: run every few seconds by
   * the workers.
   */
  async sweepGate(queue: QueueName, olderThanMs = 30_000): Promise<number> {
    const q = this.queue(queue);
    for (const { organizationId, jobId } of await this.gate.releasedBefore(
      queue,
      Date.now() - olderThanMs,
    )) {
      const state = await q.getJobState(jobId);
      if (state === 'delayed') await this.promote(queue, jobId);
      else if (state === 'completed' || state === 'failed' || state === 'unknown') {
        await this.finish(queue, organizationId, jobId);
      }
    }
    const released = await this.gate.sweep(queue);
    await this.promoteAll(queue, released);
    return released.length;
  }

  private async promoteAll(queue: QueueName, released: Released[]): Promise<void> {
    for (const { jobId } of released) await this.promote(queue, jobId);
  }

  /** Moves a released job from held (delayed) to the end of the wait list. */
  private async promote(queue: QueueName, jobId: string): Promise<void> {
    for (let tries = 0; tries < 2; tries++) {
      const job = await Job.fromId(this.queue(queue), jobId);
      if (!job) {
        // Not added yet: its producer promotes it on `confirm`, unless it was added meanwhile.
        if (await this.gate.early(queue, jobId)) continue;
        return;
      }
      try {
        await job.promote();
      } catch (err) {
        // No longer delayed (taken already, or its hold ran out): nothing to do.
        if ((await this.queue(queue).getJobState(jobId)) === 'delayed') throw err;
      }
      return;
    }
  }

  /**
   * Waits for the job's outcome through the queue's QueueEvents, at most
   * `timeoutMs`. Ends early with `unavailable` when the connection to Redis
   * drops while waiting (or is not back within EVENTS_READY_GRACE_MS), rather
   * than hanging until the timeout: the job itself is kept and may still run.
   */
  async wait<N extends JobName>(name: N, jobId: string, timeoutMs: number): Promise<JobOutcome<N>> {
    const queueName = JOB_QUEUES[name];
    // QueueEvents also emits `completed:<jobId>` / `failed:<jobId>` (as BullMQ's own
    // waitUntilFinished uses), which its typings do not declare.
    const events = this.queueEvents(queueName) as unknown as EventEmitter;
    const connection = this.eventsConnections.get(queueName)!;
    const lostWaiters = this.onEventsLost.get(queueName)!;
    const queue = this.queue(queueName);
    return new Promise<JobOutcome<N>>((resolve) => {
      let settled = false;
      const settle = (outcome: JobOutcome<N>) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        events.off(`completed:${jobId}`, onCompleted);
        events.off(`failed:${jobId}`, onFailed);
        lostWaiters.delete(onClose);
        resolve(outcome);
      };
      const onCompleted = (args: { returnvalue: unknown }) =>
        settle({ state: 'completed', result: args.returnvalue as JobResults[N] });
      const onFailed = (args: { failedReason: string }) =>
        settle({ state: 'failed', error: errorOfFailure(args.failedReason) });
      const onLost = (cause?: unknown) =>
        settle({
          state: 'unavailable',
          error: Errors.unavailable(
            'Redis',
            cause ?? new Error('the connection to Redis closed while waiting for the job'),
          ),
        });
      const onClose = () => onLost();
      const timer = setTimeout(() => settle({ state: 'timeout' }), timeoutMs);
      events.on(`completed:${jobId}`, onCompleted);
      events.on(`failed:${jobId}`, onFailed);
      lostWaiters.add(onClose);
      // The job may have finished before the listeners were in place: look once.
      void (async () => {
        try {
          if (connection.status !== 'ready') {
            await waitForRedis(connection, Math.min(EVENTS_READY_GRACE_MS, timeoutMs));
          }
          // The state first, then the job: a job read while still active has no return
          // value yet, and may complete before its state is asked.
          const state = await this.call('getJobState', () => queue.getJobState(jobId));
          if (state !== 'completed' && state !== 'failed') return;
          const job = await this.call('getJob', () => Job.fromId(queue, jobId));
          if (!job) return;
          if (state === 'completed') onCompleted({ returnvalue: job.returnvalue });
          else onFailed({ failedReason: job.failedReason });
        } catch (err) {
          onLost(err);
        }
      })();
    });
  }

  async get(jobId: string): Promise<JobSnapshot | null> {
    const queueName = queueOfJobId(jobId);
    if (!queueName) return null;
    const queue = this.queue(queueName);
    // The state first, then the job: a job only moves forward (waiting, active, finished), so
    // the job read second is at least as far along as its state says. The other way round, a
    // job read while active and found failed a moment later had no failure reason yet, and
    // its status answered 500 instead of the job's own error.
    const state = await this.call<string>('getJobState', () => queue.getJobState(jobId));
    const job = await this.call('getJob', () => queue.getJob(jobId));
    if (!job?.id) return null;
    // A job the fair gate holds back is, to its client, waiting like any queued job.
    const held = state === 'delayed' && job.delay === HOLD_DELAY_MS;
    return {
      id: job.id,
      name: job.name as JobName,
      data: job.data as AnyJobPayload,
      state: (held ? 'waiting' : state) as JobState,
      result: state === 'completed' ? (job.returnvalue as unknown) : undefined,
      error: state === 'failed' ? errorOfFailure(job.failedReason) : undefined,
      attemptsMade: job.attemptsMade,
      progress: isProgress(job.progress) ? job.progress : undefined,
    };
  }

  async settleShared(jobId: string, organizationId: number, failed: boolean): Promise<void> {
    await this.call('release', () => this.pending.release(organizationId, jobId));
    const queueName = queueOfJobId(jobId);
    if (!queueName) return;
    await this.call('finish', () => this.finish(queueName, organizationId, jobId));
    if (!failed) return;
    const job = await this.call('getJob', () => this.queue(queueName).getJob(jobId));
    if (job && (await this.call('isFailed', () => job.isFailed()))) {
      await this.call('remove', () => job.remove()).catch(() => undefined);
    }
  }

  async forgetShared(jobId: string): Promise<void> {
    const queueName = queueOfJobId(jobId);
    if (!queueName) return;
    const job = await this.call('getJob', () => this.queue(queueName).getJob(jobId));
    if (job && (await this.call('isCompleted', () => job.isCompleted()))) {
      await this.call('remove', () => job.remove()).catch(() => undefined);
    }
  }

  /** Every unfinished job's `temporaryKeys`: owned until the job ends (not orphans). */
  async temporaryKeysInUse(): Promise<Set<string>> {
    const keys = new Set<string>();
    // A fresh connection (the CLI's) may not be up yet: wait for it, boundedly.
    await redisCall(() => waitForRedis(this.producer(), 5_000));
    for await (const job of this.jobsIn(UNFINISHED_STATES)) {
      const data = job.data as { temporaryKeys?: unknown } | undefined;
      if (Array.isArray(data?.temporaryKeys)) {
        for (const key of data.temporaryKeys) if (typeof key === 'string') keys.add(key);
      }
    }
    return keys;
  }

  /**
   * Removes an organization's jobs that have not started (waiting, delayed,
   * prioritized) from every queue; answers how many, and how many of its jobs
   * are running still (they finish; an organization being deleted waits for them).
   */
  async removeUnstartedOf(organizationId: number): Promise<{ removed: number; active: number }> {
    await redisCall(() => waitForRedis(this.producer(), 5_000));
    // Again until a pass removes nothing: each removal tells the fair gate the job ended,
    // which releases the organization's next held job from BullMQ's delayed list to its
    // wait list, a state the pass may already have read.
    let removed = 0;
    for (let pass = 0; ; pass++) {
      const round = await this.removeUnstartedPass(organizationId);
      removed += round.removed;
      if (round.removed === 0 || pass === 9) return { removed, active: round.active };
    }
  }

  /** One pass of `removeUnstartedOf` over every queue and unfinished state. */
  private async removeUnstartedPass(
    organizationId: number,
  ): Promise<{ removed: number; active: number }> {
    let removed = 0;
    let active = 0;
    for await (const job of this.jobsIn(UNFINISHED_STATES)) {
      if ((job.data as { organizationId?: unknown }).organizationId !== organizationId) continue;
      if (await this.call('isActive', () => job.isActive())) active++;
      else {
        await this.call('remove', () => job.remove());
        await this.pending.release(organizationId, job.id!);
        await this.finish(job.queueName as QueueName, organizationId, job.id!);
        removed++;
      }
    }
    return { removed, active };
  }

  /** Every job of every queue in `states`, page by page. */
  private async *jobsIn(states: readonly JobType[]): AsyncGenerator<Job> {
    const PAGE = 200;
    for (const name of QUEUE_NAMES) {
      const queue = this.queue(name);
      for (const state of states) {
        for (let start = 0; ; start += PAGE) {
          const jobs = await this.call('getJobs', () =>
            queue.getJobs(state, start, start + PAGE - 1),
          );
          for (const job of jobs) if (job) yield job;
          if (jobs.length < PAGE) break;
        }
      }
    }
  }

  /**
   * Jobs per queue and state. `held`: jobs the fair gate holds back (BullMQ
   * keeps them delayed; `delayed` counts the others, retries waiting for
   * their backoff). The queue's backlog is `waiting` + `held`.
   */
  async counts(): Promise<Record<QueueName, Record<string, number>>> {
    const out = {} as Record<QueueName, Record<string, number>>;
    for (const q of QUEUE_NAMES) {
      // A job scheduler (`repeat`: the trash's purge) always keeps its next run delayed:
      // not work waiting, so `delayed` stays retries only.
      const [counts, held, scheduled] = await Promise.all([
        this.call('getJobCounts', () =>
          this.queue(q).getJobCounts(
            'waiting',
            'active',
            'delayed',
            'failed',
            'completed',
            'prioritized',
          ),
        ),
        this.call('heldCount', () => this.gate.heldCount(q)),
        this.call('getJobSchedulersCount', () => this.queue(q).getJobSchedulersCount()),
      ]);
      out[q] = { ...counts, delayed: Math.max(0, (counts.delayed ?? 0) - held - scheduled), held };
    }
    return out;
  }

  async ping(): Promise<void> {
    await this.call('ping', () => this.producer().ping());
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.events.values()].map((e) => e.close()));
    await Promise.allSettled([...this.queues.values()].map((q) => q.close()));
    for (const c of this.connections) c.disconnect();
  }
}

function isProgress(value: unknown): value is JobProgress {
  const p = value as Partial<JobProgress> | null;
  return typeof p?.done === 'number' && typeof p.total === 'number';
}
