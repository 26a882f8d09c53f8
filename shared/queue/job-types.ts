/**
 * What the job queue promises its callers, apart from BullMQ: a job's states,
 * the snapshot a status lookup answers, the outcome of waiting for a job, the
 * `JobQueue` interface services depend on, and how a failure's reason becomes
 * the error the client sees. `job-queue.ts` implements it on BullMQ.
 */
import { Errors, type AppError } from '../errors';
import {
  decodeJobError,
  type AnyJobPayload,
  type JobName,
  type JobPayloads,
  type JobProgress,
  type JobResults,
} from '../jobs';
import type { QueueName } from '../config';

/** The states of a job that has not ended (it may still read its inputs). */
export const UNFINISHED_STATES = [
  'waiting',
  'delayed',
  'prioritized',
  'active',
  'waiting-children',
] as const;

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
  /** What the processor reported of its progress (long jobs), if anything. */
  progress?: JobProgress;
}

export type JobOutcome<N extends JobName> =
  | { state: 'completed'; result: JobResults[N] }
  | { state: 'failed'; error: AppError }
  | { state: 'timeout' }
  /** Redis went away while waiting: the job is kept (it may still run), its outcome unknown. */
  | { state: 'unavailable'; error: AppError };

export interface JobQueue {
  /** Queues a job (`heavy`: its estimated work is long, shared/media/work.ts). */
  add<N extends JobName>(
    name: N,
    payload: JobPayloads[N],
    jobUuid: string,
    options?: { heavy?: boolean; uncapped?: boolean },
  ): Promise<string>;
  wait<N extends JobName>(name: N, jobId: string, timeoutMs: number): Promise<JobOutcome<N>>;
  get(jobId: string): Promise<JobSnapshot | null>;
  /**
   * After waiting on a job whose id many requests share (renders): its entry
   * in the organization's unfinished jobs goes (an `add` of a job that had
   * already ended put it back), and a failed job is removed, so the next
   * request tries again rather than meeting the same failure for a week.
   */
  settleShared(jobId: string, organizationId: number, failed: boolean): Promise<void>;
  /**
   * A shared job whose completed outcome no longer holds (a render whose
   * variant was removed since: the next request must render again) is
   * removed, if it has completed; a job still running is left alone.
   */
  forgetShared(jobId: string): Promise<void>;
  /** Waiting, active, delayed and failed counts per queue (metrics, readiness). */
  counts(): Promise<Record<QueueName, Record<string, number>>>;
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** The error a failed job stands for: its encoded refusal, or a 500 when it crashed. */
export function errorOfFailure(reason: string | undefined): AppError {
  return decodeJobError(reason) ?? Errors.internal(new Error(reason ?? 'job failed'));
}
