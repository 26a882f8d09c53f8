/**
 * The peer process of the convert, render and merge benchmarks (see lib/peer.ts):
 * takes requests over IPC and answers with how long each took.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { loadConfig } from '../shared/config';
import { createLogger } from '../shared/logger';
import type { ConvertFormat } from '../shared/media/formats';
import type { PdfInput } from '../worker/pdf/pdf.adapter';
import { createObjectStore } from '../shared/storage/create-object-store';
import { createAdapters } from '../worker/adapters';
import type { PeerReply, PeerRequest } from './lib/peer';
import { peakRss, resetPeakRss, rss } from './lib/proc';

const config = loadConfig(process.env);
const logger = createLogger({ level: 'warn' });
// The worker's own storage and adapters, built and tuned the same way.
const store = createObjectStore(config, logger);
const { images, pdfs: pdfOps } = createAdapters(config, logger);
let pdfs: PdfInput[] = [];

async function handle(request: PeerRequest): Promise<PeerReply> {
  switch (request.op) {
    case 'convert': {
      const t = performance.now();
      const chunks: Buffer[] = [];
      for await (const c of await store.get(request.key)) chunks.push(c as Buffer);
      const result = await images.convert(
        Buffer.concat(chunks),
        request.format as ConvertFormat,
        {},
      );
      await store.put(`bench-peer/${randomUUID()}.${result.ext}`, result.data, {
        contentType: result.mime,
      });
      return { ms: performance.now() - t };
    }
    case 'render': {
      const t = performance.now();
      const chunks: Buffer[] = [];
      for await (const c of await store.get(request.key)) chunks.push(c as Buffer);
      const result = await images.render(Buffer.concat(chunks), request.options, {});
      await store.put(`bench-peer/${randomUUID()}.${request.options.format}`, result.data, {
        contentType: result.mime,
      });
      return { ms: performance.now() - t };
    }
    case 'load-pdfs':
      pdfs = request.paths.map((path) => ({ name: path, data: readFileSync(path) }));
      return { ms: 0 };
    case 'merge': {
      const rssBefore = rss(process.pid);
      resetPeakRss(process.pid);
      const t = performance.now();
      const merged = await pdfOps.merge(pdfs);
      return {
        ms: performance.now() - t,
        pages: merged.pages,
        rssBefore,
        peakRss: peakRss(process.pid),
      };
    }
  }
}

process.on('message', (message: { id: number; request: PeerRequest }) => {
  handle(message.request).then(
    (reply) => process.send!({ id: message.id, ok: true, reply }),
    (err: unknown) =>
      process.send!({
        id: message.id,
        ok: false,
        error: err instanceof Error ? (err.stack ?? err.message) : String(err),
      }),
  );
});
process.on('disconnect', () => process.exit(0));
process.send!({ ready: true });
