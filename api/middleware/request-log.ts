/**
 * Request logging: one line per request when its answer ends ("request
 * completed" at `info`; "request errored" at `error` for a 5xx other than a
 * switched-off feature's 501, whose cause the error handler logs beside it),
 * with the request's id, method, URL and status, how long it took, and who
 * made it once authenticated: the organization and the token's public id,
 * never the token. The request's context gets a child logger bound to the
 * same (`logOf(req)`), made when something first logs through it.
 *
 * Written here rather than with pino-http, which this service used before:
 * pino-http makes two child loggers per request (their bindings serialised
 * and redacted) before anything logs through them, and a 304's CPU went
 * 7% down without them (docs/performance.md, "The request log").
 */
import type { RequestHandler } from 'express';
import { isServerFault } from '@shared/errors';
import type { Logger } from '@shared/logger';
import { contextOf } from '../http/request-context';

/** Probes and scrapes come every few seconds; they are not logged. */
const UNLOGGED = new Set(['/healthz', '/readyz', '/metrics']);

export function requestLog(logger: Logger): RequestHandler {
  return (req, res, next) => {
    const start = Date.now();
    const bindings = () => {
      const { requestId, principal } = contextOf(req);
      return {
        req: { method: req.method, url: req.url },
        requestId,
        ...(principal
          ? { organizationId: principal.organization.id, tokenId: principal.tokenId }
          : {}),
      };
    };
    let log: Logger | undefined;
    Object.defineProperty(contextOf(req), 'log', {
      enumerable: true,
      get: () => (log ??= logger.child(bindings())),
    });
    if (!UNLOGGED.has(req.url)) {
      const ended = () => {
        res.off('finish', ended);
        res.off('close', ended);
        const failed = isServerFault(res.statusCode);
        const level = failed ? 'error' : 'info';
        // Above LOG_LEVEL the line is not even built.
        if (!logger.isLevelEnabled(level)) return;
        logger[level](
          { ...bindings(), res: { statusCode: res.statusCode }, responseTime: Date.now() - start },
          failed ? 'request errored' : 'request completed',
        );
      };
      res.on('finish', ended);
      res.on('close', ended);
    }
    next();
  };
}
