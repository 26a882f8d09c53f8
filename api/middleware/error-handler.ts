/**
 * The one place errors become HTTP responses, in the documented envelope:
 * `{ statusCode, message, error, details?, requestId }`. Unknown errors are a
 * 500 with the request id, logged with their stack.
 */
import type { ErrorRequestHandler, RequestHandler } from 'express';
import { Errors, isAppError, type AppError } from '@shared/errors';
import { requestIdOf } from './request-context';

export interface ErrorBody {
  statusCode: number;
  message: string;
  error: string;
  details?: unknown[];
  requestId: string;
  [key: string]: unknown;
}

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
  if (appError.status >= 500) {
    req.log?.error({ err: appError.cause ?? err, code: appError.code }, appError.message);
  } else {
    req.log?.info({ code: appError.code, status: appError.status }, appError.message);
  }
  if (res.headersSent) {
    // Too late for an envelope: cut the response so the client sees a failure.
    res.destroy();
    return;
  }
  for (const [name, value] of Object.entries(appError.headers ?? {})) res.setHeader(name, value);
  const body: ErrorBody = {
    statusCode: appError.status,
    message: appError.message,
    error: appError.code,
    ...(appError.details ? { details: appError.details } : {}),
    ...(appError.extra ?? {}),
    requestId,
  };
  res.status(appError.status).json(body);
};

export const notFoundHandler: RequestHandler = (req, _res, next) => {
  next(Errors.notFound(`No route for ${req.method} ${req.path}`));
};
