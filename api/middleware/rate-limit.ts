/**
 * Per-token rate limiting: express-rate-limit, with its counters in Redis
 * (rate-limit-redis) so that every API replica counts against the same budget.
 *
 * - Mounted after bearer auth, keyed by the token id: each token has its own
 *   budget of `max` requests per fixed window of `windowMs`, and a request
 *   without a valid token (a 401) never spends one.
 * - Over the limit: `429 RATE_LIMITED` in the error envelope, with
 *   `Retry-After` (seconds until the window ends). Every counted response
 *   carries the IETF draft-6 headers `RateLimit-Policy`, `RateLimit-Limit`,
 *   `RateLimit-Remaining` and `RateLimit-Reset`.
 * - Fails open: when Redis refuses or does not answer within
 *   `commandTimeoutMs`, the request is served without counting and a warning
 *   is logged (at most one per `warnEveryMs`). With a fail-fast connection
 *   (no offline queue, see shared/queue/redis.ts) a Redis that is down costs
 *   no wait at all; one that hangs costs at most `commandTimeoutMs`.
 */
import { createHash } from 'node:crypto';
import type { Request, RequestHandler } from 'express';
import { rateLimit, type Store } from 'express-rate-limit';
import { RedisStore, type RedisReply } from 'rate-limit-redis';
import { Errors } from '@shared/errors';
import type { Logger } from '@shared/logger';
import type { RedisConnection } from '@shared/queue/redis';

export interface RateLimitOptions {
  /** Requests per window and token (> 0). */
  max: number;
  /** Length of the fixed window, in milliseconds. */
  windowMs: number;
  /** Where the counters live. Without it they live in this process's memory (tests, one replica). */
  redis?: RedisConnection;
  /** Prefix of the counters' keys in Redis (include QUEUE_PREFIX, so deployments and tests never share counters). */
  keyPrefix: string;
  logger: Logger;
  /** How long one Redis command may take before the request is let through. Default 1000. */
  commandTimeoutMs?: number;
  /** At most one warning per this many milliseconds while Redis fails. Default 30000. */
  warnEveryMs?: number;
}

/** Rejects when `promise` has not settled within `ms`. */
function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`Redis did not answer ${what} within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * The raw-command function rate-limit-redis sends through, over ioredis.
 *
 * rate-limit-redis loads its Lua scripts once (`SCRIPT LOAD`) and keeps the
 * promise of their SHA-1: a load that fails (Redis not yet connected, or down)
 * would leave the store failing for good. So `SCRIPT LOAD` is answered here
 * with the script's SHA-1 (what Redis would answer) and `EVALSHA` falls back
 * to `EVAL` when Redis does not know the script (NOSCRIPT: first use, or
 * after a Redis restart), which also loads it, as ioredis' own scripts do.
 */
export function redisCommandSender(
  redis: RedisConnection,
  timeoutMs: number,
): (...args: string[]) => Promise<RedisReply> {
  const scripts = new Map<string, string>();
  const send = ([command, ...args]: string[]) =>
    withTimeout(redis.call(command!, ...args) as Promise<RedisReply>, timeoutMs, command!);
  return async (...args) => {
    const command = args[0]?.toUpperCase();
    if (command === 'SCRIPT' && args[1]?.toUpperCase() === 'LOAD' && args[2] !== undefined) {
      const sha = createHash('sha1').update(args[2]).digest('hex');
      scripts.set(sha, args[2]);
      return sha;
    }
    if (command === 'EVALSHA') {
      const [, sha, ...rest] = args;
      try {
        return await send(args);
      } catch (err) {
        const source = scripts.get(sha ?? '');
        if (!source || !(err instanceof Error) || !/^NOSCRIPT\b/.test(err.message)) throw err;
        return send(['EVAL', source, ...rest]);
      }
    }
    return send(args);
  };
}

/** Logs the first failure, then at most one per `everyMs` (with how many were not logged). */
function throttledWarning(
  logger: Logger,
  everyMs: number,
): (err: unknown, message?: string) => void {
  let last = 0;
  let suppressed = 0;
  return (err, message) => {
    const now = Date.now();
    if (now - last < everyMs) {
      suppressed++;
      return;
    }
    logger.warn({ err, suppressed }, message ?? 'rate limiter error');
    last = now;
    suppressed = 0;
  };
}

const secondsUntil = (date: Date | undefined, windowMs: number) =>
  Math.max(1, Math.ceil(((date?.getTime() ?? Date.now() + windowMs) - Date.now()) / 1000));

/** The limiter, to mount right after `bearerAuth` (it needs `req.principal`). */
export function rateLimitPerToken(options: RateLimitOptions): RequestHandler {
  const { max, windowMs, redis, keyPrefix } = options;
  const log = options.logger.child({ component: 'rate-limit' });
  const warn = throttledWarning(log, options.warnEveryMs ?? 30_000);
  const store: Store | undefined = redis
    ? new RedisStore({
        sendCommand: redisCommandSender(redis, options.commandTimeoutMs ?? 1_000),
        prefix: keyPrefix,
      })
    : undefined;
  return rateLimit({
    windowMs,
    limit: max,
    ...(store ? { store } : {}),
    keyGenerator: (req: Request) => {
      // Mounted after bearerAuth, so there is always a principal; be safe anyway.
      if (!req.principal) throw Errors.unauthorized();
      return req.principal.tokenId;
    },
    standardHeaders: 'draft-6',
    legacyHeaders: false,
    passOnStoreError: true,
    logger: { warn, error: (err, message) => warn(err, message) },
    handler: (req, _res, next) => {
      const resetTime = (req as Request & { rateLimit?: { resetTime?: Date } }).rateLimit
        ?.resetTime;
      next(Errors.rateLimited(secondsUntil(resetTime, windowMs), { limit: max, windowMs }));
    },
  });
}
