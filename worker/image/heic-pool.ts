/**
 * HEIC decoding off the event loop. libheif-js decodes in
 * WebAssembly on the thread that calls it, about 0.1 s per megapixel, so on
 * the worker's event loop one large HEIC held up lock renewals, the other
 * job and /readyz for seconds. The pool runs decodes on worker threads
 * instead (heic-thread.ts), on the pool of thread-pool.ts:
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
import { Errors } from '@shared/errors';
import { decodeJobError } from '@shared/jobs';
import type { HeicAnswer, HeicRequest } from './heic-thread';
import type { TimeLimit } from './sharp';
import { copyForTransfer, runWithin, ThreadPool } from './thread-pool';

/** Decodes HEICs into the TIFF sharp reads (see heic.ts). */
export interface HeicDecoder {
  decode(input: Buffer, icc: Buffer | undefined, signal?: AbortSignal): Promise<Buffer>;
  close(): Promise<void>;
}

const decoderFailed = (cause?: unknown) =>
  Errors.unreadable(
    'The HEIC image cannot be decoded: the decoder failed',
    [{ message: 'the decoder failed' }],
    cause,
  );

interface HeicJob {
  input: Buffer;
  icc: Buffer | undefined;
}

export class HeicThreadPool implements HeicDecoder {
  private readonly pool: ThreadPool<HeicJob, HeicAnswer, Buffer>;

  constructor(size: number) {
    this.pool = new ThreadPool({
      size,
      script: 'heic-thread',
      name: 'HEIC decoder',
      work: 'decoding',
      post: ({ input, icc }) => {
        const copy = copyForTransfer(input);
        const message: HeicRequest = { input: copy, icc: icc ? new Uint8Array(icc) : null };
        return { message, transfer: [copy.buffer] };
      },
      answer: (answer) =>
        'tiff' in answer
          ? {
              ok: true,
              value: Buffer.from(
                answer.tiff.buffer,
                answer.tiff.byteOffset,
                answer.tiff.byteLength,
              ),
            }
          : { ok: false, error: decodeJobError(answer.error) ?? decoderFailed() },
      failed: decoderFailed,
    });
  }

  /** Threads started and alive (for tests and metrics). */
  get threadCount(): number {
    return this.pool.threadCount;
  }

  /** Decodes a thread finished (with an image or an error); stopped ones are not counted. */
  get decodesAnswered(): number {
    return this.pool.answered;
  }

  decode(input: Buffer, icc: Buffer | undefined, signal?: AbortSignal): Promise<Buffer> {
    return this.pool.run({ input, icc }, signal);
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}

/**
 * A HEIC decoded on the decoding threads, stopped (its thread ended) when the
 * job's signal aborts or the time left runs out, whichever comes first.
 */
export function decodeHeicWithin(
  heic: HeicDecoder,
  input: Buffer,
  meta: { icc?: Buffer | undefined },
  limit: TimeLimit,
): Promise<Buffer> {
  return runWithin(limit, (signal) => heic.decode(input, meta.icc, signal));
}
