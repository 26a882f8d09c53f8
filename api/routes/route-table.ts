/**
 * Where a `/media` route declares what guards it: the scope a token needs,
 * its rate-limit cost and whether its body is an upload streamed to storage.
 * The guards are attached to the route itself, so whatever spelling Express
 * routes to a handler (any case, with or without a trailing slash) gets that
 * handler's cost, scope, upload guard and `Idempotency-Key` handling; nothing
 * compares request paths.
 *
 * Each route runs, in order: the charge of its cost, the scope check, the
 * upload guard (upload routes), `Idempotency-Key` (POSTs), then its handlers.
 */
import type { RequestHandler, Router } from 'express';
import { requireScope } from '../middleware/auth';
import { DEFAULT_COST, type Cost } from '../middleware/rate-limit';
import type { Scope } from '../services/tokens.service';

export type { Cost };

export interface RouteSpec {
  /** The scope a token needs (else 403 INSUFFICIENT_SCOPE). */
  scope: Scope;
  /** Cost units charged when the request arrives (docs/api.md, "Rate limits"). Default 1. */
  cost?: Cost;
  /** Its multipart body streams to storage: the in-flight cap and the idle timeout apply. */
  upload?: boolean;
}

/** The guards routes are built with (app.ts makes them from the configuration). */
export interface RouteGuards {
  /** Charges a cost to the caller's budget; absent when rate limiting is off. */
  charge?: ((cost: Cost) => RequestHandler) | undefined;
  /** The in-flight cap and idle timeout of uploads. */
  upload?: RequestHandler | undefined;
  /** `Idempotency-Key` on POSTs. */
  idempotency?: RequestHandler | undefined;
}

type Method = 'get' | 'post' | 'patch' | 'delete';

/** Registers routes on `router`, each with the guards its spec asks for. */
export class RouteTable {
  constructor(
    readonly router: Router,
    private readonly guards: RouteGuards,
  ) {}

  get(path: string, spec: RouteSpec, ...handlers: RequestHandler[]): this {
    return this.add('get', path, spec, handlers);
  }

  post(path: string, spec: RouteSpec, ...handlers: RequestHandler[]): this {
    return this.add('post', path, spec, handlers);
  }

  patch(path: string, spec: RouteSpec, ...handlers: RequestHandler[]): this {
    return this.add('patch', path, spec, handlers);
  }

  delete(path: string, spec: RouteSpec, ...handlers: RequestHandler[]): this {
    return this.add('delete', path, spec, handlers);
  }

  private add(method: Method, path: string, spec: RouteSpec, handlers: RequestHandler[]): this {
    const { charge, upload, idempotency } = this.guards;
    const chain: RequestHandler[] = [
      ...(charge ? [charge(spec.cost ?? DEFAULT_COST)] : []),
      requireScope(spec.scope),
      ...(spec.upload && upload ? [upload] : []),
      ...(method === 'post' && idempotency ? [idempotency] : []),
      ...handlers,
    ];
    this.router[method](path, ...chain);
    return this;
  }
}
