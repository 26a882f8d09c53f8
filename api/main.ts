/** The API process: wires configuration, connections and the app, then listens. */
// First: tracing instruments the modules loaded after it (api/tracing.ts).
import { tracing } from './tracing';
import { once } from 'node:events';
import { getConfig } from '@shared/config';
import { runMain } from '@shared/run-main';
import { createLogger } from '@shared/logger';
import {
  gracefulHttpServer,
  httpShutdownBudget,
  installCrashHandlers,
  onShutdown,
} from '@shared/shutdown';
import { createApp } from './app';
import { createApiContext } from './context';
import { createHttpServer } from './http-server';
import { DASHBOARD_PATH } from './routes/dashboard.routes';

async function main(): Promise<void> {
  const config = getConfig();
  const logger = createLogger({ level: config.logLevel, name: 'api' });
  installCrashHandlers(logger);
  const context = await createApiContext(config, logger);
  const app = createApp(context);
  if (config.dashboard)
    logger.info(
      { path: DASHBOARD_PATH, write: config.dashboard.write },
      config.dashboard.write
        ? 'Bull dashboard enabled with its actions (DASHBOARD_WRITE=true; operator credentials required)'
        : 'Bull dashboard enabled, read-only (operator credentials required; DASHBOARD_WRITE=true allows its actions)',
    );
  else
    logger.info('Bull dashboard disabled: set DASHBOARD_USER and DASHBOARD_PASSWORD to enable it');
  const server = createHttpServer(app, logger);
  const http = gracefulHttpServer(server, logger);
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

  // SIGTERM: new connections are refused at once; requests in flight may finish
  // within most of SHUTDOWN_TIMEOUT_MS, then the rest are aborted (and clean up).
  onShutdown(logger, config.shutdownTimeoutMs, () => [
    {
      name: 'http',
      run: async () => {
        const { aborted } = await http.close(httpShutdownBudget(config.shutdownTimeoutMs));
        logger.info({ aborted }, 'HTTP server closed');
      },
    },
    { name: 'connections', run: () => context.close() },
    // The spans of the last requests are exported before the process exits.
    { name: 'tracing', run: () => tracing?.shutdown() ?? Promise.resolve() },
  ]);
}

runMain(main);
