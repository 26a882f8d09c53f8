/**
 * HEIC decoding off the event loop. libheif-js decodes in
 * WebAssembly on the thread that calls it, about 0.1 s per megapixel, so on
 * the worker's event loop one large HEIC held up lock renewals, the other
 * job and /readyz for seconds. The pool runs decodes on worker threads
 * instead (heic-thread.ts):
 *
 *  - at most `size` threads (the image queue's concurrency), each decoding
 *    one HEIC at a time, started on the first HEIC and kept for the next;
 *  - a thread holds the process open only while it decodes (idle threads
 *    are unref'd), and `close()` ends them all;
 *  - the input is copied to the thread (the caller's buffer may be pooled
 *    memory) and the TIFF comes back transferred, not copied;
 *  - a thread that dies (a WebAssembly abort, out of memory) fails its decode
 *    with 422 and is replaced on the next one; an aborted decode (the job's
 *    time is up) ends its thread, which is the only way to stop it.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { Errors } from '@shared/errors';
import { decodeJobError } from '@shared/jobs';
import type { HeicAnswer, HeicRequest } from './heic-thread';
import { timeoutError, type TimeLimit } from './sharp';

/** Decodes HEICs into the TIFF sharp reads (see heic.ts). */
export interface HeicDecoder {
  decode(input: Buffer, icc: Buffer | undefined, signal?: AbortSignal): Promise<Buffer>;
  close(): Promise<void>;
}

/**
 * The thread's file beside this one: heic-thread.js in the build. From the
 * TypeScript sources (tests, `npm run cli`) a one-line bootstrap loads it
 * through tsx (a devDependency), which also resolves the path aliases.
 */
function threadEntry(): { code: string; eval: boolean } {
  const built = join(__dirname, 'heic-thread.js');
  if (existsSync(built)) return { code: built, eval: false };
  const source = JSON.stringify(join(__dirname, 'heic-thread.ts'));
  return { code: `require('tsx/cjs/api').require(${source}, ${source});`, eval: true };
}

const decoderFailed = (cause?: unknown) =>
  Errors.unreadable(
    'The HEIC image cannot be decoded: the decoder failed',
    [{ message: 'the decoder failed' }],
    cause,
  );

export class HeicThreadPool implements HeicDecoder {
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

  async decode(input: Buffer, icc: Buffer | undefined, signal?: AbortSignal): Promise<Buffer> {
    signal?.throwIfAborted();
    const thread = await this.acquire();
    try {
      return await this.run(thread, input, icc, signal);
    } finally {
      this.release(thread);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    // Decodes still waiting for a thread fail now rather than wait forever.
    for (const waiter of this.waiting.splice(0))
      waiter.reject(new Error('the HEIC decoder is closed'));
    const threads = [...this.threads];
    this.threads.clear();
    this.idle.length = 0;
    await Promise.all(threads.map((t) => t.terminate()));
  }

  private acquire(): Promise<Worker> {
    if (this.closed) return Promise.reject(new Error('the HEIC decoder is closed'));
    const ready = this.idle.pop();
    if (ready) return Promise.resolve(ready);
    if (this.threads.size < this.size) return Promise.resolve(this.start());
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  /** Hands the thread to the next waiting decode, or parks it (unref'd) when it is still alive. */
  private release(thread: Worker): void {
    if (!this.threads.has(thread)) {
      // It died or was ended: a waiting decode gets a new thread in its place.
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
    // An idle thread that fails is simply forgotten (a running decode sees it too, below).
    thread.on('error', forget);
    return thread;
  }

  private run(
    thread: Worker,
    input: Buffer,
    icc: Buffer | undefined,
    signal?: AbortSignal,
  ): Promise<Buffer> {
    return new Promise<Buffer>((resolve, reject) => {
      const cleanup = () => {
        thread.off('message', onMessage);
        thread.off('error', onError);
        thread.off('exit', onExit);
        signal?.removeEventListener('abort', onAbort);
        thread.unref();
      };
      const onMessage = (answer: HeicAnswer) => {
        cleanup();
        if ('tiff' in answer) {
          resolve(Buffer.from(answer.tiff.buffer, answer.tiff.byteOffset, answer.tiff.byteLength));
        } else {
          reject(decodeJobError(answer.error) ?? decoderFailed());
        }
      };
      const onError = (err: Error) => {
        cleanup();
        this.threads.delete(thread);
        void thread.terminate();
        reject(decoderFailed(err));
      };
      const onExit = (code: number) => {
        cleanup();
        reject(decoderFailed(new Error(`the decoding thread exited with code ${code}`)));
      };
      const onAbort = () => {
        cleanup();
        // The only way to stop a running decode: end its thread (the next decode starts another).
        this.threads.delete(thread);
        void thread.terminate();
        reject(signal!.reason as Error);
      };
      thread.on('message', onMessage);
      thread.once('error', onError);
      thread.once('exit', onExit);
      signal?.addEventListener('abort', onAbort, { once: true });
      // While it decodes, the thread keeps the process open (an answer is awaited).
      thread.ref();
      const copy = new Uint8Array(input.byteLength);
      copy.set(input);
      const request: HeicRequest = { input: copy, icc: icc ? new Uint8Array(icc) : null };
      thread.postMessage(request, [copy.buffer]);
    });
  }
}

/**
 * A HEIC decoded on the decoding threads, stopped (its thread ended) when the
 * job's signal aborts or the time left runs out, whichever comes first.
 */
export async function decodeHeicWithin(
  heic: HeicDecoder,
  input: Buffer,
  meta: { icc?: Buffer | undefined },
  limit: TimeLimit,
): Promise<Buffer> {
  const signals = [
    limit.signal,
    limit.timeoutMs === undefined ? undefined : AbortSignal.timeout(Math.max(1, limit.timeoutMs)),
  ].filter((s): s is AbortSignal => s !== undefined);
  const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
  try {
    return await heic.decode(input, meta.icc, signal);
  } catch (err) {
    if (signal?.aborted && err === signal.reason) throw timeoutError(err, limit) ?? err;
    throw err;
  }
}
