/**
 * Redis connections for BullMQ, following BullMQ's production guide:
 * - producers (Queue, used by the API) fail fast: no offline queue, a small
 *   retry budget and a command timeout, so a request gets a 503 instead of
 *   hanging while Redis is down or silent;
 * - workers and QueueEvents use blocking commands and must keep retrying
 *   forever: `maxRetriesPerRequest: null`.
 */
import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from '../logger';

export type RedisRole = 'producer' | 'worker' | 'events';

/** Producers' bound on one command (they never block; the slowest is a job add). */
export const PRODUCER_COMMAND_TIMEOUT_MS = 3_000;

export function redisOptions(role: RedisRole): RedisOptions {
  const reconnect: RedisOptions = {
    // Back off to at most 2 s between reconnect attempts, forever.
    retryStrategy: (times) => Math.min(times * 100, 2_000),
    connectTimeout: 5_000,
  };
  if (role === 'producer') {
    return {
      ...reconnect,
      maxRetriesPerRequest: 1,
      enableOfflineQueue: false,
      // A Redis that stops answering without closing the connection (a network
      // partition) fails a command after this long instead of hanging it.
      commandTimeout: PRODUCER_COMMAND_TIMEOUT_MS,
    };
  }
  return { ...reconnect, maxRetriesPerRequest: null, enableReadyCheck: true };
}

export function createRedis(url: string, role: RedisRole, logger: Logger): Redis {
  const redis = new Redis(url, { ...redisOptions(role), lazyConnect: false });
  const log = logger.child({ component: 'redis', role });
  let lastError = '';
  redis.on('error', (err: Error) => {
    // ioredis repeats the same error on every reconnect attempt; log changes only.
    if (err.message !== lastError) log.warn({ err }, 'Redis connection error');
    lastError = err.message;
  });
  redis.on('ready', () => {
    if (lastError) log.info('Redis connection restored');
    lastError = '';
  });
  return redis;
}

/** Resolves when the connection is ready, or rejects after `timeoutMs`. */
export async function waitForRedis(redis: Redis, timeoutMs = 5_000): Promise<void> {
  if (redis.status === 'ready') return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`Redis not ready after ${timeoutMs} ms`));
    }, timeoutMs);
    const onReady = () => {
      cleanup();
      resolve();
    };
    const cleanup = () => {
      clearTimeout(timer);
      redis.off('ready', onReady);
    };
    redis.on('ready', onReady);
  });
}
