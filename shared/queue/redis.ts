/**
 * Redis connections for BullMQ, following BullMQ's production guide:
 * - producers (Queue, used by the API) fail fast: no offline queue, a small
 *   retry budget and a command timeout, so a request gets a 503 instead of
 *   hanging while Redis is down or silent;
 * - workers and QueueEvents use blocking commands and must keep retrying
 *   forever: `maxRetriesPerRequest: null`.
 *
 * REDIS_URL names one server or a Redis Cluster (`redis+cluster://host:port,…`,
 * see redis-url.ts): `createRedis` answers an ioredis `Redis` or `Cluster`
 * with the same per-role behaviour. On a cluster every key of a queue must
 * hash to one slot, which QUEUE_PREFIX as a hash tag (`{media}`) ensures
 * (the configuration refuses a cluster without one).
 */
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import type { Logger } from '../logger';
import { parseRedisUrl } from './redis-url';

/** A connection to one Redis or to a Redis Cluster: what BullMQ and the rate limiter take. */
export type RedisConnection = Redis | Cluster;

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

/** The options of a Cluster client for a role: the same fail-fast or patient behaviour per node. */
export function clusterOptions(
  role: RedisRole,
  auth: { username?: string; password?: string; tls: boolean },
): ClusterOptions {
  const { enableOfflineQueue, retryStrategy, ...node } = redisOptions(role);
  return {
    // Reconnecting to the cluster backs off as a single server's connection does.
    clusterRetryStrategy: retryStrategy,
    enableOfflineQueue: enableOfflineQueue ?? true,
    enableReadyCheck: true,
    slotsRefreshTimeout: 2_000,
    redisOptions: {
      ...node,
      ...(auth.username ? { username: auth.username } : {}),
      ...(auth.password ? { password: auth.password } : {}),
      ...(auth.tls ? { tls: {} } : {}),
    },
    // With TLS, nodes are reached by the names the cluster gives, so certificates match
    // (AWS ElastiCache's advice); without it, names are resolved as usual.
    ...(auth.tls ? { dnsLookup: (address, callback) => callback(null, address) } : {}),
  };
}

export function createRedis(url: string, role: RedisRole, logger: Logger): RedisConnection {
  const target = parseRedisUrl(url);
  const redis: RedisConnection =
    target.mode === 'cluster'
      ? new Cluster(target.nodes, clusterOptions(role, target))
      : new Redis(url, { ...redisOptions(role), lazyConnect: false });
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
export async function waitForRedis(redis: RedisConnection, timeoutMs = 5_000): Promise<void> {
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

/** Deletes the lock `key` if it still holds `token` (not taken over after its expiry), in one round trip. */
export async function releaseLock(
  redis: RedisConnection,
  key: string,
  token: string,
): Promise<void> {
  await redis.eval(
    `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`,
    1,
    key,
    token,
  );
}
