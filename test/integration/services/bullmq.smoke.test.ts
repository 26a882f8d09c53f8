import { Queue, QueueEvents, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { createLogger } from '../../../shared/logger';
import { createRedis, waitForRedis } from '../../../shared/queue/redis';
import { isolatedEnv } from '../../support/context';

describe('BullMQ over Redis (smoke)', () => {
  const { config, queuePrefix } = isolatedEnv('bullsmoke');
  const logger = createLogger({ level: 'silent' });
  const producer = createRedis(config.redisUrl!, 'producer', logger);
  const workerConn = createRedis(config.redisUrl!, 'worker', logger);
  const eventsConn = createRedis(config.redisUrl!, 'events', logger);
  const queueName = 'smoke';
  const queue = new Queue<{ a: number; b: number }, { sum: number }>(queueName, {
    connection: producer,
    prefix: queuePrefix,
  });
  const events = new QueueEvents(queueName, { connection: eventsConn, prefix: queuePrefix });
  const worker = new Worker<{ a: number; b: number }, { sum: number }>(
    queueName,
    (job) => Promise.resolve({ sum: job.data.a + job.data.b }),
    { connection: workerConn, prefix: queuePrefix, autorun: true },
  );

  beforeAll(async () => {
    await waitForRedis(producer);
    await events.waitUntilReady();
    await worker.waitUntilReady();
  });

  afterAll(async () => {
    await worker.close();
    await events.close();
    await queue.obliterate({ force: true });
    await queue.close();
    producer.disconnect();
    workerConn.disconnect();
    eventsConn.disconnect();
  });

  it('adds a job that a Worker processes, and receives its result', async () => {
    const job = await queue.add('add', { a: 2, b: 40 });
    const result = await job.waitUntilFinished(events, 10_000);
    expect(result).toEqual({ sum: 42 });
    const stored = await queue.getJob(job.id!);
    expect(await stored?.getState()).toBe('completed');
  });

  it('uses the fail-fast options for producers and blocking-safe ones for workers', () => {
    // (REDIS_URL names one server here: test/integration/redis-cluster.test.ts covers a cluster)
    expect((producer as Redis).options.maxRetriesPerRequest).toBe(1);
    expect((producer as Redis).options.enableOfflineQueue).toBe(false);
    expect((workerConn as Redis).options.maxRetriesPerRequest).toBeNull();
  });
});
