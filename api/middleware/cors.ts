/**
 * CORS (the `cors` package) for the origins in CORS_ORIGINS: preflights are
 * answered before authentication (a browser sends them without credentials),
 * credentials are off (clients send a bearer token or use a signed URL, never
 * cookies), and the headers a browser script needs to read are exposed.
 * Without CORS_ORIGINS nothing is mounted and no CORS header is sent.
 */
import cors from 'cors';
import type { RequestHandler } from 'express';
import { TUS_REQUEST_HEADERS, TUS_RESPONSE_HEADERS } from '../routes/resumable.routes';

/** Request headers a browser may send cross-origin (beyond the CORS-safelisted ones). */
export const CORS_ALLOWED_HEADERS = [
  'Authorization',
  'Content-Type',
  'Range',
  'If-None-Match',
  'If-Range',
  'Idempotency-Key',
  'Prefer',
  'X-Request-Id',
  ...TUS_REQUEST_HEADERS,
];

/** Response headers a browser script may read (beyond the CORS-safelisted ones). */
export const CORS_EXPOSED_HEADERS = [
  'ETag',
  'Content-Range',
  'Content-Length',
  'Accept-Ranges',
  'Content-Disposition',
  'Location',
  'Retry-After',
  'X-Request-Id',
  'RateLimit-Policy',
  'RateLimit-Limit',
  'RateLimit-Remaining',
  'RateLimit-Reset',
  'Idempotent-Replayed',
  ...TUS_RESPONSE_HEADERS,
];

/** How long a browser may keep a preflight's answer, in seconds. */
const PREFLIGHT_MAX_AGE = 600;

export function corsPolicy(origins: readonly string[]): RequestHandler | undefined {
  if (origins.length === 0) return undefined;
  return cors({
    // `*` answers `Access-Control-Allow-Origin: *`; a list answers the request's origin when listed.
    origin: origins.includes('*') ? '*' : [...origins],
    methods: ['GET', 'HEAD', 'POST', 'PATCH', 'DELETE'],
    allowedHeaders: CORS_ALLOWED_HEADERS,
    exposedHeaders: CORS_EXPOSED_HEADERS,
    credentials: false,
    maxAge: PREFLIGHT_MAX_AGE,
    optionsSuccessStatus: 204,
  });
}
