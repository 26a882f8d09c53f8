/**
 * Runs the real worker (context, registry, BullMQ workers) in the test process
 * against the same services and names as a test API.
 */
import { createLogger } from '../../shared/logger';
import { loadConfig } from '../../shared/config';
import { createAdapters } from '../../worker/adapters';
import { createWorkerContext, type WorkerContext } from '../../worker/context';
import { PROCESSORS } from '../../worker/processors';
import { buildRegistry } from '../../worker/registry';
import { createWorker, type RunningWorker } from '../../worker/worker';

export interface TestWorker {
  ctx: WorkerContext;
  worker: RunningWorker;
  close(): Promise<void>;
}

export async function startWorker(
  env: NodeJS.ProcessEnv,
  overrides: NodeJS.ProcessEnv = {},
): Promise<TestWorker> {
  const config = loadConfig({ ...env, ...overrides });
  const logger = createLogger({ level: config.logLevel });
  const ctx = await createWorkerContext(config, logger, createAdapters(config, logger));
  const worker = createWorker(ctx, buildRegistry(PROCESSORS));
  await Promise.all(worker.workers.map((w) => w.waitUntilReady()));
  return {
    ctx,
    worker,
    async close() {
      await worker.close();
      await ctx.close();
    },
  };
}
