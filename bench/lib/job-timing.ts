/**
 * Where an endpoint's time goes, from the job's own timestamps in Redis
 * (BullMQ records when a job was added, when a worker took it and when it
 * finished): API before the job was queued, waiting in the queue, in the
 * worker, and API after the job finished (waking up, reading the record,
 * answering). All processes share the machine's clock.
 */
import { Queue } from 'bullmq';
import type { QueueName } from '../../shared/jobs';
import { createLogger } from '../../shared/logger';
import { createRedis } from '../../shared/queue/redis';
import type { Stack } from './stack';

export interface Phases {
  apiBefore: number;
  queued: number;
  worker: number;
  apiAfter: number;
}

export class JobTimings {
  private readonly connection;
  private readonly queues = new Map<QueueName, Queue>();

  constructor(private readonly stack: Stack) {
    this.connection = createRedis(
      stack.config.redisUrl!,
      'producer',
      createLogger({ level: 'warn' }),
    );
  }

  private queue(name: QueueName): Queue {
    let q = this.queues.get(name);
    if (!q) {
      q = new Queue(name, { connection: this.connection, prefix: this.stack.config.queuePrefix });
      this.queues.set(name, q);
    }
    return q;
  }

  /**
   * Runs `request` (one call that ends when the endpoint has answered) and
   * splits its time with the most recently finished job of `queue`.
   */
  async measure(
    name: QueueName,
    request: () => Promise<unknown>,
  ): Promise<{ ms: number; phases: Phases }> {
    const start = Date.now();
    const t = performance.now();
    await request();
    const ms = performance.now() - t;
    const end = Date.now();
    const [job] = await this.queue(name).getJobs(['completed'], 0, 0, false);
    if (!job?.processedOn || !job.finishedOn || job.timestamp < start) {
      throw new Error(`no job of queue ${name} finished during the request`);
    }
    return {
      ms,
      phases: {
        apiBefore: job.timestamp - start,
        queued: job.processedOn - job.timestamp,
        worker: job.finishedOn - job.processedOn,
        apiAfter: end - job.finishedOn,
      },
    };
  }

  async close(): Promise<void> {
    for (const q of this.queues.values()) await q.close();
    this.connection.disconnect();
  }
}
