/**
 * The one place errors become HTTP responses, in the documented envelope:
 * `{ statusCode, message, error, details?, requestId }`. Unknown errors are a
 * 500 with the request id, logged with their stack. A refusal (4xx, or the
 * 501 of a feature switched off) is logged at `info` with its code.
 */
import { randomUUID } from 'node:crypto';
import { maxHeaderSize, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { ErrorRequestHandler, RequestHandler } from 'express';
import type { Logger } from '@shared/logger';
import { errorBody, Errors, isAppError, isServerFault, type AppError } from '@shared/errors';
import { logOf, requestIdOf } from '../http/request-context';

/** Translates errors thrown by libraries into AppErrors; everything else is a 500. */
export function toAppError(err: unknown): AppError {
  if (isAppError(err)) return err;
  if (err && typeof err === 'object') {
    const e = err as { type?: string; status?: number; statusCode?: number; message?: string };
    // body-parser (express.json) errors
    if (e.type === 'entity.parse.failed')
      return Errors.badRequest('The JSON body is not valid JSON');
    if (e.type === 'entity.too.large')
      return Errors.payloadTooLarge('The request body is too large');
    // Other body-parser errors (charset, encoding, parameter count) carry their status.
    const status = e.status ?? e.statusCode;
    if (typeof e.type === 'string' && typeof status === 'number' && status >= 400 && status < 500) {
      if (status === 413)
        return Errors.payloadTooLarge(e.message ?? 'The request body is too large');
      if (status === 415) return Errors.unsupportedType(e.message ?? 'Unsupported body encoding');
      return Errors.badRequest(e.message ?? 'Bad request');
    }
  }
  return Errors.internal(err);
}

export const errorHandler: ErrorRequestHandler = (err, req, res, _next) => {
  const appError = toAppError(err);
  const requestId = requestIdOf(req);
  if (isServerFault(appError.status)) {
    logOf(req)?.error({ err: appError.cause ?? err, code: appError.code }, appError.message);
  } else {
    logOf(req)?.info({ code: appError.code, status: appError.status }, appError.message);
  }
  if (res.headersSent) {
    // Too late for an envelope: cut the response so the client sees a failure.
    res.destroy();
    return;
  }
  for (const [name, value] of Object.entries(appError.headers ?? {})) res.setHeader(name, value);
  res.status(appError.status).json(errorBody(appError, requestId));
};

/**
 * Errors Node's HTTP parser meets before Express sees a request (headers over
 * the limit, a malformed request line), answered in the same envelope rather
 * than Node's bare status line; the connection is then closed.
 */
export function clientErrorHandler(
  logger: Logger,
): (err: Error & { code?: string }, socket: Duplex) => void {
  return (err, socket) => {
    if (err.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy();
      return;
    }
    const appError =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? Errors.headersTooLarge(maxHeaderSize)
        : Errors.badRequest('The HTTP request is malformed');
    const requestId = randomUUID();
    logger.info({ code: appError.code, parserError: err.code, requestId }, appError.message);
    const body = JSON.stringify(errorBody(appError, requestId));
    socket.end(
      [
        `HTTP/1.1 ${appError.status} ${STATUS_CODES[appError.status] ?? ''}`,
        'Content-Type: application/json; charset=utf-8',
        `Content-Length: ${Buffer.byteLength(body)}`,
        `X-Request-Id: ${requestId}`,
        'Connection: close',
        '',
        body,
      ].join('\r\n'),
    );
  };
}

export const notFoundHandler: RequestHandler = (req, _res, next) => {
  next(Errors.notFound(`No route for ${req.method} ${req.path}`));
};
