/**
 * The worker's operability server (node:http; the worker has no other HTTP):
 * GET /healthz (the process is up), GET /readyz (MongoDB, Redis, storage,
 * checked concurrently with a short timeout each) and GET /metrics
 * (Prometheus text; behind METRICS_TOKEN when it is set). Built without
 * listening, like createApp.
 */
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { Logger } from '@shared/logger';
import { metricsAuthorized, type MetricsSource } from '@shared/metrics';
import { checkReadiness, type ReadinessChecks } from '@shared/readiness';

export interface OpsServerDeps {
  checks: ReadinessChecks;
  metrics: MetricsSource;
  metricsToken: string | undefined;
  logger: Logger;
}

function json(res: ServerResponse, status: number, body: unknown, headers = {}): void {
  res.writeHead(status, {
    'Content-Type': 'application/json; charset=utf-8',
    'Cache-Control': 'no-store',
    ...headers,
  });
  res.end(JSON.stringify(body));
}

export function createOpsServer(deps: OpsServerDeps): Server {
  const handle = async (method: string, path: string, authorization: string | undefined) => {
    if (method !== 'GET' && method !== 'HEAD') {
      return { status: 405, body: { error: 'METHOD_NOT_ALLOWED' }, headers: { Allow: 'GET' } };
    }
    switch (path) {
      case '/healthz':
        return { status: 200, body: { status: 'ok' } };
      case '/readyz': {
        const readiness = await checkReadiness(deps.checks);
        return { status: readiness.status === 'ready' ? 200 : 503, body: readiness };
      }
      case '/metrics':
        if (!metricsAuthorized(authorization, deps.metricsToken)) {
          return {
            status: 401,
            body: { error: 'UNAUTHORIZED', message: 'A valid metrics token is required' },
            headers: { 'WWW-Authenticate': 'Bearer realm="media"' },
          };
        }
        return { status: 200, text: await deps.metrics.render() };
      default:
        return { status: 404, body: { error: 'NOT_FOUND' } };
    }
  };

  return createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    handle(req.method ?? 'GET', path, req.headers.authorization).then(
      (answer) => {
        if ('text' in answer) {
          res.writeHead(answer.status, {
            'Content-Type': deps.metrics.contentType,
            'Cache-Control': 'no-store',
          });
          res.end(answer.text);
        } else json(res, answer.status, answer.body, answer.headers);
      },
      (err: unknown) => {
        deps.logger.error({ err, path }, 'ops endpoint failed');
        if (!res.headersSent) json(res, 500, { error: 'INTERNAL' });
        else res.destroy();
      },
    );
  });
}
