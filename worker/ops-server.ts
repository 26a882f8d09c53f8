/**
 * The worker's operability server (node:http; the worker has no other HTTP):
 * GET /healthz (the process is up), GET /readyz (MongoDB, Redis, storage,
 * checked concurrently with a short timeout each) and GET /metrics
 * (Prometheus text; behind METRICS_TOKEN when it is set). Errors are answered
 * in the API's error envelope. Built without listening, like createApp.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { errorBody, Errors, isAppError } from '@shared/errors';
import type { Logger } from '@shared/logger';
import { metricsAuthorized, type MetricsSource } from '@shared/metrics';
import { cachedReadiness, type ReadinessChecks } from '@shared/readiness';

export interface OpsServerDeps {
  checks: ReadinessChecks;
  metrics: MetricsSource;
  metricsToken: string | undefined;
  logger: Logger;
}

type Answer = { status: number; body: unknown } | { status: number; text: string };

const VALID_ID = /^[A-Za-z0-9._:-]{1,128}$/;

function send(
  res: ServerResponse,
  status: number,
  contentType: string,
  payload: string,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { 'Content-Type': contentType, 'Cache-Control': 'no-store', ...headers });
  res.end(payload);
}

export function createOpsServer(deps: OpsServerDeps): Server {
  const readiness = cachedReadiness(deps.checks);
  const handle = async (req: IncomingMessage, path: string): Promise<Answer> => {
    if (req.method !== 'GET' && req.method !== 'HEAD') throw Errors.methodNotAllowed('GET');
    switch (path) {
      case '/healthz':
        return { status: 200, body: { status: 'ok' } };
      case '/readyz': {
        const answer = await readiness();
        // Details for operators only (METRICS_TOKEN, when set).
        const operator = metricsAuthorized(req.headers.authorization, deps.metricsToken);
        return {
          status: answer.status === 'ready' ? 200 : 503,
          body: operator ? answer : { status: answer.status },
        };
      }
      case '/metrics':
        if (!metricsAuthorized(req.headers.authorization, deps.metricsToken)) {
          throw Errors.unauthorized('A valid metrics token is required');
        }
        return { status: 200, text: await deps.metrics.render() };
      default:
        throw Errors.notFound(`No route for ${req.method} ${path}`);
    }
  };

  return createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    const header = req.headers['x-request-id'];
    const requestId = typeof header === 'string' && VALID_ID.test(header) ? header : randomUUID();
    res.setHeader('X-Request-Id', requestId);
    handle(req, path).then(
      (answer) => {
        if ('text' in answer) send(res, answer.status, deps.metrics.contentType, answer.text);
        else
          send(res, answer.status, 'application/json; charset=utf-8', JSON.stringify(answer.body));
      },
      (err: unknown) => {
        const error = isAppError(err) ? err : Errors.internal(err);
        if (error.status >= 500) deps.logger.error({ err, path }, 'ops endpoint failed');
        if (res.headersSent) return void res.destroy();
        send(
          res,
          error.status,
          'application/json; charset=utf-8',
          JSON.stringify(errorBody(error, requestId)),
          error.headers,
        );
      },
    );
  });
}
