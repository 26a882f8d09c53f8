/**
 * A HEIC decoding thread (started by heic-pool.ts): decodes one HEIC at a time
 * into the TIFF sharp reads (heic.ts), so the decoder's seconds of WebAssembly
 * run here and not on the worker's event loop. Each message is one HEIC; the
 * answer carries the TIFF's memory (transferred, not copied) or the AppError,
 * encoded as a job failure is.
 */
import { parentPort } from 'node:worker_threads';
import { AppError, Errors } from '@shared/errors';
import { encodeJobError } from '@shared/jobs';
import { decodeHeic } from './heic';

/** What the pool sends. */
export interface HeicRequest {
  input: Uint8Array;
  icc: Uint8Array | null;
}

/** What the thread answers: the TIFF, or the error as `encodeJobError` writes it. */
export type HeicAnswer = { tiff: Uint8Array } | { error: string };

const port = parentPort;
if (!port) throw new Error('heic-thread.ts runs as a worker thread (see heic-pool.ts)');

port.on('message', ({ input, icc }: HeicRequest) => {
  let answer: HeicAnswer;
  let transfer: ArrayBuffer[] = [];
  try {
    const tiff = decodeHeic(
      Buffer.from(input.buffer, input.byteOffset, input.byteLength),
      icc ? Buffer.from(icc.buffer, icc.byteOffset, icc.byteLength) : undefined,
    );
    // Transfer only memory the TIFF owns whole (a small Buffer can share Node's pool).
    const own =
      tiff.byteOffset === 0 && tiff.byteLength === tiff.buffer.byteLength
        ? tiff
        : Uint8Array.prototype.slice.call(tiff);
    answer = { tiff: own };
    transfer = [own.buffer as ArrayBuffer];
  } catch (err) {
    const appError =
      err instanceof AppError ? err : Errors.unreadable('The HEIC image cannot be decoded');
    answer = { error: encodeJobError(appError) };
  }
  port.postMessage(answer, transfer);
});
