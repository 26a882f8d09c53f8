/**
 * The life of a job result too large for Redis (shared/job-result.ts says
 * which and in what form), from the worker that stores it to its removal:
 *
 * - **Bounded where written.** One result is at most RESULT_MAX_BYTES (413
 *   past it, nothing stored); an organization's results stored at once are
 *   at most RESULTS_MAX_BYTES_PER_ORG, counted atomically in its usage
 *   counter (`resultBytes`) before the object is written (429 past it, with
 *   the time until its first result expires).
 * - **Removed once read.** The API reads it for the waiting request or the
 *   job's status URL, whichever comes first, then removes it.
 * - **Removed once expired.** Each stored result has an entry
 *   (`job_results`) with its expiry, RESULT_TTL_MS after it was stored; the
 *   workers sweep those past it, so a result nobody reads (an async job never
 *   polled, a request that answered 504) is gone within the TTL and a sweep
 *   interval, not at the next reconcile.
 *
 * Order: counter, entry, object when storing; object, entry, counter when
 * removing. So no object is ever without its entry, and removing the entry
 * is the claim that gives its bytes back once (reader and sweeps may race).
 */
import { Errors, isAppError } from './errors';
import { resultKey, type ResultRef } from './job-result';
import type { Logger } from './logger';
import type { JobResultsRepository } from './repositories/job-results.repository';
import type { UsageRepository } from './repositories/usage.repository';
import type { ObjectStore } from './storage/object-store';

export interface StoredResultsSettings {
  /** Largest result (bytes of its stored form). */
  maxBytes: number;
  /** Bytes of one organization's results stored at once. */
  maxBytesPerOrg: number;
  /** How long an unread result is kept. */
  ttlMs: number;
}

/** Entries removed per sweep at most (the next sweep goes on). */
const SWEEP_BATCH = 200;
/** Longest pause between two sweeps; shorter when the TTL is (half of it). */
const SWEEP_EVERY_MS = 60_000;

export class StoredResults {
  constructor(
    private readonly deps: {
      store: ObjectStore;
      results: JobResultsRepository;
      usage: Pick<UsageRepository, 'reserveResult' | 'releaseResult'>;
      settings: StoredResultsSettings;
      logger: Logger;
      now?: () => Date;
    },
  ) {}

  private now(): Date {
    return this.deps.now?.() ?? new Date();
  }

  /**
   * Stores a job's result for the API and answers the pointer the job
   * returns. A retry of the job stores the same bytes at the same key,
   * counted once. Once `signal` is aborted (the job's time limit) nothing is
   * left behind.
   */
  async save(
    organization: { id: number; slug: string },
    jobId: string,
    data: Buffer,
    signal?: AbortSignal,
  ): Promise<ResultRef> {
    const { maxBytes, maxBytesPerOrg, ttlMs } = this.deps.settings;
    if (data.length > maxBytes) throw Errors.resultTooLarge(data.length, maxBytes);
    signal?.throwIfAborted();
    const key = resultKey(organization.slug, jobId);
    const { usage, results, store } = this.deps;
    if (!(await usage.reserveResult(organization.id, data.length, maxBytesPerOrg))) {
      const next = await results.nextExpiry(organization.id).catch(() => null);
      const wait = next ? (next.getTime() - this.now().getTime()) / 1000 : ttlMs / 1000;
      throw Errors.tooManyResults(maxBytesPerOrg, wait);
    }
    const now = this.now();
    let added: boolean;
    try {
      added = await results.add({
        key,
        jobId,
        organizationId: organization.id,
        bytes: data.length,
        createdAt: now,
        expiresAt: new Date(now.getTime() + ttlMs),
      });
    } catch (err) {
      await this.giveBack(organization.id, data.length);
      throw err;
    }
    // An earlier attempt of the job has the entry (and counted it).
    if (!added) await this.giveBack(organization.id, data.length);
    try {
      await store.put(key, data, { contentType: 'application/json' });
      signal?.throwIfAborted();
    } catch (err) {
      // This attempt's entry goes with the object; an earlier attempt's waits for the sweep.
      if (added) await this.remove(key).catch((e: unknown) => this.warn(e, key));
      throw err;
    }
    return { resultRef: { key, bytes: data.length } };
  }

  /**
   * Reads a stored result (at most RESULT_MAX_BYTES), then removes it: a
   * result is delivered once. Null when it is gone (read already, or expired).
   */
  async take(key: string): Promise<Buffer | null> {
    const limit = this.deps.settings.maxBytes;
    let bytes: Buffer;
    try {
      const chunks: Buffer[] = [];
      let length = 0;
      for await (const chunk of await this.deps.store.get(key)) {
        length += (chunk as Buffer).length;
        if (length > limit) throw new Error(`result ${key} is larger than ${limit} bytes`);
        chunks.push(chunk as Buffer);
      }
      bytes = Buffer.concat(chunks, length);
    } catch (err) {
      if (isAppError(err) && err.status === 404) return null;
      throw err;
    }
    await this.remove(key).catch((err: unknown) => this.warn(err, key));
    return bytes;
  }

  /** Removes a result: its object, then its entry; the one that removed the entry gives the bytes back. */
  async remove(key: string): Promise<void> {
    await this.deps.store.remove(key);
    const entry = await this.deps.results.remove(key);
    if (entry) await this.giveBack(entry.organizationId, entry.bytes);
  }

  /** Removes results past their expiry (at most one batch); answers how many. */
  async sweep(): Promise<number> {
    const expired = await this.deps.results.expired(this.now(), SWEEP_BATCH);
    let removed = 0;
    for (const entry of expired) {
      await this.remove(entry.key);
      removed++;
    }
    return removed;
  }

  /**
   * Sweeps every min(60 s, RESULT_TTL_MS / 2) until stopped (the workers run
   * it). A failed sweep is logged and tried again at the next turn.
   */
  startSweeping(): { stop(): Promise<void> } {
    const every = Math.max(250, Math.min(SWEEP_EVERY_MS, this.deps.settings.ttlMs / 2));
    let running: Promise<void> | undefined;
    const timer = setInterval(() => {
      running ??= this.sweep()
        .then((n) => {
          if (n > 0) this.deps.logger.info({ removed: n }, 'expired job results removed');
        })
        .catch((err: unknown) =>
          this.deps.logger.warn({ err }, 'could not remove expired job results'),
        )
        .finally(() => {
          running = undefined;
        });
    }, every);
    timer.unref();
    return {
      // Waits for a sweep in progress, so the connections it uses can close after it.
      stop: async () => {
        clearInterval(timer);
        await running;
      },
    };
  }

  private async giveBack(organizationId: number, bytes: number): Promise<void> {
    await this.deps.usage.releaseResult(organizationId, bytes).catch((err: unknown) => {
      // The counter is off until reconcile sets it from the entries.
      this.deps.logger.warn({ err, organizationId }, 'could not give back a job result’s bytes');
    });
  }

  private warn(err: unknown, key: string): void {
    this.deps.logger.warn({ err, key }, 'could not remove a stored job result');
  }
}
