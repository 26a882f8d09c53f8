/**
 * PDF page rendering off the event loop, as HEIC decoding is (heic-pool.ts):
 * PDFium runs in WebAssembly on the thread that calls it, so the worker
 * runs it on threads of its own (pdf-thread.ts), on the pool of
 * thread-pool.ts:
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
import { Errors } from '@shared/errors';
import { decodeJobError } from '@shared/jobs';
import type { PdfInfo, PdfPagePixels, PdfPageRequest } from './pdf-page';
import type { PdfThreadAnswer, PdfThreadRequest } from './pdf-thread';
import type { TimeLimit } from './sharp';
import { copyForTransfer, runWithin, ThreadPool } from './thread-pool';

/** Renders PDF pages into RGBA pixels (see pdf-page.ts). */
export interface PdfRasterizer {
  render(input: Buffer, request: PdfPageRequest, signal?: AbortSignal): Promise<PdfPagePixels>;
  info(input: Buffer, signal?: AbortSignal): Promise<PdfInfo>;
  close(): Promise<void>;
}

const rasterizerFailed = (cause?: unknown) =>
  Errors.unreadable(
    'The PDF page cannot be rendered: the rasterizer failed',
    [{ message: 'the rasterizer failed' }],
    cause,
  );

interface PdfJob {
  input: Buffer;
  request: { kind: 'info' } | ({ kind: 'page' } & PdfPageRequest);
}

type PdfThreadResult = Exclude<PdfThreadAnswer, { error: string }>;

export class PdfThreadPool implements PdfRasterizer {
  private readonly pool: ThreadPool<PdfJob, PdfThreadAnswer, PdfThreadResult>;

  constructor(size: number) {
    this.pool = new ThreadPool({
      size,
      script: 'pdf-thread',
      name: 'PDF rasterizer',
      work: 'rasterizing',
      post: ({ input, request }) => {
        const copy = copyForTransfer(input);
        const message = { ...request, input: copy } as PdfThreadRequest;
        return { message, transfer: [copy.buffer] };
      },
      answer: (answer) =>
        'error' in answer
          ? { ok: false, error: decodeJobError(answer.error) ?? rasterizerFailed() }
          : { ok: true, value: answer },
      failed: rasterizerFailed,
    });
  }

  /** Threads started and alive (for tests and metrics). */
  get threadCount(): number {
    return this.pool.threadCount;
  }

  async render(
    input: Buffer,
    request: PdfPageRequest,
    signal?: AbortSignal,
  ): Promise<PdfPagePixels> {
    const answer = await this.pool.run({ input, request: { kind: 'page', ...request } }, signal);
    if (!('rgba' in answer)) throw rasterizerFailed();
    return answer;
  }

  async info(input: Buffer, signal?: AbortSignal): Promise<PdfInfo> {
    const answer = await this.pool.run({ input, request: { kind: 'info' } }, signal);
    if (!('info' in answer)) throw rasterizerFailed();
    return answer.info;
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}

/** A page rendered on the threads, stopped (its thread ended) when the job's time is up. */
export function renderPdfPageWithin(
  pool: PdfRasterizer,
  input: Buffer,
  request: PdfPageRequest,
  limit: TimeLimit,
): Promise<PdfPagePixels> {
  return runWithin(limit, (signal) => pool.render(input, request, signal));
}

/** A PDF's information read on the threads, stopped as a page render is. */
export function readPdfInfoWithin(
  pool: PdfRasterizer,
  input: Buffer,
  limit: TimeLimit,
): Promise<PdfInfo> {
  return runWithin(limit, (signal) => pool.info(input, signal));
}
