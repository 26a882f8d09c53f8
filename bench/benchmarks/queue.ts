/**
 * 4. Queue overhead: the round trip of a job that does nothing, through the
 * API's own producer adapter (the fair gate, add, then wait for the result
 * through QueueEvents) and a BullMQ worker on the same Redis that tells the
 * gate when a job has ended, as the service's workers do.
 */
import { randomUUID } from 'node:crypto';
import { Worker } from 'bullmq';
import { createLogger } from '../../shared/logger';
import { BullJobQueue } from '../../shared/queue/job-queue';
import { createRedis } from '../../shared/queue/redis';
import type { Benchmark } from '../lib/benchmark';
import { lines } from '../lib/charts';
import { target, type BenchmarkResult, type Table } from '../lib/report';
import { cdf, percentile, stat } from '../lib/stats';

export const queue: Benchmark = {
  id: 'queue',
  title: 'Queue overhead',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const jobs = ctx.quick ? 200 : 2000;
    const rounds = ctx.quick ? 2 : 5;
    const warmup = 50;
    const logger = createLogger({ level: 'warn' });
    const prefix = `${stack.config.queuePrefix}-noop`;
    const producer = new BullJobQueue(
      { redisUrl: stack.config.redisUrl!, queuePrefix: prefix },
      logger,
    );
    await producer.init();
    const connection = createRedis(stack.config.redisUrl!, 'worker', logger);
    const worker = new Worker('image', () => Promise.resolve({ metadata: {} }), {
      connection,
      prefix,
      concurrency: 1,
    });
    // As the service's workers do: a job that has ended lets the fair gate release the next.
    worker.on('completed', (job) => {
      void producer.ended('image', stack.organizationId, job.id!).catch(() => undefined);
    });
    const p50: number[] = [];
    const p99: number[] = [];
    const max: number[] = [];
    const all: number[] = [];
    try {
      await worker.waitUntilReady();
      for (let r = 0; r < rounds; r++) {
        ctx.log(`queue: round ${r + 1}/${rounds}, ${jobs} jobs`);
        const samples: number[] = [];
        for (let i = 0; i < jobs + warmup; i++) {
          const t = performance.now();
          const id = await producer.add(
            'image.metadata',
            { organizationId: stack.organizationId, requestId: 'bench', key: 'noop' },
            randomUUID(),
          );
          const outcome = await producer.wait('image.metadata', id, 10_000);
          if (outcome.state !== 'completed') throw new Error(`no-op job ended ${outcome.state}`);
          if (i >= warmup) samples.push(performance.now() - t);
        }
        p50.push(percentile(samples, 50));
        p99.push(percentile(samples, 99));
        max.push(Math.max(...samples));
        all.push(...samples);
      }
    } finally {
      await worker.close();
      connection.disconnect();
      await producer.close();
    }
    const p50s = stat(p50);
    const p99s = stat(p99);
    const table: Table = {
      columns: [
        { key: 'jobs', label: 'jobs per round' },
        { key: 'p50', label: 'p50, ms', digits: 2 },
        { key: 'p99', label: 'p99, ms', digits: 2 },
        { key: 'max', label: 'max, ms', digits: 2 },
      ],
      rows: [{ jobs: `${jobs} (× ${rounds} rounds)`, p50: p50s, p99: p99s, max: stat(max) }],
    };
    return {
      id: this.id,
      title: this.title,
      method: `
One job at a time, ${jobs} per round after ${warmup} unmeasured, ${rounds}
rounds: \`BullJobQueue.add\` (the API's producer adapter: a BullMQ \`Queue\`
on its own ioredis connection) then \`BullJobQueue.wait\` (QueueEvents, as the
API waits for every job), with a BullMQ \`Worker\` whose processor returns at
once, on its own connection, in the benchmark's process. Redis is on
loopback. p50 and p99 are taken per round; the table gives their median and
min–max over the rounds, the chart the distribution of every sample.`,
      tables: [table],
      charts: [
        {
          id: 'queue',
          title: 'No-op job round trip, distribution',
          spec: lines({
            title: 'No-op job round trip: share of jobs done within x ms',
            data: cdf(all).map((p) => ({ x: p.value, y: p.percentile, series: 'all rounds' })),
            xTitle: 'round trip, ms (log)',
            yTitle: 'percent of jobs',
            xLog: true,
            rules: [
              { y: 50, label: 'p50' },
              { y: 99, label: 'p99' },
            ],
          }),
        },
      ],
      targets: [
        target('p50 round trip', p50s, '<=', 2, 'ms'),
        target('p99 round trip', p99s, '<=', 10, 'ms'),
      ],
    };
  },
};
