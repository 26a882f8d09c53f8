/**
 * Jobs from the API's side: enqueue, wait up to JOB_WAIT_MS for the outcome
 * (so clients get the documented synchronous answer), or hand back the job id
 * at once when the client prefers (`Prefer: respond-async`) or the wait runs
 * out (504). The status URL answers with what the original request would have.
 */
import { randomUUID } from 'node:crypto';
import { Errors, isAppError, type AppError } from '@shared/errors';
import {
  decodeStoredResult,
  isResultRef,
  RESULTS_SEGMENT,
  type ResultRef,
} from '@shared/job-result';
import {
  newJobId,
  type JobName,
  type JobPayloads,
  type JobProgress,
  type JobResults,
} from '@shared/jobs';
import type { JobOutcome, JobQueue, JobSnapshot } from '@shared/queue/job-queue';
import type { MediaRepository } from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
import type { StoredResults } from '@shared/stored-results';
import type { Caller } from '../domain/caller';
import { toMediaView, type MediaView } from '../domain/media-view';

export type JobAnswer =
  /** The job finished: what the endpoint answers (metadata, or the new record). */
  | { kind: 'done'; data: unknown; creates: boolean }
  /** Not finished (yet): the job id and where to ask (and how far a long job has come). */
  | {
      kind: 'pending';
      jobId: string;
      state: string;
      statusUrl: string;
      progress?: JobProgress | undefined;
    };

/** A job recalled for a retry: its answer, its failure, or null when it is gone. */
export type Recalled = JobAnswer | { kind: 'failed'; error: AppError } | null;

/** The organization a job's answer is for (a record in no folder answers its root folder id). */
type Owner = Pick<Organization, 'id' | 'rootFolderId'>;

export class JobsService {
  constructor(
    private readonly deps: {
      queue: JobQueue;
      media: MediaRepository;
      publicBaseUrl: string;
      /** The storage container's name, shown in records. */
      bucket: string;
      waitMs: number;
      /** Where large results wait for the API (shared/stored-results.ts). */
      storedResults: Pick<StoredResults, 'take'>;
    },
  ) {}

  statusUrl(jobId: string): string {
    return `${this.deps.publicBaseUrl}/media/jobs/${encodeURIComponent(jobId)}`;
  }

  /**
   * Enqueues a job; unless `async`, waits for it and answers with its outcome.
   * `onQueued` runs once the job is in the queue (from then on the job owns
   * what its payload names, such as temporary inputs).
   */
  async run<N extends JobName>(
    name: N,
    payload: JobPayloads[N],
    options: {
      async: boolean;
      onQueued?: (jobId: string) => void;
      /** Its estimated work is long (shared/media/work.ts). */
      heavy?: boolean;
      /** The root folder id of the payload's organization (for the answer's folderId). */
      rootFolderId: number;
    },
  ): Promise<JobAnswer> {
    const jobId = await this.deps.queue.add(name, payload, randomUUID(), {
      heavy: options.heavy ?? false,
    });
    options.onQueued?.(jobId);
    if (options.async)
      return { kind: 'pending', jobId, state: 'waiting', statusUrl: this.statusUrl(jobId) };
    const outcome = await this.deps.queue.wait(name, jobId, this.deps.waitMs);
    const owner = { id: payload.organizationId, rootFolderId: options.rootFolderId };
    return this.answer(name, jobId, this.resultOf(jobId, outcome), owner);
  }

  /**
   * Queues a job for the caller (its organization and request id filled in)
   * and answers as the caller prefers: the outcome, waited for, or at once on
   * `Prefer: respond-async`; the caller is told of the queued job (a retry
   * with its `Idempotency-Key` gets that job's outcome).
   */
  submit<N extends JobName>(
    caller: Caller,
    input: {
      name: N;
      payload: Omit<JobPayloads[N], 'organizationId' | 'requestId'>;
      heavy?: boolean;
    },
  ): Promise<JobAnswer> {
    // (TypeScript does not see a generic Omit spread back as the payload it came from.)
    const payload = {
      organizationId: caller.organization.id,
      requestId: caller.requestId,
      ...input.payload,
    } as JobPayloads[N];
    return this.run(input.name, payload, {
      async: caller.respondAsync,
      onQueued: caller.onJobQueued,
      heavy: input.heavy,
      rootFolderId: caller.organization.rootFolderId,
    });
  }

  /**
   * Runs a job whose id is derived from what it makes (`jobUuid`), so
   * identical requests share one job: the first queues it, the others' add
   * is a no-op, and all wait on it. Answers its result, or throws its
   * failure (or a 504 with the job id when the wait runs out).
   */
  async runShared<N extends JobName>(
    name: N,
    payload: JobPayloads[N],
    jobUuid: string,
    options: { heavy?: boolean } = {},
  ): Promise<JobResults[N]> {
    const jobId = await this.deps.queue.add(name, payload, jobUuid, options);
    const outcome = await this.deps.queue.wait(name, jobId, this.deps.waitMs);
    if (outcome.state === 'completed' || outcome.state === 'failed') {
      // Not waited for: the answer does not depend on it (a stale entry expires within the hour).
      void this.deps.queue
        .settleShared(jobId, payload.organizationId, outcome.state === 'failed')
        .catch(() => undefined);
    }
    return this.resultOf(jobId, outcome);
  }

  /**
   * A shared job's completed outcome no longer holds (what it made was
   * removed since): the job goes, so the next `runShared` of its id runs it
   * again.
   */
  async forgetShared(name: JobName, jobUuid: string): Promise<void> {
    await this.deps.queue.forgetShared(newJobId(name, jobUuid));
  }

  /** A waited-for job's result, or its failure (a 504 with the job id when the wait ran out). */
  private resultOf<N extends JobName>(jobId: string, outcome: JobOutcome<N>): JobResults[N] {
    switch (outcome.state) {
      case 'completed':
        return outcome.result;
      case 'failed':
        throw outcome.error.withExtra({ jobId });
      case 'timeout':
        throw Errors.jobTimeout(jobId, this.statusUrl(jobId));
      case 'unavailable':
        // The job is kept and may still run: its id lets the client ask later.
        throw outcome.error.withExtra({ jobId });
    }
  }

  /** The job's state; once finished, the same answer the original request would have had. */
  async status(caller: Pick<Caller, 'organization'>, input: { jobId: string }): Promise<JobAnswer> {
    const org = caller.organization;
    const { jobId } = input;
    const job = await this.deps.queue.get(jobId);
    // Another organization's job does not exist, as far as this caller knows.
    // ('unknown': the job vanished between the lookup and its state, e.g. trimmed.)
    if (!job || job.data.organizationId !== org.id || job.state === 'unknown') {
      throw Errors.jobNotFound(jobId);
    }
    return this.answerFor(job, org);
  }

  /**
   * What a request that queued `jobId` answers on a retry (Idempotency-Key):
   * the record the job made, found by its job id (it outlives the job, which
   * BullMQ trims an hour after it completes), or the job's answer once
   * finished; while it runs, the pending answer, after waiting up to
   * `waitMs` for it to finish (0: not at all). `failed` with the job's error
   * when it failed (before or during the wait); `null` when it is gone
   * (trimmed, another organization's, or the record it made deleted since).
   */
  async recall(org: Owner, jobId: string, waitMs = 0): Promise<Recalled> {
    const made = await this.deps.media.findByJobId(jobId);
    if (made && made.organizationId === org.id) {
      return {
        kind: 'done',
        data: toMediaView(made, this.deps, { folderId: true, rootFolderId: org.rootFolderId }),
        creates: true,
      };
    }
    const job = await this.deps.queue.get(jobId);
    if (!job || job.data.organizationId !== org.id || job.state === 'unknown') return null;
    if (job.state === 'failed') {
      return { kind: 'failed', error: (job.error ?? Errors.internal()).withExtra({ jobId }) };
    }
    if (job.state === 'completed') return this.answerOrNull(job.name, jobId, job.result, org);
    if (waitMs <= 0) return this.answerFor(job, org);
    const outcome = await this.deps.queue.wait(job.name, jobId, waitMs);
    switch (outcome.state) {
      case 'completed':
        return this.answerOrNull(job.name, jobId, outcome.result, org);
      case 'failed':
        return { kind: 'failed', error: outcome.error.withExtra({ jobId }) };
      case 'unavailable':
        throw outcome.error.withExtra({ jobId });
      case 'timeout':
        return { kind: 'pending', jobId, state: job.state, statusUrl: this.statusUrl(jobId) };
    }
  }

  /** A completed job's answer; null when the record it made is gone. */
  private async answerOrNull(
    name: JobName,
    jobId: string,
    result: unknown,
    owner: Owner,
  ): Promise<JobAnswer | null> {
    try {
      return await this.answer(name, jobId, result as JobResults[JobName], owner);
    } catch (err) {
      if (isAppError(err) && err.status === 404) return null;
      throw err;
    }
  }

  /** A job of `owner`'s (the caller checked). */
  private async answerFor(job: JobSnapshot, owner: Owner): Promise<JobAnswer> {
    if (job.state === 'completed') {
      return this.answer(job.name, job.id, job.result as JobResults[JobName], owner);
    }
    if (job.state === 'failed') {
      throw (job.error ?? Errors.internal()).withExtra({ jobId: job.id });
    }
    return {
      kind: 'pending',
      jobId: job.id,
      state: job.state,
      statusUrl: this.statusUrl(job.id),
      progress: job.progress,
    };
  }

  /**
   * A large result the worker stored: read, removed (it is delivered once; a
   * second ask, or one after it expired, finds the job but not its result:
   * 404), decoded.
   */
  private async storedResult(jobId: string, key: string): Promise<unknown> {
    // Only the job's own result, under an organization's results prefix.
    if (!key.endsWith(`${RESULTS_SEGMENT}${jobId}.json`) || key.split('/').length !== 3) {
      throw Errors.internal(new Error(`job ${jobId} points at "${key}", not its result`));
    }
    const bytes = await this.deps.storedResults.take(key);
    if (!bytes) throw Errors.jobNotFound(jobId);
    return decodeStoredResult(bytes);
  }

  private async answer<N extends JobName>(
    name: N,
    jobId: string,
    stored: JobResults[N],
    owner: Owner,
  ): Promise<JobAnswer> {
    const result = (
      isResultRef(stored) ? await this.storedResult(jobId, stored.resultRef.key) : stored
    ) as Exclude<JobResults[JobName], ResultRef>;
    if ('metadata' in result) return { kind: 'done', data: result.metadata, creates: false };
    if ('folder' in result) return { kind: 'done', data: result, creates: false };
    if ('variant' in result) return { kind: 'done', data: result.variant, creates: false };
    if ('delivered' in result || 'outcome' in result) {
      return { kind: 'done', data: result, creates: false };
    }
    if (
      'scanStatus' in result ||
      'purged' in result ||
      'removed' in result ||
      'expired' in result ||
      'sha256' in result
    ) {
      return { kind: 'done', data: result, creates: false };
    }
    const record = await this.deps.media.findById(owner.id, result.mediaId);
    // Deleted since the job made it.
    if (!record) throw Errors.mediaIdNotFound(result.mediaId);
    // convert and merge-pdfs answer with folderId, as the interface shows.
    const view: MediaView = toMediaView(record, this.deps, {
      folderId: true,
      rootFolderId: owner.rootFolderId,
    });
    return { kind: 'done', data: view, creates: true };
  }
}
