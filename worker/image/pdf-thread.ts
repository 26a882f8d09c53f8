/**
 * A PDF rasterizing thread (started by pdf-pool.ts): renders one page or reads
 * one document's information at a time (pdf-page.ts), so PDFium's WebAssembly runs here and not on the
 * worker's event loop. Each message is one page; the answer carries the
 * page's RGBA memory (transferred, not copied) or the AppError, encoded as a
 * job failure is. A thread whose WebAssembly memory has grown past
 * `PDF_HEAP_RESET_BYTES` exits after answering (the memory never shrinks;
 * the pool starts another for the next page).
 */
import { parentPort } from 'node:worker_threads';
import { AppError, Errors } from '@shared/errors';
import { encodeJobError } from '@shared/jobs';
import {
  pdfiumHeapBytes,
  readPdfInfo,
  renderPdfPage,
  type PdfInfo,
  type PdfPageRequest,
} from './pdf-page';

/** A thread whose PDFium memory has grown past this ends after its answer. */
export const PDF_HEAP_RESET_BYTES = 256 * 1024 * 1024;

/** A page to render, or (`info`) the document's information to read. */
export type PdfThreadRequest =
  ({ kind: 'page'; input: Uint8Array } & PdfPageRequest) | { kind: 'info'; input: Uint8Array };

export type PdfThreadAnswer =
  | { rgba: Uint8Array; width: number; height: number; pages: number }
  | { info: PdfInfo }
  | { error: string };

const port = parentPort;
if (!port) throw new Error('pdf-thread.ts runs as a worker thread (see pdf-pool.ts)');

port.on('message', (request: PdfThreadRequest) => {
  void (async () => {
    let answer: PdfThreadAnswer;
    let transfer: ArrayBuffer[] = [];
    try {
      if (request.kind === 'info') {
        answer = { info: await readPdfInfo(request.input) };
      } else {
        const { input, kind: _kind, ...page } = request;
        const out = await renderPdfPage(input, page);
        const own =
          out.rgba.byteOffset === 0 && out.rgba.byteLength === out.rgba.buffer.byteLength
            ? out.rgba
            : out.rgba.slice();
        answer = { ...out, rgba: own };
        transfer = [own.buffer as ArrayBuffer];
      }
    } catch (err) {
      const appError =
        err instanceof AppError ? err : Errors.unreadable('The PDF page cannot be rendered');
      answer = { error: encodeJobError(appError) };
    }
    port.postMessage(answer, transfer);
    if ((await pdfiumHeapBytes()) > PDF_HEAP_RESET_BYTES) process.exit(0);
  })();
});
