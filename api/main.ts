/** The API process: wires configuration, connections and the app, then listens. */
import { once } from 'node:events';
import { createServer } from 'node:http';
import { getConfig, ConfigError } from '@shared/config';
import { createLogger } from '@shared/logger';
import { onShutdown } from '@shared/shutdown';
import { createApp } from './app';

async function main(): Promise<void> {
  const config = getConfig();
  const logger = createLogger({ level: config.logLevel, name: 'api' });
  const app = createApp({ logger });
  const server = createServer(app);
  server.listen(config.port);
  await once(server, 'listening');
  const address = server.address();
  logger.info(
    { port: typeof address === 'object' && address ? address.port : config.port },
    'API listening',
  );

  onShutdown(logger, config.shutdownTimeoutMs, () => [
    {
      name: 'http',
      run: () =>
        new Promise<void>((resolve, reject) => {
          server.close((err) => (err ? reject(err) : resolve()));
          server.closeIdleConnections();
        }),
    },
  ]);
}

main().catch((err: unknown) => {
  process.stderr.write(
    `${err instanceof ConfigError ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exit(1);
});
