/** The API process: wires configuration, connections and the app, then listens. */
import { once } from 'node:events';
import { createServer } from 'node:http';
import { ConfigError, getConfig } from '@shared/config';
import { createLogger } from '@shared/logger';
import { installCrashHandlers, onShutdown } from '@shared/shutdown';
import { createApp } from './app';
import { createApiContext } from './context';
import { DASHBOARD_PATH } from './routes/dashboard.routes';

async function main(): Promise<void> {
  const config = getConfig();
  const logger = createLogger({ level: config.logLevel, name: 'api' });
  installCrashHandlers(logger);
  const context = await createApiContext(config, logger);
  const app = createApp(context);
  if (config.dashboard)
    logger.info({ path: DASHBOARD_PATH }, 'Bull dashboard enabled (operator credentials required)');
  else
    logger.info('Bull dashboard disabled: set DASHBOARD_USER and DASHBOARD_PASSWORD to enable it');
  const server = createServer(app);
  // Uploads may be slow; a stalled client is cut after 5 minutes without data.
  server.requestTimeout = 0;
  server.timeout = 5 * 60_000;
  server.listen(config.port);
  await once(server, 'listening');
  const address = server.address();
  logger.info(
    {
      port: typeof address === 'object' && address ? address.port : config.port,
      storage: context.store.description,
    },
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
    { name: 'mongodb', run: () => context.close() },
  ]);
}

main().catch((err: unknown) => {
  process.stderr.write(
    `${err instanceof ConfigError ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exit(1);
});
