/**
 * Builds the Express application from its dependencies without listening, so
 * tests and main.ts wire it the same way.
 */
import express, { type Express } from 'express';
import type { Config } from '@shared/config';
import type { Logger } from '@shared/logger';
import { bearerAuth } from './middleware/auth';
import { corsPolicy } from './middleware/cors';
import { errorHandler, notFoundHandler } from './middleware/error-handler';
import { httpMetrics } from './middleware/http-metrics';
import { idempotency, tapRequestBody } from './middleware/idempotency';
import { rateLimiters } from './middleware/rate-limit';
import { requestContext } from './middleware/request-context';
import { cacheControlFor, signedUrlAccess } from './middleware/signed-url';
import { uploadGuard } from './middleware/upload-guard';
import type { RouteGuards } from './routes/route-table';
import type { ApiMetrics } from '@shared/metrics';
import type { ReadinessChecks } from '@shared/readiness';
import type { Queue } from 'bullmq';
import type { RedisConnection } from '@shared/queue/redis';
import { dashboardRoutes } from './routes/dashboard.routes';
import { docsRoutes } from './routes/docs.routes';
import { folderRoutes } from './routes/folders.routes';
import { mediaRoutes } from './routes/media.routes';
import { downloadRoutes } from './routes/download.routes';
import { jobRoutes } from './routes/jobs.routes';
import { opsRoutes } from './routes/ops.routes';
import { signRoutes } from './routes/sign.routes';
import { PRIVATE_CACHE_CONTROL, renderRoutes } from './routes/render.routes';
import { uploadRoutes } from './routes/upload.routes';
import type { DownloadService } from './services/download.service';
import type { JobsService } from './services/jobs.service';
import type { FoldersService } from './services/folders.service';
import type { IdempotencyService } from './services/idempotency.service';
import type { MediaJobsService } from './services/media-jobs.service';
import type { MediaService } from './services/media.service';
import { DOWNLOAD_PATH, RENDER_PATH, type SignedUrlService } from './services/signed-urls.service';
import type { RenderService } from './services/render.service';
import type { TokensService } from './services/tokens.service';
import type { UploadService } from './services/upload.service';

export interface AppDeps {
  config: Config;
  logger: Logger;
  tokens: TokensService;
  uploads: UploadService;
  downloads: DownloadService;
  /** Renders (GET /media/render). */
  renders: RenderService;
  jobs: JobsService;
  mediaJobs: MediaJobsService;
  mediaService: MediaService;
  folders: FoldersService;
  /** Signs URLs (POST /media/sign) and verifies signed requests. */
  signedUrls: SignedUrlService;
  /** HTTP latency and bytes stored, served on GET /metrics. */
  metrics: ApiMetrics;
  /** The dependencies GET /readyz checks (MongoDB, Redis, storage). */
  readiness: ReadinessChecks;
  /** The queues the dashboard shows (when DASHBOARD_USER/PASSWORD are set). */
  queues?: Queue[];
  /**
   * The fail-fast Redis connection: where the per-token rate limit counts
   * (without it, in this process's memory).
   */
  redis?: RedisConnection | undefined;
  /** `Idempotency-Key` entries (without them, a request carrying one is refused). */
  idempotency?: IdempotencyService | undefined;
}

export function createApp(deps: AppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  // First: it must see the body of a keyed POST from its first byte.
  app.use(tapRequestBody);
  app.set('trust proxy', deps.config.trustProxy);
  app.set('query parser', 'simple');
  app.use(requestContext(deps.logger));
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

  app.use(docsRoutes());

  if (deps.config.dashboard && deps.queues) {
    const { failureLimit, lockoutMs, ...dashboard } = deps.config.dashboard;
    app.use(
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
  app.use(signedUrlAccess({ signedUrls: deps.signedUrls, paths: [DOWNLOAD_PATH, RENDER_PATH] }));
  app.use(
    '/media',
    // Guessed tokens are limited where they would cost a MongoDB lookup, and only there.
    bearerAuth(deps.tokens, { beforeLookup: limiters && ((req) => limiters.admitLookup(req)) }),
  );
  // Each route is charged its own cost and guarded in its own chain (routes/route-table.ts).
  const guards: RouteGuards = {
    charge: limiters?.charge,
    upload: uploadGuard({
      maxInFlight: deps.config.limits.maxUploadsInFlight,
      idleTimeoutMs: deps.config.limits.uploadIdleTimeoutMs,
    }),
    idempotency: idempotency({
      keys: deps.idempotency,
      jobWaitMs: deps.config.jobWaitMs,
      logger: deps.logger,
    }),
  };
  app.use(
    uploadRoutes({ uploads: deps.uploads, config: deps.config, metrics: deps.metrics, guards }),
  );
  app.use(downloadRoutes({ downloads: deps.downloads, metrics: deps.metrics, guards }));
  app.use(signRoutes({ signedUrls: deps.signedUrls, guards }));
  app.use(
    renderRoutes({
      guards,
      renders: deps.renders,
      // Follows the pixels and format asked for (docs/api.md, "Rate limits").
      cost: (req) => deps.renders.cost(req.query, req.headers.accept),
      metrics: deps.metrics,
      // A signed render URL may name any size within the maxima, and its answer is cached publicly.
      isSigned: (req) => req.signedUrl !== undefined,
      cacheControl: (req) => (req.signedUrl ? cacheControlFor(req) : PRIVATE_CACHE_CONTROL),
    }),
  );
  app.use(jobRoutes({ jobs: deps.jobs, mediaJobs: deps.mediaJobs, guards }));
  app.use(folderRoutes({ folders: deps.folders, guards }));
  // Last: its /media/{id} takes what no other /media route named.
  app.use(mediaRoutes({ media: deps.mediaService, config: deps.config, guards }));
  // What no route took (a 404 to come) is charged the default cost.
  if (limiters) app.use('/media', limiters.unrouted);

  app.use(notFoundHandler);
  app.use(errorHandler);
  return app;
}
