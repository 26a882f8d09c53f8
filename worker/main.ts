/**
 * The worker process: wires configuration, connections, adapters and the job
 * registry, then takes jobs until SIGTERM, when it stops taking new ones and
 * lets active jobs finish (bounded by SHUTDOWN_TIMEOUT_MS; a job still running
 * then is handed back: its lock expires and another worker retries it).
 */
import { ConfigError, getConfig } from '@shared/config';
import { createLogger } from '@shared/logger';
import { installCrashHandlers, onShutdown } from '@shared/shutdown';
import { createAdapters } from './adapters';
import { createWorkerContext } from './context';
import { PROCESSORS } from './processors';
import { buildRegistry } from './registry';
import { createWorker } from './worker';

async function main(): Promise<void> {
  const config = getConfig();
  const logger = createLogger({ level: config.logLevel, name: 'worker' });
  installCrashHandlers(logger);
  // Refuse to start before connecting anywhere if a job has no processor, or two.
  const registry = buildRegistry(PROCESSORS);
  const ctx = await createWorkerContext(config, logger, createAdapters(config, logger));
  const worker = createWorker(ctx, registry);
  logger.info(
    { queues: config.worker.queues, concurrency: config.worker.concurrency },
    'worker started',
  );

  onShutdown(logger, config.shutdownTimeoutMs, () => [
    { name: 'workers', run: () => worker.close() },
    { name: 'mongodb', run: () => ctx.close() },
  ]);
}

main().catch((err: unknown) => {
  process.stderr.write(
    `${err instanceof ConfigError ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exit(1);
});
