/**
 * HTTP Basic authentication for operator pages (the Bull dashboard), against
 * the credentials in DASHBOARD_USER / DASHBOARD_PASSWORD, compared in constant
 * time. These are operator credentials, not an organization's API tokens.
 *
 * A lockout stops password guessing: each request takes a point of its
 * client address (`clientAddress`: right-most forwarded hop, IPv6 by /64)
 * before its credentials are compared, and a request whose credentials hold
 * gives it back; past `failureLimit` failures within `lockoutMs` every
 * request from that address, right credentials included, is answered 429
 * RATE_LIMITED with Retry-After until the window ends. The counters live in
 * Redis when there is one (every replica shares them; while Redis fails, in
 * this process's memory), else in memory.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { RequestHandler } from 'express';
import {
  RateLimiterMemory,
  RateLimiterRedis,
  RateLimiterRes,
  type RateLimiterAbstract,
} from 'rate-limiter-flexible';
import { AppError, Errors } from '@shared/errors';
import type { RedisConnection } from '@shared/queue/redis';
import { clientAddress } from './client-address';

const digest = (s: string) => createHash('sha256').update(s).digest();

export interface OperatorLockout {
  /** Failed logins per address within `lockoutMs` before the address is locked out (0: no lockout). */
  failureLimit: number;
  lockoutMs: number;
  /** Where the counts live (shared by replicas); without it, in this process's memory. */
  redis?: RedisConnection | undefined;
  /** Prefix of the counters' keys in Redis (include QUEUE_PREFIX). */
  keyPrefix: string;
}

function lockoutCounter(lockout: OperatorLockout): RateLimiterAbstract {
  const common = {
    keyPrefix: lockout.keyPrefix,
    points: lockout.failureLimit,
    duration: Math.max(1, Math.round(lockout.lockoutMs / 1000)),
  };
  const memory = new RateLimiterMemory(common);
  return lockout.redis
    ? new RateLimiterRedis({
        ...common,
        storeClient: lockout.redis,
        rejectIfRedisNotReady: true,
        insuranceLimiter: memory,
      })
    : memory;
}

export function operatorAuth(
  credentials: { user: string; password: string },
  lockout?: OperatorLockout,
): RequestHandler {
  const expected = digest(`${credentials.user}:${credentials.password}`);
  const counter = lockout && lockout.failureLimit > 0 ? lockoutCounter(lockout) : undefined;
  const unauthorized = () =>
    new AppError('UNAUTHORIZED', 401, 'Operator credentials are required', undefined, {
      headers: { 'WWW-Authenticate': 'Basic realm="media-admin", charset="UTF-8"' },
    });
  const check = (header: string | undefined): boolean => {
    const match = /^Basic ([A-Za-z0-9+/=]+)$/i.exec(header ?? '');
    const presented = match ? Buffer.from(match[1]!, 'base64').toString('utf8') : '';
    return match !== null && timingSafeEqual(digest(presented), expected);
  };
  return (req, _res, next) => {
    if (!counter) return next(check(req.headers.authorization) ? undefined : unauthorized());
    const address = clientAddress(req);
    counter.consume(address, 1).then(
      () => {
        if (!check(req.headers.authorization)) return next(unauthorized());
        // The right credentials: this request's point is given back.
        counter.reward(address, 1).then(
          () => next(),
          () => next(),
        );
      },
      (refused: unknown) => {
        if (!(refused instanceof RateLimiterRes)) return next(refused);
        next(
          Errors.rateLimited(refused.msBeforeNext / 1000, {
            limit: lockout!.failureLimit,
            windowMs: lockout!.lockoutMs,
            what: 'failed operator logins from this address',
          }),
        );
      },
    );
  };
}
