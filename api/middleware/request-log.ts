/**
 * Request logging (pino-http): one line per request, with a child logger
 * bound to the request's id (api/http/request-context.ts, which made it) as
 * `req.log`, and who made the request once authenticated: the organization
 * and the token's public id, never the token.
 */
import { pinoHttp } from 'pino-http';
import type { Logger } from '@shared/logger';
import { contextOf } from '../http/request-context';

export function requestLog(logger: Logger) {
  return pinoHttp({
    logger,
    genReqId: (req) => contextOf(req).requestId,
    customProps: (req) => {
      const { requestId, principal } = contextOf(req);
      return {
        requestId,
        ...(principal
          ? { organizationId: principal.organization.id, tokenId: principal.tokenId }
          : {}),
      };
    },
    // 'silent' when the logger would drop the line (LOG_LEVEL above it): pino-http then
    // skips the line's child logger and bindings, a few per cent of a 304's CPU
    // (docs/performance.md, "What a 304 costs, item by item").
    customLogLevel: (_req, res, err) => {
      const level = err || res.statusCode >= 500 ? 'error' : 'info';
      return logger.isLevelEnabled(level) ? level : 'silent';
    },
    serializers: {
      req: (req: { method: string; url: string }) => ({ method: req.method, url: req.url }),
      res: (res: { statusCode: number }) => ({ statusCode: res.statusCode }),
    },
    // Probes and scrapes come every few seconds; they are not logged.
    autoLogging: { ignore: (req) => ['/healthz', '/readyz', '/metrics'].includes(req.url ?? '') },
  });
}
