/**
 * The worker process: wires configuration, connections, adapters and the job
 * registry, then takes jobs until SIGTERM, when it stops taking new ones and
 * lets active jobs finish (bounded by SHUTDOWN_TIMEOUT_MS; a job still running
 * then is handed back: its lock expires and another worker retries it).
 */
// First: tracing instruments the modules loaded after it (worker/tracing.ts).
import { tracing } from './tracing';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { getConfig } from '@shared/config';
import { runMain } from '@shared/run-main';
import { createLogger } from '@shared/logger';
import { createWorkerMetrics } from '@shared/metrics';
import { installCrashHandlers, onShutdown } from '@shared/shutdown';
import { createAdapters } from './adapters';
import { createWorkerContext } from './context';
import { PROCESSORS } from './processors';
import { createOpsServer } from './ops-server';
import { buildRegistry } from './registry';
import { createWorker } from './worker';

async function main(): Promise<void> {
  const config = getConfig();
  const logger = createLogger({ level: config.logLevel, name: 'worker' });
  installCrashHandlers(logger);
  // Refuse to start before connecting anywhere if a job has no processor, or two.
  const registry = buildRegistry(PROCESSORS);
  const metrics = createWorkerMetrics();
  const adapters = createAdapters(config, logger);
  const ctx = await createWorkerContext(config, logger, adapters, { metrics });
  const worker = createWorker(ctx, registry, metrics);
  const ops = createOpsServer({
    checks: worker.readiness,
    metrics: worker.metrics,
    metricsToken: config.metricsToken,
    logger,
  });
  ops.listen(config.worker.port);
  await Promise.race([
    once(ops, 'listening'),
    once(ops, 'error').then(([err]) => Promise.reject(err as Error)),
  ]);
  logger.info(
    {
      queues: config.worker.queues,
      concurrency: config.worker.concurrency,
      port: (ops.address() as AddressInfo).port,
    },
    'worker started',
  );

  onShutdown(logger, config.shutdownTimeoutMs, () => [
    // While the workers close, /readyz answers 503 (they are closing).
    { name: 'workers', run: () => worker.close() },
    {
      name: 'ops-http',
      run: () =>
        new Promise<void>((resolve, reject) => {
          ops.close((err) => (err ? reject(err) : resolve()));
          ops.closeAllConnections();
        }),
    },
    { name: 'mongodb', run: () => ctx.close() },
    { name: 'heic-threads', run: () => adapters.close() },
    // The spans of the last jobs are exported before the process exits.
    { name: 'tracing', run: () => tracing?.shutdown() ?? Promise.resolve() },
  ]);
}

runMain(main);
