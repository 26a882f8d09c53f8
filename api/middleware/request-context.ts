/**
 * Request ids and request logging. A well-formed `X-Request-Id` from the
 * client is kept (so ids follow a request across services), otherwise one is
 * generated; it is echoed in the response header, bound to `req.log`, and
 * carried in every job payload.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Request } from 'express';
import { pinoHttp } from 'pino-http';
import type { Logger } from '@shared/logger';
import type { RequestOrigin } from '@shared/repositories/media.repository';

const VALID_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export function requestContext(logger: Logger) {
  return pinoHttp({
    logger,
    genReqId: (req: IncomingMessage, res) => {
      const header = req.headers['x-request-id'];
      const id = typeof header === 'string' && VALID_ID.test(header) ? header : randomUUID();
      res.setHeader('X-Request-Id', id);
      return id;
    },
    // Who made it (set by bearer auth): the organization and the token's public id, never the token.
    customProps: (req) => {
      const principal = (req as { principal?: { organization: { id: number }; tokenId: string } })
        .principal;
      return {
        requestId: req.id,
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

/** The request's id (set by `requestContext`) as a string. */
export function requestIdOf(req: { id?: unknown }): string {
  return typeof req.id === 'string' || typeof req.id === 'number' ? String(req.id) : 'unknown';
}

/**
 * Where the request came from, as records keep it (`metaData`): the client's
 * address as Express sees it (the socket's, so `::ffff:127.0.0.1` over IPv4;
 * a forwarded one only through TRUST_PROXY) and the User-Agent as sent.
 */
export function originOf(req: Request): RequestOrigin {
  return {
    ipAddress: req.ip ?? req.socket.remoteAddress ?? '',
    userAgent: req.get('user-agent') ?? '',
  };
}
