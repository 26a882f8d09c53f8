/**
 * HTTP Basic authentication for operator pages (the Bull dashboard), against
 * the credentials in DASHBOARD_USER / DASHBOARD_PASSWORD, compared in constant
 * time. These are operator credentials, not an organization's API tokens.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { RequestHandler } from 'express';
import { AppError } from '@shared/errors';

const digest = (s: string) => createHash('sha256').update(s).digest();

export function operatorAuth(credentials: { user: string; password: string }): RequestHandler {
  const expected = digest(`${credentials.user}:${credentials.password}`);
  return (req, _res, next) => {
    const header = req.headers.authorization ?? '';
    const match = /^Basic ([A-Za-z0-9+/=]+)$/i.exec(header);
    const presented = match ? Buffer.from(match[1]!, 'base64').toString('utf8') : '';
    if (match && timingSafeEqual(digest(presented), expected)) return next();
    next(
      new AppError('UNAUTHORIZED', 401, 'Operator credentials are required', undefined, {
        headers: { 'WWW-Authenticate': 'Basic realm="media-admin", charset="UTF-8"' },
      }),
    );
  };
}
