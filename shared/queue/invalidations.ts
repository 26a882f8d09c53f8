/**
 * Invalidations of what API replicas cache about tokens and organizations
 * (api/domain/auth-cache.ts) and about keys served (the validators
 * revalidations answer from, api/domain/revalidation-cache.ts), sent over
 * Redis pub/sub on one channel under QUEUE_PREFIX: whoever revokes a token,
 * changes its scopes, changes or deletes an organization (the CLI, the
 * services), or makes a key disappear (shared/media-deletion.ts, in the API,
 * the workers and the CLI) publishes; every API
 * replica subscribes and drops the entries at once. Pub/sub keeps nothing:
 * a replica that was disconnected cannot know what it missed, so it clears
 * its whole cache when its subscription comes back, and while Redis is away
 * the cache's lifetime (AUTH_CACHE_MS) bounds how long a change takes.
 */
import type { Logger } from '../logger';
import { createRedis, waitForRedis, type RedisConnection } from './redis';

/**
 * A token, an organization (what is cached of it and of its tokens and
 * files), or one key of an organization that disappeared (what revalidations
 * kept of it: api/domain/revalidation-cache.ts).
 */
export type Invalidation =
  { tokenId: string } | { organizationId: number } | { organizationId: number; key: string };

/** The channel of a deployment (its QUEUE_PREFIX, a hash tag on a cluster). */
export function invalidationChannel(queuePrefix: string): string {
  return `${queuePrefix}:auth-invalidations`;
}

function parse(text: string): Invalidation | null {
  try {
    const m = JSON.parse(text) as Record<string, unknown>;
    if (typeof m.tokenId === 'string') return { tokenId: m.tokenId };
    if (typeof m.organizationId === 'number' && typeof m.key === 'string') {
      return { organizationId: m.organizationId, key: m.key };
    }
    if (typeof m.organizationId === 'number') return { organizationId: m.organizationId };
  } catch {
    // ignored below
  }
  return null;
}

/** Publishes invalidations; connects on first use (the CLI pays for Redis only when it changes something). */
export class InvalidationPublisher {
  private redis: RedisConnection | undefined;

  constructor(
    private readonly deps: {
      redisUrl: string | undefined;
      queuePrefix: string;
      logger: Logger;
      /** How long to wait for Redis before giving up on a message (default 2000 ms). */
      connectTimeoutMs?: number;
      /** This process's own caches, told at once (before the replicas hear it through Redis). */
      local?: readonly { invalidate(message: Invalidation): void }[];
    },
  ) {}

  /**
   * Tells every replica; never throws. False when Redis could not be told
   * (then replicas see the change once their cached entry expires).
   */
  async publish(message: Invalidation): Promise<boolean> {
    const { redisUrl, queuePrefix, logger } = this.deps;
    for (const cache of this.deps.local ?? []) cache.invalidate(message);
    if (!redisUrl) return false;
    try {
      this.redis ??= createRedis(redisUrl, 'producer', logger);
      await waitForRedis(this.redis, this.deps.connectTimeoutMs ?? 2_000);
      await this.redis.publish(invalidationChannel(queuePrefix), JSON.stringify(message));
      return true;
    } catch (err) {
      logger.warn(
        { err, invalidation: message },
        'could not tell the API replicas; they see the change when their cached entry expires (AUTH_CACHE_MS)',
      );
      return false;
    }
  }

  close(): void {
    this.redis?.disconnect();
    this.redis = undefined;
  }
}

/**
 * Subscribes to the deployment's invalidations: `onMessage` for each one,
 * `onResync` whenever the subscription is (re)established after a loss
 * (messages may have been missed: drop everything).
 */
export function subscribeInvalidations(
  redisUrl: string,
  queuePrefix: string,
  logger: Logger,
  handlers: { onMessage(message: Invalidation): void; onResync(): void },
): { close(): void } {
  const log = logger.child({ component: 'auth-invalidations' });
  // Patient like a worker's connection: retries forever, resubscribes on reconnect.
  const redis = createRedis(redisUrl, 'events', logger);
  const channel = invalidationChannel(queuePrefix);
  let subscribed = false;
  redis.subscribe(channel).then(
    () => (subscribed = true),
    (err: unknown) => log.warn({ err }, 'could not subscribe to invalidations'),
  );
  redis.on('message', (from: string, text: string) => {
    if (from !== channel) return;
    const message = parse(text);
    if (message) handlers.onMessage(message);
    else log.warn({ text }, 'ignored a malformed invalidation');
  });
  // Whatever is published while the connection is down is lost: start afresh when it
  // drops (once per outage, not at each reconnect attempt) and when it is back.
  let up = false;
  redis.on('close', () => {
    if (up) handlers.onResync();
    up = false;
  });
  redis.on('ready', () => {
    if (subscribed) handlers.onResync();
    up = true;
  });
  return {
    close: () => redis.disconnect(),
  };
}
