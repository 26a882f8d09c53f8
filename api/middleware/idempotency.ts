/**
 * `Idempotency-Key` on POSTs (the IETF httpapi draft's header), in each POST
 * route's chain after its scope check (api/routes/route-table.ts): the first
 * request with a key runs; a repeat with the same key and the same request
 * within 24 h gets the first answer again (status, body, `Location`, with
 * `Idempotent-Replayed: true`) and nothing runs twice; the same key with a
 * different request is 422; a repeat while the first still runs is 409.
 * Keys are per token; entries live in Redis (api/services/idempotency.service.ts);
 * without Redis a request carrying the header is refused (503) rather than
 * run unprotected.
 *
 * The outcome is kept when the handler answers, before the answer is written
 * (the answer waits for Redis to take it, at most about a second): a client
 * that drops its connection once its body is sent, or retries the moment
 * the answer arrives, gets the first answer replayed. A request that queued
 * a job (convert, merge) tells its claim (its caller's `onJobQueued`, made
 * from its context: api/http/request-context.ts); a retry then gets the
 * job's outcome (its record once made; meanwhile the same 504 or 202 with
 * the same job id), never a second job.
 *
 * The request's fingerprint (method, path, query, media type, body) is
 * computed as its bytes arrive, whoever reads them (`tapRequestBody`, which
 * must run before anything reads the body); a multipart body is taken without
 * its boundary, which clients choose anew on every try. Only successes (and
 * queued jobs) are kept: after a refusal or a failure the key is free again.
 */
import { createHash, type Hash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Request, RequestHandler, Response } from 'express';
import { Errors } from '@shared/errors';
import type { Logger } from '@shared/logger';
import { closeAfterAnswer } from '../forms/multipart-form';
import { respondToJob } from '../http/job-answer';
import { contextOf, principalOf } from '../http/request-context';
import type { Claim, IdempotencyService } from '../services/idempotency.service';

const HEADER = 'idempotency-key';
const VALID_KEY = /^[\x21-\x7e]{1,255}$/;

interface Tap {
  hash: Hash;
  ended: Promise<void>;
  /** The boundary remover of a multipart body (it holds back a partial match between chunks). */
  flush(): void;
}

/** The tap of each keyed request (this module's own: nothing else reads it). */
const taps = new WeakMap<IncomingMessage, Tap>();

/**
 * Hashes the body of a POST that carries `Idempotency-Key` as the HTTP
 * parser delivers it. Must be the first middleware: Express runs it within
 * the request event, before any byte of the body is pushed.
 */
export const tapRequestBody: RequestHandler = (req, _res, next) => {
  if (req.method === 'POST' && req.headers[HEADER] !== undefined) tap(req);
  next();
};

function tap(req: IncomingMessage): void {
  const hash = createHash('sha256');
  const boundary = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(req.headers['content-type'] ?? '');
  const remove = boundary ? Buffer.from(`--${boundary[1] ?? boundary[2]}`) : undefined;
  let held = Buffer.alloc(0);
  const write = (chunk: Buffer) => {
    if (!remove) return void hash.update(chunk);
    // Every occurrence of the boundary delimiter is left out; a partial match at the end waits.
    let data = held.length ? Buffer.concat([held, chunk]) : chunk;
    for (let at = data.indexOf(remove); at >= 0; at = data.indexOf(remove)) {
      hash.update(data.subarray(0, at));
      data = data.subarray(at + remove.length);
    }
    const keep = Math.min(data.length, remove.length - 1);
    hash.update(data.subarray(0, data.length - keep));
    held = Buffer.from(data.subarray(data.length - keep));
  };
  let resolveEnded!: () => void;
  const ended = new Promise<void>((resolve) => (resolveEnded = resolve));
  const push = req.push.bind(req);
  req.push = (chunk: unknown, encoding?: BufferEncoding) => {
    if (chunk === null) resolveEnded();
    else if (Buffer.isBuffer(chunk)) write(chunk);
    return push(chunk, encoding);
  };
  taps.set(req, { hash, ended, flush: () => void hash.update(held) });
}

/**
 * The request as a fingerprint: what must match for a repeat to be "the same
 * request". The route stands for the path (any spelling Express routes to it).
 */
function fingerprintOf(req: Request, tap: Tap): string {
  tap.flush();
  const url = new URL(req.originalUrl, 'http://x');
  const query = url.searchParams;
  query.sort();
  const route = (req.route as { path?: unknown } | undefined)?.path;
  const path = typeof route === 'string' ? [route, req.params] : url.pathname;
  const mediaType = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  return createHash('sha256')
    .update(JSON.stringify([req.method, path, query.toString(), mediaType]))
    .update(tap.hash.digest())
    .digest('hex');
}

export function idempotency(deps: {
  /** The entries; without them (no Redis), keyed requests are refused with 503. */
  keys: IdempotencyService | undefined;
  /** How long a retry of a job-backed request waits for the job, as the first did (JOB_WAIT_MS). */
  jobWaitMs: number;
  logger: Logger;
}): RequestHandler {
  return (req, res, next) => {
    const key = req.headers[HEADER];
    if (req.method !== 'POST' || key === undefined) return next();
    const run = async () => {
      if (typeof key !== 'string' || !VALID_KEY.test(key)) {
        throw Errors.validation([
          {
            field: 'Idempotency-Key',
            message: 'Idempotency-Key must be 1 to 255 printable ASCII characters',
          },
        ]);
      }
      const tap = taps.get(req);
      if (!tap) throw new Error('idempotency: the request body was not tapped (tapRequestBody)');
      if (!deps.keys?.enabled) throw Errors.unavailable('Redis');
      const { organization, tokenId } = principalOf(req);
      const scope = { organization, tokenId, key };
      let fingerprint: Promise<string> | undefined;
      const fingerprinted = () =>
        (fingerprint ??= (async () => {
          // Drains a body the handler left unread (it has answered already).
          req.resume();
          await tap.ended;
          return fingerprintOf(req, tap);
        })());
      const admitted = await deps.keys.admit(scope, fingerprinted);
      if (admitted.kind === 'run') {
        keep(req, res, admitted.claim, deps.logger);
        return true;
      }
      if (admitted.kind === 'busy') {
        closeAfterAnswer(req);
        throw Errors.idempotencyKeyInUse();
      }
      // The first answer, for the same request only: read this one to the end to know.
      if ((await fingerprinted()) !== admitted.entry.fingerprint) {
        throw Errors.idempotencyKeyReused();
      }
      res.setHeader('Idempotent-Replayed', 'true');
      if (admitted.kind === 'done') {
        const { entry } = admitted;
        if (entry.location) res.setHeader('Location', entry.location);
        res.status(entry.status).json(entry.body);
        return false;
      }
      // The job's outcome: at once when finished, or when the first asked for 202; else the
      // retry waits for it as the first request did.
      const answer =
        admitted.answer.kind === 'done' || admitted.entry.async
          ? admitted.answer
          : await deps.keys.awaitJob(scope, admitted, deps.jobWaitMs);
      if (answer.kind === 'pending' && !admitted.entry.async) {
        throw Errors.jobTimeout(answer.jobId, answer.statusUrl);
      }
      respondToJob(res, answer);
      return false;
    };
    run().then(
      (goOn) => (goOn ? next() : undefined),
      (err: unknown) => next(err),
    );
  };
}

/**
 * Lets the request run: a job it queues is kept for retries at once, and
 * its answer, when the handler gives it, is kept (a success) or frees the
 * key (a failure) before it is written.
 */
function keep(req: Request, res: Response, claim: Claim, logger: Logger): void {
  contextOf(req).idempotency = { jobQueued: (jobId, async) => claim.jobQueued(jobId, async) };
  const json = res.json.bind(res);
  res.json = (body: unknown) => {
    res.json = json;
    const send = () => {
      try {
        json(body);
      } catch (err) {
        logger.warn({ err }, 'could not send an answer');
      }
    };
    void claim
      .finish(res.statusCode, body, res.getHeader('location')?.toString())
      .catch((err: unknown) => logger.warn({ err }, 'could not keep an idempotent answer'))
      .finally(send);
    return res;
  };
}
