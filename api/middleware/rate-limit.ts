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
 * - A per-process stage ahead of Redis (`Leases`): a replica takes a
 *   token's units from Redis in batches of `leaseUnits(max)` (1% of `max`,
 *   at least 1) and spends them in memory until they run out or the window
 *   ends, so about one request in a batch makes the Redis round trip. Every
 *   unit spent was counted in Redis first: a token never exceeds `max` per
 *   window across replicas; what a batch costs is the other way, units one
 *   replica holds unspent (at most one batch per replica and key) that
 *   another cannot spend, so a token may be refused up to (replicas - 1) x
 *   batch units early. Near the limit (Redis has less than a batch left) a
 *   request takes exactly its cost, as without the stage. With one replica
 *   the headers are exact; with several, `RateLimit-Remaining` is the
 *   replica's view (Redis's count at its last batch, plus its unspent units).
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
import { BoundedCache } from '../domain/auth-cache';
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

const secondsUntilReset = (res: { msBeforeNext: number }) =>
  Math.max(1, Math.ceil(res.msBeforeNext / 1000));

/** What a charge tells the client: the units left, and when the window ends. */
interface Counted {
  remainingPoints: number;
  msBeforeNext: number;
}

function setHeaders(res: Response, max: number, windowMs: number, counted: Counted): void {
  res.setHeader('RateLimit-Policy', `${max};w=${Math.round(windowMs / 1000)}`);
  res.setHeader('RateLimit-Limit', String(max));
  res.setHeader('RateLimit-Remaining', String(Math.max(0, counted.remainingPoints)));
  res.setHeader('RateLimit-Reset', String(secondsUntilReset(counted)));
}

/** Units a replica takes from Redis at once for one key: 1% of the budget, at least 1. */
export function leaseUnits(max: number): number {
  return Math.max(1, Math.floor(max / 100));
}

/** Keys (tokens, signed URLs' addresses) whose leases a process keeps at most. */
const LEASED_KEYS = 10_000;

/** Units of one key taken from Redis and not yet spent here, for one window. */
interface Lease {
  /** Units left to spend without asking Redis. */
  left: number;
  /** Redis's remaining units when it last answered for this key (counts only grow within a window). */
  remaining: number;
  /** When the window ends, by this process's clock, reckoned from before Redis was asked (never late). */
  endsAt: number;
}

type Charged =
  | { allowed: true; counted: Counted }
  | { allowed: false; res: RateLimiterRes }
  /** Redis failed: served without counting. */
  | null;

/**
 * The per-process stage ahead of the shared counter (the module's comment
 * says what it trades): units are taken from Redis `batch` at a time and
 * spent here; a request that finds none left (or too few, or a window over)
 * asks Redis for its cost and, while Redis has a batch to spare, a batch more.
 */
class Leases {
  private readonly held: BoundedCache<string, Lease>;

  constructor(
    private readonly shared: ReturnType<typeof counter>,
    private readonly batch: number,
    windowMs: number,
    private readonly now: () => number = Date.now,
  ) {
    this.held = new BoundedCache(LEASED_KEYS, windowMs);
  }

  async charge(key: string, units: number): Promise<Charged> {
    const now = this.now();
    const lease = this.held.get(key);
    const live = lease && lease.endsAt > now ? lease : undefined;
    if (live && live.left >= units) {
      live.left -= units;
      return { allowed: true, counted: this.view(live, now) };
    }
    // What this lease still holds goes to this request; the rest comes from Redis.
    const carry = live ? live.left : 0;
    if (live) live.left = 0;
    const need = units - carry;
    // A batch only while Redis (as last seen) has one to spare: near the limit, exactly the cost.
    let take =
      this.batch > 1 && (!live || live.remaining >= need + this.batch) ? need + this.batch : need;
    let answer = await this.shared.consume(key, take);
    if (answer && !answer.allowed && take > need) {
      // The batch did not fit where the cost alone might: give it back, ask for the cost.
      await this.shared.reward(key, take);
      take = need;
      answer = await this.shared.consume(key, need);
    }
    if (!answer) {
      if (live) live.left += carry;
      return null;
    }
    if (!answer.allowed) {
      if (live) live.left += carry;
      return { allowed: false, res: answer.res };
    }
    const spare = take - need;
    const endsAt = now + answer.res.msBeforeNext;
    const current = this.held.get(key);
    // Another request's batch for the same window may have landed meanwhile: one lease.
    const merged =
      current && Math.abs(current.endsAt - endsAt) < 1_000
        ? {
            left: current.left + spare,
            remaining: Math.min(current.remaining, answer.res.remainingPoints),
            endsAt: Math.min(current.endsAt, endsAt),
          }
        : { left: spare, remaining: answer.res.remainingPoints, endsAt };
    this.held.set(key, merged);
    return { allowed: true, counted: this.view(merged, now) };
  }

  /** The client's view: Redis's remaining units plus those held here (exact with one replica). */
  private view(lease: Lease, now: number): Counted {
    return { remainingPoints: lease.remaining + lease.left, msBeforeNext: lease.endsAt - now };
  }
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
  const tokens = new Leases(counter(options, 'token:', max, warn), leaseUnits(max), windowMs);
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
      tokens.charge(key, units).then(
        (charged) => {
          if (!charged) return next();
          setHeaders(res, max, windowMs, charged.allowed ? charged.counted : charged.res);
          if (charged.allowed) return next();
          next(Errors.rateLimited(secondsUntilReset(charged.res), { limit: max, windowMs }));
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
