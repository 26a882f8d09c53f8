/**
 * PDF page rendering off the event loop, as HEIC decoding is (heic-pool.ts):
 * PDFium runs in WebAssembly on the thread that calls it, so the worker
 * runs it on threads of its own (pdf-thread.ts):
 *
 *  - at most `size` threads (the image queue's concurrency), each rendering
 *    one page at a time, started on the first PDF page and kept for the next;
 *  - a thread holds the process open only while it renders (idle threads are
 *    unref'd), and `close()` ends them all;
 *  - the input is copied to the thread and the pixels come back transferred;
 *  - a thread that dies (a WebAssembly abort, out of memory, or its memory
 *    reset) fails its page with 422 and is replaced on the next one; an
 *    aborted render (the job's time is up) ends its thread, the only way to
 *    stop PDFium.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { Errors } from '@shared/errors';
import { decodeJobError } from '@shared/jobs';
import type { PdfInfo, PdfPagePixels, PdfPageRequest } from './pdf-page';
import type { PdfThreadAnswer, PdfThreadRequest } from './pdf-thread';
import { timeoutError, type TimeLimit } from './sharp';

/** Renders PDF pages into RGBA pixels (see pdf-page.ts). */
export interface PdfRasterizer {
  render(input: Buffer, request: PdfPageRequest, signal?: AbortSignal): Promise<PdfPagePixels>;
  info(input: Buffer, signal?: AbortSignal): Promise<PdfInfo>;
  close(): Promise<void>;
}

/** The thread's file beside this one (pdf-thread.js in the build; through tsx from the sources). */
function threadEntry(): { code: string; eval: boolean } {
  const built = join(__dirname, 'pdf-thread.js');
  if (existsSync(built)) return { code: built, eval: false };
  const source = JSON.stringify(join(__dirname, 'pdf-thread.ts'));
  return { code: `require('tsx/cjs/api').require(${source}, ${source});`, eval: true };
}

const rasterizerFailed = (cause?: unknown) =>
  Errors.unreadable(
    'The PDF page cannot be rendered: the rasterizer failed',
    [{ message: 'the rasterizer failed' }],
    cause,
  );

export class PdfThreadPool implements PdfRasterizer {
  private readonly idle: Worker[] = [];
  private readonly threads = new Set<Worker>();
  private readonly waiting: { resolve(thread: Worker): void; reject(err: Error): void }[] = [];
  private closed = false;

  constructor(private readonly size: number) {
    if (!Number.isInteger(size) || size < 1) throw new TypeError('size must be a positive integer');
  }

  /** Threads started and alive (for tests and metrics). */
  get threadCount(): number {
    return this.threads.size;
  }

  async render(
    input: Buffer,
    request: PdfPageRequest,
    signal?: AbortSignal,
  ): Promise<PdfPagePixels> {
    const answer = await this.ask(input, { kind: 'page', ...request }, signal);
    if (!('rgba' in answer)) throw rasterizerFailed();
    return answer;
  }

  async info(input: Buffer, signal?: AbortSignal): Promise<PdfInfo> {
    const answer = await this.ask(input, { kind: 'info' }, signal);
    if (!('info' in answer)) throw rasterizerFailed();
    return answer.info;
  }

  private async ask(
    input: Buffer,
    request: { kind: 'info' } | ({ kind: 'page' } & PdfPageRequest),
    signal?: AbortSignal,
  ): Promise<Exclude<PdfThreadAnswer, { error: string }>> {
    signal?.throwIfAborted();
    const thread = await this.acquire();
    try {
      return await this.run(thread, input, request, signal);
    } finally {
      this.release(thread);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const waiter of this.waiting.splice(0)) {
      waiter.reject(new Error('the PDF rasterizer is closed'));
    }
    const threads = [...this.threads];
    this.threads.clear();
    this.idle.length = 0;
    await Promise.all(threads.map((t) => t.terminate()));
  }

  private acquire(): Promise<Worker> {
    if (this.closed) return Promise.reject(new Error('the PDF rasterizer is closed'));
    const ready = this.idle.pop();
    if (ready) return Promise.resolve(ready);
    if (this.threads.size < this.size) return Promise.resolve(this.start());
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  private release(thread: Worker): void {
    if (!this.threads.has(thread)) {
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
    const entry = threadEntry();
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
    thread.on('error', forget);
    return thread;
  }

  private run(
    thread: Worker,
    input: Buffer,
    request: { kind: 'info' } | ({ kind: 'page' } & PdfPageRequest),
    signal?: AbortSignal,
  ): Promise<Exclude<PdfThreadAnswer, { error: string }>> {
    return new Promise((resolve, reject) => {
      const cleanup = () => {
        thread.off('message', onMessage);
        thread.off('error', onError);
        thread.off('exit', onExit);
        signal?.removeEventListener('abort', onAbort);
        thread.unref();
      };
      const onMessage = (answer: PdfThreadAnswer) => {
        cleanup();
        if ('error' in answer) reject(decodeJobError(answer.error) ?? rasterizerFailed());
        else resolve(answer);
      };
      const onError = (err: Error) => {
        cleanup();
        this.threads.delete(thread);
        void thread.terminate();
        reject(rasterizerFailed(err));
      };
      const onExit = (code: number) => {
        cleanup();
        reject(rasterizerFailed(new Error(`the rasterizing thread exited with code ${code}`)));
      };
      const onAbort = () => {
        cleanup();
        this.threads.delete(thread);
        void thread.terminate();
        reject(signal!.reason as Error);
      };
      // Aborted while it waited for a thread: nothing is sent.
      if (signal?.aborted) return reject(signal.reason as Error);
      thread.on('message', onMessage);
      thread.once('error', onError);
      thread.once('exit', onExit);
      signal?.addEventListener('abort', onAbort, { once: true });
      thread.ref();
      const copy = new Uint8Array(input.byteLength);
      copy.set(input);
      const message = { ...request, input: copy } as PdfThreadRequest;
      thread.postMessage(message, [copy.buffer]);
    });
  }
}

/** A page rendered on the threads, stopped (its thread ended) when the job's time is up. */
export function renderPdfPageWithin(
  pool: PdfRasterizer,
  input: Buffer,
  request: PdfPageRequest,
  limit: TimeLimit,
): Promise<PdfPagePixels> {
  return within(limit, (signal) => pool.render(input, request, signal));
}

/** A PDF's information read on the threads, stopped as a page render is. */
export function readPdfInfoWithin(
  pool: PdfRasterizer,
  input: Buffer,
  limit: TimeLimit,
): Promise<PdfInfo> {
  return within(limit, (signal) => pool.info(input, signal));
}

async function within<T>(
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
