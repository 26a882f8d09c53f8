/**
 * Runs the real worker (context, registry, BullMQ workers) in the test process
 * against the same services and names as a test API.
 */
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createLogger } from '../../shared/logger';
import { loadConfig } from '../../shared/config';
import { createWorkerMetrics } from '../../shared/metrics';
import { createAdapters } from '../../worker/adapters';
import { createWorkerContext, type WorkerContext } from '../../worker/context';
import type { Listener } from '../../worker/listeners/listener';
import { createOpsServer } from '../../worker/ops-server';
import { PROCESSORS } from '../../worker/processors';
import { buildRegistry } from '../../worker/registry';
import { createWorker, type RunningWorker } from '../../worker/worker';

export interface TestWorker {
  ctx: WorkerContext;
  worker: RunningWorker;
  /** The worker's ops server (/healthz, /readyz, /metrics), on a free port. */
  opsUrl: string;
  /** HEIC decoding threads alive in the worker's image adapter. */
  heicThreads(): number;
  /** HEIC decodes that ran to their end (not the ones a job's time limit stopped). */
  heicDecodesAnswered(): number;
  close(): Promise<void>;
}

export async function startWorker(
  env: NodeJS.ProcessEnv,
  overrides: NodeJS.ProcessEnv = {},
  options: {
    /** Listeners of domain events instead of the service's own (worker/listeners/index.ts). */
    listeners?: readonly Listener[];
    /** Where the worker's log lines go (a test that reads them); stdout by default. */
    logTo?: { write(line: string): void };
  } = {},
): Promise<TestWorker> {
  const config = loadConfig({ ...env, ...overrides });
  const logger = createLogger({ level: config.logLevel }, options.logTo);
  const metrics = createWorkerMetrics();
  const adapters = createAdapters(config, logger);
  const ctx = await createWorkerContext(config, logger, adapters, {
    metrics,
    ...(options.listeners ? { listeners: options.listeners } : {}),
  });
  const worker = createWorker(ctx, buildRegistry(PROCESSORS), metrics);
  await Promise.all(worker.workers.map((w) => w.waitUntilReady()));
  const ops: Server = createOpsServer({
    checks: worker.readiness,
    metrics: worker.metrics,
    metricsToken: config.metricsToken,
    logger,
  });
  ops.listen(0, '127.0.0.1');
  await once(ops, 'listening');
  return {
    ctx,
    worker,
    opsUrl: `http://127.0.0.1:${(ops.address() as AddressInfo).port}`,
    heicThreads: () => adapters.heicThreads(),
    heicDecodesAnswered: () => adapters.heicDecodesAnswered(),
    async close() {
      ops.closeAllConnections();
      await new Promise<void>((resolve) => ops.close(() => resolve()));
      await worker.close();
      await ctx.close();
      await adapters.close();
    },
  };
}
