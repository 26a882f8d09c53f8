/** The worker process: wires configuration and the job processors, then runs. */
import { getConfig, ConfigError } from '@shared/config';
import { createLogger } from '@shared/logger';
import { onShutdown } from '@shared/shutdown';

function main(): void {
  const config = getConfig();
  const logger = createLogger({ level: config.logLevel, name: 'worker' });
  logger.info(
    { queues: config.worker.queues, concurrency: config.worker.concurrency },
    'worker starting',
  );
  const keepAlive = setInterval(() => undefined, 60_000);
  onShutdown(logger, config.shutdownTimeoutMs, () => [
    { name: 'timer', run: () => Promise.resolve(clearInterval(keepAlive)) },
  ]);
}

try {
  main();
} catch (err) {
  process.stderr.write(`${err instanceof ConfigError ? err.message : String(err)}\n`);
  process.exit(1);
}
