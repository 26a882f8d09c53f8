/**
 * Builds the Express application from its dependencies without listening, so
 * tests and main.ts wire it the same way.
 */
import express, { type Express } from 'express';
import type { Logger } from '@shared/logger';
import { errorHandler, notFoundHandler } from './middleware/error-handler';
import { requestContext } from './middleware/request-context';

export interface AppDeps {
  logger: Logger;
}

export function createApp(deps: AppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', false);
  app.use(requestContext(deps.logger));

  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });

  app.use(notFoundHandler);
  app.use(errorHandler);
  return app;
}
