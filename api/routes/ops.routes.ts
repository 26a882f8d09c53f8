/**
 * Operability endpoints, without a bearer token: GET /healthz (the process is
 * up; no dependency is contacted), GET /readyz (MongoDB, Redis and storage
 * answer, each checked concurrently with a short timeout) and GET /metrics
 * (Prometheus text; behind METRICS_TOKEN when it is set).
 */
import { Router } from 'express';
import { Errors } from '@shared/errors';
import { metricsAuthorized, type MetricsSource } from '@shared/metrics';
import { checkReadiness, type ReadinessChecks } from '@shared/readiness';

export function opsRoutes(deps: {
  checks: ReadinessChecks;
  metrics: MetricsSource;
  metricsToken: string | undefined;
}): Router {
  const router = Router();

  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });

  router.get('/readyz', async (_req, res) => {
    const readiness = await checkReadiness(deps.checks);
    res.setHeader('Cache-Control', 'no-store');
    res.status(readiness.status === 'ready' ? 200 : 503).json(readiness);
  });

  router.get('/metrics', async (req, res) => {
    if (!metricsAuthorized(req.headers.authorization, deps.metricsToken)) {
      throw Errors.unauthorized('A valid metrics token is required');
    }
    const body = await deps.metrics.render();
    res.setHeader('Cache-Control', 'no-store');
    res.setHeader('Content-Type', deps.metrics.contentType).send(body);
  });

  return router;
}
