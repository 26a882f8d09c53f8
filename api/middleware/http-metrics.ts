/**
 * Times every request and records it by method, Express route pattern (e.g.
 * `/media/jobs/:id`, never the raw URL, so label values stay bounded) and
 * status; a request no route matched is recorded as `unmatched`.
 */
import type { NextFunction, Request, Response } from 'express';
import type { ApiMetrics } from '@shared/metrics';

export function httpMetrics(metrics: Pick<ApiMetrics, 'observeRequest'>) {
  return (req: Request, res: Response, next: NextFunction) => {
    const started = process.hrtime.bigint();
    res.once('finish', () => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const route = (req.route as { path?: unknown } | undefined)?.path;
      const pattern = typeof route === 'string' ? `${req.baseUrl}${route}` : 'unmatched';
      metrics.observeRequest(req.method, pattern, res.statusCode, seconds);
    });
    next();
  };
}
