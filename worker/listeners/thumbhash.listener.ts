/**
 * Every new image record gets its placeholder (`thumbhash`): on
 * `media.created`, the image is read, rendered small and hashed
 * (worker/image/thumbhash.ts), and the hash set on the record, after the
 * upload's answer, never on its path. Idempotent: a redelivery finds the
 * placeholder set (and would hash the same bytes to the same value); a file
 * deleted before its turn is skipped. An image the adapter refuses (damaged, too
 * many pixels, a type it does not render) keeps no placeholder: that is
 * logged, not retried. Records made before the listener get theirs from the
 * operator's backfill (`npm run cli -- thumbhash:backfill`).
 */
import { isAppError } from '@shared/errors';
import type { DomainEvent } from '@shared/events/events';
import type { Listener } from './listener';

export const thumbhashListener: Listener = {
  name: 'thumbhash',
  events: ['media.created'],
  async handle(event, ctx) {
    if (event.type !== 'media.created') return;
    const { media } = (event as DomainEvent<'media.created'>).data;
    if (!media.mimetype.startsWith('image/')) return;
    // A file deleted before its turn (or that has one already: a redelivery) needs none.
    const record = await ctx.media.findById(media.organizationId, media.id);
    if (!record || record.thumbhash) return;
    try {
      // Through the worker's source cache: the first renders of a new image often follow its
      // upload at once (a srcset), and find its bytes there (docs/renders.md, "The source cache").
      const input = await ctx.results.readSource(record, ctx.limits.maxFileSize);
      const hash = await ctx.images.thumbhash(input, { signal: ctx.signal });
      if (!(await ctx.media.setThumbhash(media.id, hash))) {
        ctx.log.info({ mediaId: media.id }, 'record gone before its placeholder was set');
      }
    } catch (err) {
      // A refusal (4xx) will not change on a retry; anything else (storage, MongoDB) is retried.
      // The file's own fault (damaged, too large to decode), not the service's: info, its code
      // and reason, no stack.
      if (isAppError(err) && err.status < 500) {
        ctx.log.info(
          { mediaId: media.id, code: err.code, reason: err.message },
          'no placeholder for this image',
        );
        return;
      }
      throw err;
    }
  },
};
