/**
 * Every new PDF record gets its page count (`pages`) within seconds of its
 * upload: on `media.created`, the PDF is read and opened by PDFium on a PDF
 * thread (worker/image/pdf-pool.ts: the same reader renders and metadata
 * use, so every count agrees), within the job's time limit, and the count
 * set on the record, after the upload's answer, never on its path. A render
 * or a metadata request that comes first sets it the same way (once: the
 * first reader wins). Idempotent: a redelivery finds `pages` set; a file
 * deleted before its turn is skipped. A PDF PDFium refuses (damaged,
 * encrypted, a bomb) keeps no count: that is logged, not retried.
 */
import { isAppError } from '@shared/errors';
import type { DomainEvent } from '@shared/events/events';
import { formatOfMime } from '@shared/media/formats';
import type { Listener } from './listener';

export const pdfPagesListener: Listener = {
  name: 'pdf-pages',
  events: ['media.created'],
  async handle(event, ctx) {
    if (event.type !== 'media.created') return;
    const { media } = (event as DomainEvent<'media.created'>).data;
    if (formatOfMime(media.mimetype)?.kind !== 'pdf') return;
    const record = await ctx.media.findById(media.organizationId, media.id);
    // Gone, counted already (a redelivery, or a render came first), or quarantined: nothing to do.
    if (!record || record.pages !== undefined || record.scanStatus === 'infected') return;
    try {
      // Read directly, not through the worker's source cache: every uploaded PDF would be kept in
      // the worker's memory for renders most never get (a page render reads it once when asked).
      const input = await ctx.results.read(record.key, ctx.limits.maxFileSize);
      const info = await ctx.images.readPdfInfo(input, { signal: ctx.signal });
      await ctx.media.setPages(record.organizationId, record.key, info.pages);
    } catch (err) {
      // A refusal (4xx) will not change on a retry; anything else (storage, MongoDB) is retried.
      // The file's own fault (damaged, too large to decode), not the service's: info, its code
      // and reason, no stack.
      if (isAppError(err) && err.status < 500) {
        ctx.log.info(
          { mediaId: media.id, code: err.code, reason: err.message },
          'no page count for this PDF',
        );
        return;
      }
      throw err;
    }
  },
};
