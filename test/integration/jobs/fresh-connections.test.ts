/**
 * A worker makes some of its fail-fast Redis connections on first use (the
 * direct uploads' state, the render handoff, the webhook queue's producer):
 * a command sent before such a connection is ready fails at once ("Stream
 * isn't writeable and enableOfflineQueue options is false"). So a fresh
 * worker's first job of each kind must wait for its connection, not fail
 * and be retried. Each case here is that first use, over the real Redis.
 */
import { createLogger } from '../../../shared/logger';
import { BullJobQueue } from '../../../shared/queue/job-queue';
import { JobHandoff } from '../../../shared/queue/handoff';
import { createRedis, type RedisConnection } from '../../../shared/queue/redis';
import type { ObjectStore } from '../../../shared/storage/object-store';
import { DirectUploads } from '../../../shared/uploads/direct-uploads';
import type { Organization } from '../../../shared/repositories/organizations.repository';
import type { WebhooksRepository } from '../../../shared/repositories/webhooks.repository';
import { DirectCompletionService } from '../../../worker/services/direct-completion.service';
import { WebhookDeliveries } from '../../../worker/services/webhook-deliveries.service';
import { isolatedEnv } from '../../support/context';

const { config, queuePrefix } = isolatedEnv('freshconn');
const logger = createLogger({ level: 'silent' });
const made: RedisConnection[] = [];
/** A connection made on first use, as worker/context.ts makes them. */
const onFirstUse = () => {
  let redis: RedisConnection | undefined;
  return () => {
    if (!redis) {
      redis = createRedis(config.redisUrl!, 'producer', logger);
      made.push(redis);
    }
    return redis;
  };
};
const queues: BullJobQueue[] = [];

afterAll(async () => {
  const redis = createRedis(config.redisUrl!, 'worker', logger);
  const keys = await redis.keys(`${queuePrefix}:*`);
  if (keys.length > 0) await redis.del(...keys);
  redis.disconnect();
  for (const queue of queues) await queue.close();
  for (const redis of made) redis.disconnect();
});

it("a fresh worker's first direct completion reads the upload's state (an unknown one: 404)", async () => {
  const uploads = new DirectUploads({
    redis: onFirstUse(),
    store: {} as ObjectStore,
    usage: { cancel: () => Promise.resolve() },
    queuePrefix,
    logger,
  });
  const completions = new DirectCompletionService({
    store: {} as ObjectStore,
    uploads,
    creation: { commit: () => Promise.reject(new Error('not reached')) },
    media: { findById: () => Promise.resolve(null) },
    folders: { findById: () => Promise.resolve(null) },
    limits: { acceptedTypes: ['image/jpeg'] },
  });
  const org = { id: 1, slug: 'org-1' } as Organization;
  await expect(
    completions.complete({ id: 'import-1', signal: new AbortController().signal }, org, {
      organizationId: 1,
      requestId: 'r',
      origin: { ip: '127.0.0.1', userAgent: null },
      tokenId: null,
      uploadId: 'f'.repeat(32),
      bytes: 1,
      folderId: null,
      onDuplicate: 'allow',
    } as never),
  ).rejects.toMatchObject({ code: 'UPLOAD_NOT_FOUND', status: 404 });
});

it("a fresh worker's first render handoff is there for the API", async () => {
  const handoff = new JobHandoff({ redis: onFirstUse(), queuePrefix, maxBytes: 1024, logger });
  expect(await handoff.offer('image-fresh', Buffer.from('variant'))).toBe(true);
  expect(await handoff.take('image-fresh', 7)).toEqual(Buffer.from('variant'));
});

it("a fresh worker's first webhook attempt takes its endpoint's slot (a gone endpoint: skipped)", async () => {
  let queue: BullJobQueue | undefined;
  const deliveries = new WebhookDeliveries({
    webhooks: { forDelivery: () => Promise.resolve(null) } as unknown as WebhooksRepository,
    events: { get: () => Promise.resolve(null) },
    rootFolderId: () => Promise.resolve(undefined),
    queue: () => {
      if (!queue) {
        queue = new BullJobQueue({ redisUrl: config.redisUrl, queuePrefix }, logger);
        queues.push(queue);
      }
      return queue;
    },
    settings: config.webhooks,
    egress: config.egress,
    queuePrefix,
    logger,
  });
  const result = await deliveries.attempt(
    {
      organizationId: 1,
      requestId: 'r',
      endpointId: 1,
      messageId: 'msg_fresh',
      eventId: null,
      eventType: 'webhook.test',
      trigger: 'test',
      run: 'test',
      attempt: 1,
      waits: 0,
    } as never,
    new AbortController().signal,
    logger,
  );
  expect(result).toEqual({ outcome: 'skipped', status: null });
});
