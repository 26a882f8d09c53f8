/**
 * Headers of the pages a browser shows from the API's own origin (the Bull
 * dashboard, the Swagger UI at /docs): no other site may frame them
 * (clickjacking: a framed dashboard or "Authorize" dialog under a decoy),
 * said both ways browsers understand, `X-Frame-Options: DENY` and the
 * Content-Security-Policy directive `frame-ancestors 'none'`; a page may add
 * a whole policy of its own (`pageProtection(policy)`).
 */
import type { RequestHandler } from 'express';

export const NO_FRAMING = "frame-ancestors 'none'";

/** Sets X-Frame-Options and a CSP: `directives` (frame-ancestors 'none' added when missing). */
export function pageProtection(directives: readonly string[] = []): RequestHandler {
  const policy = [
    ...directives,
    ...(directives.some((d) => d.startsWith('frame-ancestors')) ? [] : [NO_FRAMING]),
  ].join('; ');
  return (_req, res, next) => {
    res.setHeader('X-Frame-Options', 'DENY');
    res.setHeader('Content-Security-Policy', policy);
    next();
  };
}
