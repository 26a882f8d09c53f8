/**
 * Slow and piled-up uploads. Each multipart upload holds a part buffer
 * (`S3_PART_SIZE`) for as long as it streams, so each token may have
 * `MAX_UPLOADS_IN_FLIGHT` uploads in flight on this API process; one more is
 * refused at once with `429 TOO_MANY_UPLOADS` and `Retry-After` (its body
 * unread, the connection closed after the answer). Counted per process, not
 * in Redis: what it bounds is this process's memory, a count dies with its
 * process (nothing to leak when a replica is killed), and it costs no round
 * trip. Across N replicas a token may have N × the cap in flight.
 *
 * It guards the routes that declare a streamed form (api/routes/route-table.ts),
 * in their own chains: whatever spelling of the path Express routes there.
 * (The other half of the guard, the idle timeout `UPLOAD_IDLE_TIMEOUT_MS`, is
 * handed to those routes' form reader by the route table.)
 */
import type { RequestHandler } from 'express';
import { Errors } from '@shared/errors';
import { closeAfterAnswer } from '../forms/multipart-form';
import { principalOf } from '../http/request-context';

export function uploadGuard(options: { maxInFlight: number }): RequestHandler {
  const inFlight = new Map<string, number>();
  return (req, res, next) => {
    const { tokenId } = principalOf(req);
    const count = inFlight.get(tokenId) ?? 0;
    if (count >= options.maxInFlight) {
      closeAfterAnswer(req); // the body is not read
      return next(Errors.tooManyUploads(options.maxInFlight));
    }
    inFlight.set(tokenId, count + 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      const left = (inFlight.get(tokenId) ?? 1) - 1;
      if (left > 0) inFlight.set(tokenId, left);
      else inFlight.delete(tokenId);
    };
    res.once('finish', release);
    res.once('close', release);
    next();
  };
}
