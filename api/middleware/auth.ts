/**
 * Bearer-token authentication with passport + passport-http-bearer. Every
 * authenticated request's context (api/http/request-context.ts) carries its
 * principal (its organization, token and scopes); a missing,
 * malformed, unknown, expired or revoked token is a 401 with
 * `WWW-Authenticate: Bearer` in the error envelope. A request a signed URL
 * admitted (middleware/signed-url.ts) already has its principal and passes.
 *
 * `beforeLookup` guards MongoDB from guessed tokens (the per-address and
 * global limits of middleware/rate-limit.ts): TokensService calls it only
 * for a token that is neither cached nor carries this service's check, so a
 * valid token is never refused because of other requests' failures.
 */
import type { Request, RequestHandler } from 'express';
import passport from 'passport';
import { Strategy as BearerStrategy, type VerifyFunctionWithRequest } from 'passport-http-bearer';
import { Errors } from '@shared/errors';
import { contextOf, principalOf } from '../http/request-context';
import type { BeforeLookup, Principal, Scope, TokensService } from '../services/tokens.service';

export function bearerAuth(
  tokens: TokensService,
  hooks: { beforeLookup?: ((req: Request) => ReturnType<BeforeLookup>) | undefined } = {},
): RequestHandler {
  const authenticator = new passport.Passport();
  const { beforeLookup } = hooks;
  authenticator.use(
    'bearer',
    new BearerStrategy<VerifyFunctionWithRequest>(
      { passReqToCallback: true },
      (req, token, done) => {
        tokens.verify(token, { beforeLookup: beforeLookup && (() => beforeLookup(req)) }).then(
          (principal) => done(null, principal ?? false),
          (err: unknown) => done(err),
        );
      },
    ),
  );
  return (req, res, next) => {
    const context = contextOf(req);
    // Admitted by a signed URL (middleware/signed-url.ts): no token is asked for.
    if (context.signedUrl && context.principal) return next();
    const refuse = (message: string) => next(Errors.unauthorized(message));
    const header = req.headers.authorization;
    if (!header) return refuse('A bearer token is required');
    if (!/^Bearer [^\s]+$/i.test(header)) {
      return refuse('The Authorization header must read "Bearer <token>"');
    }
    const handler = authenticator.authenticate(
      'bearer',
      { session: false },
      (err: unknown, principal: Principal | false) => {
        if (err) return next(err);
        if (!principal) return refuse('The token is not valid (unknown, expired or revoked)');
        context.principal = principal;
        next();
      },
    ) as RequestHandler;
    handler(req, res, next);
  };
}

/**
 * Refuses a token without `scope` with 403 INSUFFICIENT_SCOPE and
 * `WWW-Authenticate: Bearer error="insufficient_scope"` (RFC 6750).
 */
export function requireScope(scope: Scope): RequestHandler {
  return (req, _res, next) => {
    next(principalOf(req).scopes.has(scope) ? undefined : Errors.insufficientScope(scope));
  };
}
