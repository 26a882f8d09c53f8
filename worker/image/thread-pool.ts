/**
 * The worker-thread pool the WebAssembly codecs run on (heic-pool.ts,
 * pdf-pool.ts), so that a long decode or render never holds up the worker's
 * event loop. This file owns the mechanics, the same for every codec:
 *
 *  - at most `size` threads, each running one job at a time, started on the
 *    first job and kept for the next; jobs beyond that wait in line, and a
 *    job whose signal aborts while it waits leaves the line at once (no
 *    thread is ever started or handed to a job that has stopped);
 *  - a thread holds the process open only while it works (idle threads are
 *    unref'd), and `close()` ends them all and fails the waiting jobs;
 *  - a thread that dies (a WebAssembly abort, out of memory) fails its job
 *    with the pool's failure error and is replaced on the next one; an
 *    aborted job (the job's time is up) ends its thread, which is the only
 *    way to stop it.
 *
 * What a request and an answer look like, and what a failure is called, is
 * the user's (see ThreadPoolOptions).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { type TransferListItem, Worker } from 'node:worker_threads';
import { timeoutError, type TimeLimit } from './sharp';

/** An answer from a thread, as the caller sees it: a value or the error it stands for. */
export type ThreadOutcome<Out> = { ok: true; value: Out } | { ok: false; error: Error };

export interface ThreadPoolOptions<Req, Ans, Out> {
  /** At most this many threads (a positive integer). */
  size: number;
  /** The thread's file beside this one, without extension (e.g. 'heic-thread'). */
  script: string;
  /** What the pool is, in error messages ("the HEIC decoder is closed"). */
  name: string;
  /** What its threads do, in error messages ("the decoding thread exited"). */
  work: string;
  /** The message posted to the thread for a request, and the buffers it transfers. */
  post: (request: Req) => { message: unknown; transfer: TransferListItem[] };
  /** A thread's answer mapped to a value or an error. */
  answer: (answer: Ans) => ThreadOutcome<Out>;
  /** The error a job fails with when its thread fails or dies. */
  failed: (cause?: unknown) => Error;
}

/**
 * A copy of the input to transfer to a thread: the caller's buffer may be
 * pooled memory, which cannot be transferred.
 */
export function copyForTransfer(input: Buffer): Uint8Array<ArrayBuffer> {
  const copy = new Uint8Array(input.byteLength);
  copy.set(input);
  return copy;
}

/**
 * The thread's file beside this one: `<script>.js` in the build. From the
 * TypeScript sources (tests, `npm run cli`) a one-line bootstrap loads it
 * through tsx (a devDependency), which also resolves the path aliases.
 */
function threadEntry(script: string): { code: string; eval: boolean } {
  const built = join(__dirname, `${script}.js`);
  if (existsSync(built)) return { code: built, eval: false };
  const source = JSON.stringify(join(__dirname, `${script}.ts`));
  return { code: `require('tsx/cjs/api').require(${source}, ${source});`, eval: true };
}

/** A job waiting for a thread. */
interface Waiter {
  resolve(thread: Worker): void;
  reject(err: Error): void;
}

export class ThreadPool<Req, Ans, Out = Ans> {
  private readonly idle: Worker[] = [];
  private readonly threads = new Set<Worker>();
  private readonly waiting: Waiter[] = [];
  private closed = false;
  private answeredCount = 0;

  constructor(private readonly options: ThreadPoolOptions<Req, Ans, Out>) {
    const { size } = options;
    if (!Number.isInteger(size) || size < 1) throw new TypeError('size must be a positive integer');
  }

  /** Threads started and alive (for tests and metrics). */
  get threadCount(): number {
    return this.threads.size;
  }

  /** Requests a thread answered (a value or an error), not counting the ones stopped. */
  get answered(): number {
    return this.answeredCount;
  }

  /** Runs one request on a thread (waiting for one when all are busy). */
  async run(request: Req, signal?: AbortSignal): Promise<Out> {
    signal?.throwIfAborted();
    const thread = await this.acquire(signal);
    try {
      return await this.runOn(thread, request, signal);
    } finally {
      this.release(thread);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    // Jobs still waiting for a thread fail now rather than wait forever.
    for (const waiter of this.waiting.splice(0)) waiter.reject(this.closedError());
    const threads = [...this.threads];
    this.threads.clear();
    this.idle.length = 0;
    await Promise.all(threads.map((t) => t.terminate()));
  }

  private closedError(): Error {
    return new Error(`the ${this.options.name} is closed`);
  }

  private acquire(signal?: AbortSignal): Promise<Worker> {
    if (this.closed) return Promise.reject(this.closedError());
    const ready = this.idle.pop();
    if (ready) return Promise.resolve(ready);
    if (this.threads.size < this.options.size) return Promise.resolve(this.start());
    return new Promise((resolve, reject) => {
      // Stopped while it waits: out of the line now, not when a thread comes free (which
      // would then be started, or kept from the next job, for nothing).
      const onAbort = () => {
        const at = this.waiting.indexOf(waiter);
        if (at >= 0) this.waiting.splice(at, 1);
        reject(signal!.reason as Error);
      };
      const waiter: Waiter = {
        resolve: (thread) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(thread);
        },
        reject: (err) => {
          signal?.removeEventListener('abort', onAbort);
          reject(err);
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(waiter);
    });
  }

  /** Hands the thread to the next waiting job, or parks it (unref'd) when it is still alive. */
  private release(thread: Worker): void {
    if (!this.threads.has(thread)) {
      // It died or was ended: a waiting job gets a new thread in its place.
      const next = this.waiting.shift();
      if (next && !this.closed) next.resolve(this.start());
      return;
    }
    const next = this.waiting.shift();
    if (next) return next.resolve(thread);
    thread.unref();
    this.idle.push(thread);
  }

  private start(): Worker {
    const entry = threadEntry(this.options.script);
    const thread = new Worker(entry.code, {
      eval: entry.eval,
      env: {},
      stdout: false,
      stderr: false,
    });
    thread.unref();
    this.threads.add(thread);
    const forget = () => {
      this.threads.delete(thread);
      const at = this.idle.indexOf(thread);
      if (at >= 0) this.idle.splice(at, 1);
    };
    thread.once('exit', forget);
    // An idle thread that fails is simply forgotten (a running job sees it too, below).
    thread.on('error', forget);
    return thread;
  }

  private runOn(thread: Worker, request: Req, signal?: AbortSignal): Promise<Out> {
    const { failed, work } = this.options;
    return new Promise<Out>((resolve, reject) => {
      const cleanup = () => {
        thread.off('message', onMessage);
        thread.off('error', onError);
        thread.off('exit', onExit);
        signal?.removeEventListener('abort', onAbort);
        thread.unref();
      };
      const onMessage = (answer: Ans) => {
        cleanup();
        this.answeredCount += 1;
        const outcome = this.options.answer(answer);
        if (outcome.ok) resolve(outcome.value);
        else reject(outcome.error);
      };
      const onError = (err: Error) => {
        cleanup();
        this.threads.delete(thread);
        void thread.terminate();
        reject(failed(err));
      };
      const onExit = (code: number) => {
        cleanup();
        reject(failed(new Error(`the ${work} thread exited with code ${code}`)));
      };
      const onAbort = () => {
        cleanup();
        // The only way to stop a running job: end its thread (the next job starts another).
        this.threads.delete(thread);
        void thread.terminate();
        reject(signal!.reason as Error);
      };
      // Aborted as it was handed a thread: nothing is sent (an abort listener added now
      // would never fire, and the work would run to its end on a kept thread).
      if (signal?.aborted) {
        return reject(signal.reason as Error);
      }
      thread.on('message', onMessage);
      thread.once('error', onError);
      thread.once('exit', onExit);
      signal?.addEventListener('abort', onAbort, { once: true });
      // While it works, the thread keeps the process open (an answer is awaited).
      thread.ref();
      const { message, transfer } = this.options.post(request);
      thread.postMessage(message, transfer);
    });
  }
}

/**
 * Work on the threads stopped (its thread ended) when the job's signal aborts
 * or the time left runs out, whichever comes first; the timeout is reported
 * as the job's 422 PROCESSING_TIMEOUT.
 */
export async function runWithin<T>(
  limit: TimeLimit,
  work: (signal: AbortSignal | undefined) => Promise<T>,
): Promise<T> {
  const signals = [
    limit.signal,
    limit.timeoutMs === undefined ? undefined : AbortSignal.timeout(Math.max(1, limit.timeoutMs)),
  ].filter((s): s is AbortSignal => s !== undefined);
  const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
  try {
    return await work(signal);
  } catch (err) {
    if (signal?.aborted && err === signal.reason) throw timeoutError(err, limit) ?? err;
    throw err;
  }
}
