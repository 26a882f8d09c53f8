/**
 * The one object a request carries through the API, made by the first
 * middleware for every request: its id, where it came from, and what the
 * middleware after it learns (who is asking, whether a signed URL admitted
 * it, its `Idempotency-Key` claim). It lives beside the request, not on it
 * (no field is added to Express's types, nothing goes through `res.locals`),
 * and is read with `contextOf(req)`; routes hand services the `Caller` made
 * from it (`callerOf`).
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Request, RequestHandler } from 'express';
import { Errors } from '@shared/errors';
import type { Logger } from '@shared/logger';
import type { RequestOrigin } from '@shared/repositories/media.repository';
import type { Caller } from '../domain/caller';
import type { Principal } from '../services/tokens.service';

export interface RequestContext {
  /** The request's id: a well-formed `X-Request-Id` from the client, else a new UUID. */
  readonly requestId: string;
  /** Where the request came from, as records keep it (`metaData`). */
  readonly origin: RequestOrigin;
  /** Who is asking: set by bearer authentication or by a valid signed URL. */
  principal?: Principal | undefined;
  /** Set when a valid signed URL admitted the request: when that URL expires. */
  signedUrl?: { expiresAt: Date } | undefined;
  /** Set on a request that holds its `Idempotency-Key` (middleware/idempotency.ts). */
  idempotency?: IdempotentRequest | undefined;
  /**
   * The request's logger, bound to its id, method and URL and, once known,
   * who is asking: set by the request log (middleware/request-log.ts), made
   * when first read. Read it with `logOf(req)`.
   */
  readonly log?: Logger | undefined;
}

/** What a request holding its `Idempotency-Key` tells the key's entry. */
export interface IdempotentRequest {
  /** The request queued this job to make its outcome: a retry gets the job's outcome. */
  jobQueued(jobId: string, async: boolean): void;
}

const VALID_ID = /^[A-Za-z0-9._:-]{1,128}$/;

const contexts = new WeakMap<IncomingMessage, RequestContext>();

/** Makes the request's context (first in the app): its id, echoed in `X-Request-Id`, and its origin. */
export function beginRequest(): RequestHandler {
  return (req, res, next) => {
    const header = req.headers['x-request-id'];
    const requestId = typeof header === 'string' && VALID_ID.test(header) ? header : randomUUID();
    res.setHeader('X-Request-Id', requestId);
    contexts.set(req, { requestId, origin: originOf(req) });
    next();
  };
}

/** The request's context (made by `beginRequest`, which runs first for every request). */
export function contextOf(req: IncomingMessage): RequestContext {
  const context = contexts.get(req);
  if (!context) throw new Error('the request has no context: beginRequest() must run first');
  return context;
}

/** The request's id, or `unknown` for a request that never reached `beginRequest`. */
export function requestIdOf(req: IncomingMessage): string {
  return contexts.get(req)?.requestId ?? 'unknown';
}

/** The request's logger (`RequestContext.log`); undefined before the request log ran. */
export function logOf(req: IncomingMessage): Logger | undefined {
  return contexts.get(req)?.log;
}

/** The authenticated principal (routes behind authentication only; else 401). */
export function principalOf(req: IncomingMessage): Principal {
  const principal = contexts.get(req)?.principal;
  if (!principal) throw Errors.unauthorized();
  return principal;
}

/** Whether the request prefers an answer at once (`Prefer: respond-async`) to waiting for a job. */
export function prefersAsync(req: IncomingMessage): boolean {
  const prefer = req.headers.prefer;
  return typeof prefer === 'string' && /(^|[,\s])respond-async\b/i.test(prefer);
}

/** The caller as services see it, made from the request's context. */
export function callerOf(req: Request): Caller {
  const context = contextOf(req);
  const { organization, tokenId } = principalOf(req);
  const respondAsync = prefersAsync(req);
  const { idempotency } = context;
  return {
    organization,
    tokenId,
    origin: context.origin,
    requestId: context.requestId,
    signedUntil: context.signedUrl?.expiresAt,
    respondAsync,
    // A keyed request: its retries get this job's outcome.
    onJobQueued: idempotency && ((jobId) => idempotency.jobQueued(jobId, respondAsync)),
  };
}

/**
 * Where the request came from, as records keep it (`metaData`): the client's
 * address as Express sees it (the socket's, so `::ffff:127.0.0.1` over IPv4;
 * a forwarded one only through TRUST_PROXY) and the User-Agent as sent.
 */
function originOf(req: Request): RequestOrigin {
  return {
    ipAddress: req.ip ?? req.socket.remoteAddress ?? '',
    userAgent: req.get('user-agent') ?? '',
  };
}
