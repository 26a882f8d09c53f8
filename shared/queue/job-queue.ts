/**
 * The producer side of the job queues (BullMQ), as the API uses it: add a job,
 * wait for its outcome, look a job up. Services see this interface only, never
 * BullMQ itself.
 */
import { Job, Queue, QueueEvents } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Config, QueueName } from '../config';
import { Errors, isAppError, type AppError } from '../errors';
import {
  JOB_OPTIONS,
  JOB_QUEUES,
  decodeJobError,
  newJobId,
  queueOfJobId,
  type AnyJobPayload,
  type JobName,
  type JobPayloads,
  type JobResults,
} from '../jobs';
import type { Logger } from '../logger';
import { createRedis, type RedisRole } from './redis';

export type JobState =
  | 'waiting'
  | 'active'
  | 'delayed'
  | 'prioritized'
  | 'waiting-children'
  | 'completed'
  | 'failed'
  | 'unknown';

export interface JobSnapshot {
  id: string;
  name: JobName;
  data: AnyJobPayload;
  state: JobState;
  /** The processor's return value, once completed. */
  result?: unknown;
  /** Why it failed, once failed for good. */
  error?: AppError;
  attemptsMade: number;
}

export type JobOutcome<N extends JobName> =
  | { state: 'completed'; result: JobResults[N] }
  | { state: 'failed'; error: AppError }
  | { state: 'timeout' };

export interface JobQueue {
  add<N extends JobName>(name: N, payload: JobPayloads[N], jobUuid: string): Promise<string>;
  wait<N extends JobName>(name: N, jobId: string, timeoutMs: number): Promise<JobOutcome<N>>;
  get(jobId: string): Promise<JobSnapshot | null>;
  /** Waiting, active, delayed and failed counts per queue (metrics, readiness). */
  counts(): Promise<Record<QueueName, Record<string, number>>>;
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** The error a failed job stands for: its encoded refusal, or a 500 when it crashed. */
export function errorOfFailure(reason: string | undefined): AppError {
  return decodeJobError(reason) ?? Errors.internal(new Error(reason ?? 'job failed'));
}

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
  private readonly connections: Redis[] = [];

  constructor(
    private readonly config: Pick<Config, 'redisUrl' | 'queuePrefix'>,
    private readonly logger: Logger,
  ) {}

  private connection(role: RedisRole): Redis {
    if (!this.config.redisUrl) throw new Error('REDIS_URL is not set');
    const redis = createRedis(this.config.redisUrl, role, this.logger);
    this.connections.push(redis);
    return redis;
  }

  private producerConnection: Redis | undefined;

  /** One fail-fast connection shared by the producers of every queue. */
  private producer(): Redis {
    this.producerConnection ??= this.connection('producer');
    return this.producerConnection;
  }

  queue(name: QueueName): Queue {
    let queue = this.queues.get(name);
    if (!queue) {
      queue = new Queue(name, {
        connection: this.producer(),
        prefix: this.config.queuePrefix,
      });
      queue.on('error', (err) => this.logger.warn({ err, queue: name }, 'queue error'));
      this.queues.set(name, queue);
    }
    return queue;
  }

  private queueEvents(name: QueueName): QueueEvents {
    let events = this.events.get(name);
    if (!events) {
      events = new QueueEvents(name, {
        connection: this.connection('events'),
        prefix: this.config.queuePrefix,
      });
      events.on('error', (err) => this.logger.warn({ err, queue: name }, 'queue events error'));
      this.events.set(name, events);
    }
    return events;
  }

  /** Starts listening for job outcomes (so the first request does not pay for it). */
  async init(): Promise<void> {
    await Promise.all(
      (['image', 'pdf'] as const).map(async (q) => {
        await this.queue(q).waitUntilReady();
        await this.queueEvents(q).waitUntilReady();
      }),
    );
  }

  async add<N extends JobName>(name: N, payload: JobPayloads[N], jobUuid: string): Promise<string> {
    const jobId = newJobId(name, jobUuid);
    await redisCall(() =>
      this.queue(JOB_QUEUES[name]).add(name, payload, { ...JOB_OPTIONS, jobId }),
    );
    return jobId;
  }

  async wait<N extends JobName>(name: N, jobId: string, timeoutMs: number): Promise<JobOutcome<N>> {
    const queue = this.queue(JOB_QUEUES[name]);
    const job = new Job(queue, name, {}, {}, jobId);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<JobOutcome<N>>((resolve) => {
      timer = setTimeout(() => resolve({ state: 'timeout' }), timeoutMs);
    });
    const finished = job
      .waitUntilFinished(this.queueEvents(JOB_QUEUES[name]), timeoutMs + 1_000)
      .then(
        (result: JobResults[N]): JobOutcome<N> => ({ state: 'completed', result }),
        (err: unknown): JobOutcome<N> => {
          const reason = err instanceof Error ? err.message : String(err);
          if (/timed out before finishing/.test(reason)) return { state: 'timeout' };
          return { state: 'failed', error: errorOfFailure(reason) };
        },
      );
    try {
      return await Promise.race([finished, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  async get(jobId: string): Promise<JobSnapshot | null> {
    const queueName = queueOfJobId(jobId);
    if (!queueName) return null;
    const job = await redisCall(() => this.queue(queueName).getJob(jobId));
    if (!job?.id) return null;
    const state = await redisCall<string>(() => job.getState());
    return {
      id: job.id,
      name: job.name as JobName,
      data: job.data as AnyJobPayload,
      state: state as JobState,
      result: state === 'completed' ? (job.returnvalue as unknown) : undefined,
      error: state === 'failed' ? errorOfFailure(job.failedReason) : undefined,
      attemptsMade: job.attemptsMade,
    };
  }

  async counts(): Promise<Record<QueueName, Record<string, number>>> {
    const out = {} as Record<QueueName, Record<string, number>>;
    for (const q of ['image', 'pdf'] as const) {
      out[q] = await redisCall(() =>
        this.queue(q).getJobCounts(
          'waiting',
          'active',
          'delayed',
          'failed',
          'completed',
          'prioritized',
        ),
      );
    }
    return out;
  }

  async ping(): Promise<void> {
    await redisCall(() => this.producer().ping());
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.events.values()].map((e) => e.close()));
    await Promise.allSettled([...this.queues.values()].map((q) => q.close()));
    for (const c of this.connections) c.disconnect();
  }
}
