/**
 * Operability endpoints, without a bearer token: GET /healthz (the process is
 * up; no dependency is contacted), GET /readyz (MongoDB, Redis and storage
 * answer, each checked concurrently with a short timeout, at most once a
 * second; which one failed is told only to operators: METRICS_TOKEN, when it
 * is set) and GET /metrics (Prometheus text; behind METRICS_TOKEN when set).
 */
import { Router } from 'express';
import { Errors } from '@shared/errors';
import { metricsAuthorized, type MetricsSource } from '@shared/metrics';
import { cachedReadiness, type ReadinessChecks } from '@shared/readiness';

export function opsRoutes(deps: {
  checks: ReadinessChecks;
  metrics: MetricsSource;
  metricsToken: string | undefined;
}): Router {
  const router = Router();
  const readiness = cachedReadiness(deps.checks);

  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });

  router.get('/readyz', async (req, res) => {
    const answer = await readiness();
    res.setHeader('Cache-Control', 'no-store');
    // What each dependency answered is for operators (METRICS_TOKEN, when set); others see the status.
    const operator = metricsAuthorized(req.headers.authorization, deps.metricsToken);
    res
      .status(answer.status === 'ready' ? 200 : 503)
      .json(operator ? answer : { status: answer.status });
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
