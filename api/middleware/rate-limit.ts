/**
 * Per-token rate limiting by cost, and per-address limiting of failed
 * authentication, with rate-limiter-flexible: counters in Redis, so every API
 * replica counts against the same budget.
 *
 * - Each route declares its cost (api/routes/route-table.ts: a download
 *   costs 1, a merge 50; a constant or a function of the request) and is
 *   charged by `charge(cost)` in its own chain, so every spelling Express
 *   routes to it pays the same; a token may spend `max` per fixed window of
 *   `windowMs`. After bearer auth, keyed by the token id: a request without
 *   a valid token (401) never spends any. A request is charged once, by the
 *   first route that takes it (`unrouted` charges 1 to what no route took).
 * - Over the budget: `429 RATE_LIMITED` in the error envelope, with
 *   `Retry-After`. Counted answers carry the IETF draft-6 headers
 *   `RateLimit-Policy`, `RateLimit-Limit`, `RateLimit-Remaining` and
 *   `RateLimit-Reset` (in cost units).
 * - Requests admitted by a signed URL (no token) are counted per client
 *   address instead, on the same budget.
 * - Token lookups are guarded, not requests (`admitLookup`): a token this
 *   process cannot vouch for (not in its auth cache, and without the check
 *   a token issued by this service carries) is looked up in MongoDB only
 *   while its client address has fewer than `authFailures` failed lookups in
 *   the window, and while fewer than `authLookupsPerSecond` such lookups were
 *   made in the current second across every replica; otherwise 429 without
 *   a lookup. Valid tokens and signed URLs never pass through it, so other
 *   clients' failures never refuse them. Addresses are counted as
 *   `clientAddress` gives them (right-most forwarded hop, IPv6 by /64).
 * - Fails open: when Redis refuses or does not answer within
 *   `commandTimeoutMs`, the request is served without counting and a warning
 *   is logged (at most one per `warnEveryMs`). The limiter protects capacity;
 *   it is not a security boundary, and losing Redis must not take uploads
 *   and downloads down with it.
 */
import type { Request, RequestHandler, Response } from 'express';
import {
  RateLimiterMemory,
  RateLimiterRedis,
  RateLimiterRes,
  type RateLimiterAbstract,
} from 'rate-limiter-flexible';
import { Errors } from '@shared/errors';
import type { Logger } from '@shared/logger';
import type { RedisConnection } from '@shared/queue/redis';
import { withTimeout } from '@shared/with-timeout';
import { contextOf } from '../http/request-context';
import { clientAddress } from './client-address';

export interface RateLimitOptions {
  /** Cost units per window and token (> 0). */
  max: number;
  /** Length of the fixed window, in milliseconds. */
  windowMs: number;
  /** Failed lookups of unvouched tokens per window and client address before 429 (0: unlimited). */
  authFailures: number;
  /** Lookups of unvouched tokens per second, across every replica, before 429 (0: unlimited). */
  authLookupsPerSecond: number;
  /** Where the counters live. Without it they live in this process's memory (tests, one replica). */
  redis?: RedisConnection | undefined;
  /** Prefix of the counters' keys in Redis (include QUEUE_PREFIX, so deployments never share counters). */
  keyPrefix: string;
  logger: Logger;
  /** How long one Redis command may take before the request is let through. Default 1000. */
  commandTimeoutMs?: number;
  /** At most one warning per this many milliseconds while Redis fails. Default 30000. */
  warnEveryMs?: number;
}

/** Cost units of a request: a constant, or a function of the request (a render's pixels, say). */
export type Cost = number | ((req: Request) => number);

/** What a request costs when its route declares nothing, or when no route takes it. */
export const DEFAULT_COST = 1;

type Consumed = { allowed: boolean; res: RateLimiterRes } | null;

/** A fixed-window counter (of `windowMs` unless given) that fails open (null) when its store does not answer. */
function counter(
  options: RateLimitOptions,
  name: string,
  points: number,
  warn: (err: unknown) => void,
  windowMs = options.windowMs,
): {
  consume(key: string, cost: number): Promise<Consumed>;
  reward(key: string, points: number): Promise<Consumed>;
} {
  const common = {
    keyPrefix: `${options.keyPrefix}${name}`,
    points,
    duration: Math.max(1, Math.round(windowMs / 1000)),
  };
  const limiter: RateLimiterAbstract = options.redis
    ? new RateLimiterRedis({ ...common, storeClient: options.redis, rejectIfRedisNotReady: true })
    : new RateLimiterMemory(common);
  const timeoutMs = options.commandTimeoutMs ?? 1_000;
  const run = async (call: () => Promise<RateLimiterRes | null>): Promise<Consumed> => {
    try {
      const res = await withTimeout(call(), timeoutMs, 'Redis (rate limit)');
      return { allowed: true, res: res ?? new RateLimiterRes(points, 0, 0, true) };
    } catch (err) {
      if (err instanceof RateLimiterRes) return { allowed: false, res: err };
      warn(err);
      return null;
    }
  };
  return {
    consume: (key, cost) => run(() => limiter.consume(key, cost)),
    reward: (key, n) => run(() => limiter.reward(key, n)),
  };
}

/** Logs the first failure, then at most one per `everyMs` (with how many were not logged). */
function throttledWarning(logger: Logger, everyMs: number): (err: unknown) => void {
  let last = 0;
  let suppressed = 0;
  return (err) => {
    const now = Date.now();
    if (now - last < everyMs) {
      suppressed++;
      return;
    }
    logger.warn({ err, suppressed }, 'rate limiter store failed; serving without counting');
    last = now;
    suppressed = 0;
  };
}

const secondsUntilReset = (res: RateLimiterRes) => Math.max(1, Math.ceil(res.msBeforeNext / 1000));

function setHeaders(res: Response, max: number, windowMs: number, counted: RateLimiterRes): void {
  res.setHeader('RateLimit-Policy', `${max};w=${Math.round(windowMs / 1000)}`);
  res.setHeader('RateLimit-Limit', String(max));
  res.setHeader('RateLimit-Remaining', String(Math.max(0, counted.remainingPoints)));
  res.setHeader('RateLimit-Reset', String(secondsUntilReset(counted)));
}

export interface Limiters {
  /** Per token, by the route's cost: first in each route's chain (after authentication). */
  charge: (cost: Cost) => RequestHandler;
  /** Charges DEFAULT_COST to a /media request no route has charged (mount after the routes). */
  unrouted: RequestHandler;
  /**
   * Called by bearer auth before it asks MongoDB for a token it cannot vouch
   * for: rejects with 429 RATE_LIMITED (no lookup then) when the request's
   * address failed too many lookups in the window, or when this second's
   * lookups are spent. Otherwise resolves to `settle`, to be told whether the
   * token was refused: only a refused one is held against the address.
   */
  admitLookup(req: Request): Promise<(refused: boolean) => void>;
}

/** The key of the one counter of lookups every replica shares. */
const ALL_LOOKUPS = 'all';

export function rateLimiters(options: RateLimitOptions): Limiters {
  const { max, windowMs, authFailures, authLookupsPerSecond } = options;
  const log = options.logger.child({ component: 'rate-limit' });
  const warn = throttledWarning(log, options.warnEveryMs ?? 30_000);
  const tokens = counter(options, 'token:', max, warn);
  const failures = authFailures > 0 ? counter(options, 'auth-failures:', authFailures, warn) : null;
  const lookups =
    authLookupsPerSecond > 0
      ? counter(options, 'auth-lookups:', authLookupsPerSecond, warn, 1_000)
      : null;

  // A request falls through to another route (`/media/{id}` takes digits only): charged once.
  const charged = new WeakSet<Request>();

  function charge(cost: Cost): RequestHandler {
    return (req, res, next) => {
      if (charged.has(req)) return next();
      charged.add(req);
      // After bearerAuth, so there is always a principal; be safe anyway.
      const { principal, signedUrl } = contextOf(req);
      if (!principal) return next(Errors.unauthorized());
      let units: number;
      try {
        units = typeof cost === 'number' ? cost : cost(req);
      } catch (err) {
        return next(err);
      }
      // A signed URL has no token: its requests are counted per client address.
      const key = signedUrl ? `signed:${clientAddress(req)}` : principal.tokenId;
      tokens.consume(key, units).then(
        (counted) => {
          if (!counted) return next();
          setHeaders(res, max, windowMs, counted.res);
          if (counted.allowed) return next();
          next(Errors.rateLimited(secondsUntilReset(counted.res), { limit: max, windowMs }));
        },
        (err: unknown) => next(err),
      );
    };
  }

  return {
    charge,
    unrouted: charge(DEFAULT_COST),
    admitLookup: async (req) => {
      const address = clientAddress(req);
      // Taken before the lookup (concurrent guesses count at once), given back if it succeeds.
      const mine = failures ? await failures.consume(address, 1) : null;
      if (mine && !mine.allowed) {
        throw Errors.rateLimited(secondsUntilReset(mine.res), {
          limit: authFailures,
          windowMs,
          what: 'failed authentications from this address',
        });
      }
      const all = lookups ? await lookups.consume(ALL_LOOKUPS, 1) : null;
      if (all && !all.allowed) {
        if (mine) void failures!.reward(address, 1);
        throw Errors.rateLimited(secondsUntilReset(all.res), {
          limit: authLookupsPerSecond,
          windowMs: 1_000,
          what: 'lookups of unknown tokens',
        });
      }
      return (refused) => {
        if (!refused && mine) void failures!.reward(address, 1);
      };
    },
  };
}
