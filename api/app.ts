/**
 * Builds the Express application from its dependencies without listening, so
 * tests and main.ts wire it the same way.
 */
import express, { type Express } from 'express';
import type { ApiContext } from './context';
import { beginRequest } from './http/request-context';
import { bearerAuth } from './middleware/auth';
import { corsPolicy } from './middleware/cors';
import { errorHandler, notFoundHandler } from './middleware/error-handler';
import { httpMetrics } from './middleware/http-metrics';
import { idempotency, tapRequestBody } from './middleware/idempotency';
import { rateLimiters } from './middleware/rate-limit';
import { requestLog } from './middleware/request-log';
import { signedUrlAccess } from './middleware/signed-url';
import { uploadGuard } from './middleware/upload-guard';
import { CONSOLE_PATH, consoleDir, consoleRoutes } from './routes/console.routes';
import { archiveRoutes } from './routes/archive.routes';
import { DASHBOARD_PATH, dashboardRoutes } from './routes/dashboard.routes';
import { DOCS_PATH, docsRoutes } from './routes/docs.routes';
import { downloadRoutes } from './routes/download.routes';
import { folderRoutes } from './routes/folders.routes';
import { webhookRoutes } from './routes/webhooks.routes';
import { jobRoutes } from './routes/jobs.routes';
import { mediaRoutes } from './routes/media.routes';
import { trashRoutes } from './routes/trash.routes';
import { opsRoutes } from './routes/ops.routes';
import { renderRoutes } from './routes/render.routes';
import { resumableDiscovery, resumableRoutes } from './routes/resumable.routes';
import type { RouteGuards } from './routes/route-table';
import { signRoutes } from './routes/sign.routes';
import { uploadRoutes } from './routes/upload.routes';
import { directUploadRoutes } from './routes/direct-upload.routes';
import { ARCHIVE_PATH } from './services/archive.service';
import { DOWNLOAD_PATH, RENDER_PATH } from './services/signed-urls.service';

/**
 * What the app is built from: the API context's configuration and services
 * (api/context.ts, which says what each is); the queues (the dashboard),
 * the Redis connection (rate limits) and the `Idempotency-Key` entries are
 * optional (without entries, a request carrying a key is refused).
 */
export type AppDeps = Pick<
  ApiContext,
  | 'config'
  | 'logger'
  | 'tokens'
  | 'uploads'
  | 'resumable'
  | 'directUploads'
  | 'downloads'
  | 'renders'
  | 'jobs'
  | 'mediaJobs'
  | 'mediaService'
  | 'trash'
  | 'folders'
  | 'webhooks'
  | 'signedUrls'
  | 'archives'
  | 'metrics'
  | 'readiness'
> &
  Partial<Pick<ApiContext, 'queues' | 'redis' | 'idempotency'>>;

export function createApp(deps: AppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  // First: it must see the body of a keyed POST from its first byte.
  app.use(tapRequestBody);
  app.set('trust proxy', deps.config.trustProxy);
  app.set('query parser', 'simple');
  // The request's context (its id, its origin; who is asking, once known): http/request-context.ts.
  app.use(beginRequest());
  app.use(requestLog(deps.logger));
  app.use(httpMetrics(deps.metrics));
  // Before authentication: browsers send preflights without credentials.
  const cors = corsPolicy(deps.config.corsOrigins);
  if (cors) app.use(cors);

  app.use(
    opsRoutes({
      checks: deps.readiness,
      metrics: deps.metrics,
      metricsToken: deps.config.metricsToken,
    }),
  );

  // Each page's router is mounted at its path, so a request elsewhere only tests the path.
  app.use(DOCS_PATH, docsRoutes());

  // The web console's static files (CONSOLE_ENABLED; built by `npm run build`).
  if (deps.config.consoleEnabled) {
    const dir = consoleDir();
    if (dir) {
      app.use(CONSOLE_PATH, consoleRoutes({ dir, publicBaseUrl: deps.config.publicBaseUrl }));
    } else {
      deps.logger.warn('the web console is not built (npm run build): /console answers 404');
    }
  }

  if (deps.config.dashboard && deps.queues) {
    const { failureLimit, lockoutMs, ...dashboard } = deps.config.dashboard;
    app.use(
      DASHBOARD_PATH,
      dashboardRoutes(deps.queues, dashboard, {
        failureLimit,
        lockoutMs,
        redis: deps.redis,
        keyPrefix: `${deps.config.queuePrefix}:dashboard-failures:`,
      }),
    );
  }

  const limiters = deps.config.rateLimit
    ? rateLimiters({
        ...deps.config.rateLimit,
        redis: deps.redis,
        keyPrefix: `${deps.config.queuePrefix}:rate-limit:`,
        logger: deps.logger,
      })
    : undefined;
  // A GET with a signed URL's `signature` is verified here instead of asking for a token.
  app.use(
    signedUrlAccess({
      signedUrls: deps.signedUrls,
      paths: [DOWNLOAD_PATH, RENDER_PATH, ARCHIVE_PATH],
    }),
  );
  // tus discovery (OPTIONS) needs no token.
  app.use(resumableDiscovery(deps.config));
  app.use(
    '/media',
    // Guessed tokens are limited where they would cost a MongoDB lookup, and only there.
    bearerAuth(deps.tokens, { beforeLookup: limiters && ((req) => limiters.admitLookup(req)) }),
  );
  // Each route is charged its own cost and guarded in its own chain (routes/route-table.ts).
  const guards: RouteGuards = {
    charge: limiters?.charge,
    upload: {
      admit: uploadGuard({ maxInFlight: deps.config.limits.maxUploadsInFlight }),
      idleTimeoutMs: deps.config.limits.uploadIdleTimeoutMs,
    },
    idempotency: idempotency({
      keys: deps.idempotency,
      jobWaitMs: deps.config.jobWaitMs,
      logger: deps.logger,
    }),
  };
  // Reads first: a request passes through each router mounted before its own, and downloads and
  // renders are most of them (their paths are no other router's, so the order changes no answer).
  app.use(downloadRoutes({ downloads: deps.downloads, metrics: deps.metrics, guards }));
  app.use(
    renderRoutes({
      guards,
      renders: deps.renders,
      rules: { ...deps.config.render, maxOutputPixels: deps.config.limits.maxOutputPixels },
      metrics: deps.metrics,
    }),
  );
  app.use(
    uploadRoutes({ uploads: deps.uploads, config: deps.config, metrics: deps.metrics, guards }),
  );
  app.use(resumableRoutes({ resumable: deps.resumable, config: deps.config, guards }));
  app.use(directUploadRoutes({ directUploads: deps.directUploads, config: deps.config, guards }));
  app.use(signRoutes({ signedUrls: deps.signedUrls, guards }));
  app.use(archiveRoutes({ archives: deps.archives, guards }));
  app.use(jobRoutes({ jobs: deps.jobs, mediaJobs: deps.mediaJobs, config: deps.config, guards }));
  app.use(folderRoutes({ folders: deps.folders, config: deps.config, guards }));
  app.use(webhookRoutes({ webhooks: deps.webhooks, guards }));
  app.use(trashRoutes({ trash: deps.trash, config: deps.config, guards }));
  // Last: its /media/{id} takes what no other /media route named.
  app.use(mediaRoutes({ media: deps.mediaService, config: deps.config, guards }));
  // What no route took (a 404 to come) is charged the default cost.
  if (limiters) app.use('/media', limiters.unrouted);

  app.use(notFoundHandler);
  app.use(errorHandler);
  return app;
}
