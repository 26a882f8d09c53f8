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
    customLogLevel: (_req, res, err) =>
      err || res.statusCode >= 500 ? 'error' : res.statusCode >= 400 ? 'info' : 'info',
    serializers: {
      req: (req: { method: string; url: string }) => ({ method: req.method, url: req.url }),
      res: (res: { statusCode: number }) => ({ statusCode: res.statusCode }),
    },
    // Probes and scrapes come every few seconds; they are not logged.
    autoLogging: { ignore: (req) => ['/healthz', '/readyz', '/metrics'].includes(req.url ?? '') },
  });
}
