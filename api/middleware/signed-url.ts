/**
 * Signed-URL access for GET (and HEAD) routes: a request to one of `paths`
 * that carries a `signature` query parameter is verified instead of asking
 * for a bearer token (bearerAuth lets it through). The signature covers the
 * path, every query parameter and the expiry (api/domain/url-signature.ts);
 * a request that passes reads the signing organization's records with the
 * `read` scope only, and its answers may be cached publicly until the expiry
 * (`cacheControlFor`). Mount it before bearerAuth, for every route signed URLs
 * may name; the route itself is unchanged (it finds the record in its
 * caller's organization, a 404 once the record is deleted).
 *
 * No limit stands in front of it: a signature is checked with an HMAC per
 * key, no database read (the signing organization is read only once the
 * signature holds), so wrong signatures cost nothing worth limiting and a
 * valid signed URL is never refused because of other requests' failures.
 */
import type { RequestHandler } from 'express';
import { SIGNATURE_PARAM } from '../domain/url-signature';
import { contextOf } from '../http/request-context';
import { secondsUntil, type SignedUrlService } from '../services/signed-urls.service';
import type { Scope } from '../services/tokens.service';

/** The token id a signed request's principal carries (no API token is involved). */
export const SIGNED_URL_TOKEN_ID = 'signed-url';
const READ_ONLY: ReadonlySet<Scope> = new Set<Scope>(['read']);

export function signedUrlAccess(deps: {
  signedUrls: SignedUrlService;
  /** The paths signed URLs may name (GET and HEAD only). */
  paths: readonly string[];
}): RequestHandler {
  const paths = new Set(deps.paths);
  return (req, _res, next) => {
    if (!paths.has(req.path) || (req.method !== 'GET' && req.method !== 'HEAD')) return next();
    const at = req.originalUrl.indexOf('?');
    const query = at === -1 ? '' : req.originalUrl.slice(at + 1);
    if (!new URLSearchParams(query).has(SIGNATURE_PARAM)) return next();
    deps.signedUrls.verify(req.path, query).then(
      ({ organization, expiresAt }) => {
        const context = contextOf(req);
        context.principal = { organization, tokenId: SIGNED_URL_TOKEN_ID, scopes: READ_ONLY };
        context.signedUrl = { expiresAt };
        next();
      },
      (err: unknown) => next(err),
    );
  };
}

/**
 * `Cache-Control` of a successful answer to a request a signed URL valid
 * until `signedUntil` admitted: its bytes never change (a key names one
 * content), so it is `public, max-age=<seconds until the URL expires>,
 * immutable`; `bearer` (`private, no-cache` unless given) for a bearer-token request.
 */
export function cacheControlFor(
  signedUntil: Date | undefined,
  bearer = 'private, no-cache',
  now = new Date(),
): string {
  return signedUntil ? `public, max-age=${secondsUntil(signedUntil, now)}, immutable` : bearer;
}
