/**
 * Where a `/media` route declares itself: the scope a token needs, its
 * rate-limit cost, and its input: the schema of its path parameters, its
 * query and its body (JSON, or fields from wherever the client put them), or
 * its streamed multipart form (api/forms/form-spec.ts). Its handler gets the
 * caller and the parsed, typed input, and makes one service call with them:
 * a service takes `(caller, input)` and never sees the request.
 *
 * The guards are attached to the route itself, so whatever spelling Express
 * routes to a handler (any case, with or without a trailing slash) gets that
 * handler's cost, scope, upload guard and `Idempotency-Key` handling; nothing
 * compares request paths. Each route runs, in order: the charge of its cost,
 * the scope check, the upload guard (routes with a form), `Idempotency-Key`
 * (POSTs, unless the route says `idempotency: false`), its body parsers, `available`, then its input is read (body,
 * query, then path parameters; the first that fails is the 400) and the
 * handler called.
 */
import express, {
  type NextFunction,
  type Request,
  type RequestHandler,
  type Response,
  type Router,
} from 'express';
import type { z } from 'zod';
import type { Caller } from '../domain/caller';
import type { StreamedForm } from '../domain/streamed-form';
import { streamedForm, type FormFieldsOf, type FormSpec } from '../forms/form-spec';
import { readFields } from '../forms/multipart-form';
import { callerOf } from '../http/request-context';
import { parseInput } from '../http/validate';
import { requireScope } from '../middleware/auth';
import { DEFAULT_COST, type Cost } from '../middleware/rate-limit';
import type { Scope } from '../services/tokens.service';

export type { Cost };

/** Media types a JSON body may be sent as. */
const JSON_TYPES = ['application/json', 'application/*+json'];

/** A body read from JSON (and, with `urlencoded`, from a urlencoded form), checked by `schema`. */
export interface JsonBody<S extends z.ZodType = z.ZodType> {
  from: 'json';
  schema: S;
  /** The most the body may hold (413 PAYLOAD_TOO_LARGE), as body-parser reads it. */
  limit: number | string;
  urlencoded?: boolean;
}

/**
 * Fields read from wherever the client put them (a multipart or urlencoded
 * form, a JSON object, the query string: `readFields`), checked by `schema`,
 * whose keys are the names accepted (any other is 400).
 */
export interface FieldsBody<S extends z.ZodObject = z.ZodObject> {
  from: 'fields';
  schema: S;
  limit: number | string;
}

export function jsonBody<S extends z.ZodType>(
  schema: S,
  options: { limit: number | string; urlencoded?: boolean },
): JsonBody<S> {
  return { from: 'json', schema, ...options };
}

export function fieldsBody<S extends z.ZodObject>(
  schema: S,
  options: { limit: number | string },
): FieldsBody<S> {
  return { from: 'fields', schema, ...options };
}

export interface RouteSpec {
  /** The scope a token needs (else 403 INSUFFICIENT_SCOPE). */
  scope: Scope;
  /** Cost units charged when the request arrives (docs/api.md, "Rate limits"). Default 1. */
  cost?: Cost | undefined;
  /** Throws when the operation is off on this server, before any input is read. */
  available?: () => void;
  params?: z.ZodType;
  query?: z.ZodType;
  body?: JsonBody | FieldsBody;
  /** A multipart form streamed to storage: the in-flight cap and the idle timeout apply. */
  form?: FormSpec<string, unknown>;
  /**
   * false: a POST that only reads and answers a stream (an archive), which
   * `Idempotency-Key` cannot replay; the header is ignored (running it again is harmless).
   */
  idempotency?: false;
}

type Output<S> = S extends z.ZodType ? z.output<S> : undefined;
type Declared<Spec, K extends keyof RouteSpec> = Spec extends { [P in K]: infer S } ? S : undefined;

/** What a route's handler is given: the caller, and its input as its spec declared it. */
export interface RouteCall<Spec extends RouteSpec> {
  caller: Caller;
  params: Output<Declared<Spec, 'params'>>;
  query: Output<Declared<Spec, 'query'>>;
  body: Declared<Spec, 'body'> extends { schema: infer S } ? Output<S> : undefined;
  form: Declared<Spec, 'form'> extends FormSpec<infer Name, infer Item>
    ? StreamedForm<FormFieldsOf<Name>, Item>
    : undefined;
  req: Request;
}

export type RouteHandler<Spec extends RouteSpec> = (
  call: RouteCall<Spec>,
  res: Response,
  next: NextFunction,
) => Promise<void>;

/** The guards routes are built with (app.ts makes them from the configuration). */
export interface RouteGuards {
  /** Charges a cost to the caller's budget; absent when rate limiting is off. */
  charge?: ((cost: Cost) => RequestHandler) | undefined;
  /** Uploads: the in-flight cap (a middleware) and the idle timeout handed to the form reader. */
  upload?: { admit: RequestHandler; idleTimeoutMs: number } | undefined;
  /** `Idempotency-Key` on POSTs. */
  idempotency?: RequestHandler | undefined;
}

type Method = 'get' | 'post' | 'patch' | 'delete';

/** Registers routes on `router`, each with the guards and the input its spec declares. */
export class RouteTable {
  constructor(
    readonly router: Router,
    private readonly guards: RouteGuards,
  ) {}

  get<S extends RouteSpec>(path: string, spec: S, handler: RouteHandler<S>): this {
    return this.add('get', path, spec, handler);
  }

  post<S extends RouteSpec>(path: string, spec: S, handler: RouteHandler<S>): this {
    return this.add('post', path, spec, handler);
  }

  patch<S extends RouteSpec>(path: string, spec: S, handler: RouteHandler<S>): this {
    return this.add('patch', path, spec, handler);
  }

  delete<S extends RouteSpec>(path: string, spec: S, handler: RouteHandler<S>): this {
    return this.add('delete', path, spec, handler);
  }

  private add<S extends RouteSpec>(
    method: Method,
    path: string,
    spec: S,
    handler: RouteHandler<S>,
  ): this {
    const { charge, upload, idempotency } = this.guards;
    const chain: RequestHandler[] = [
      ...(charge ? [charge(spec.cost ?? DEFAULT_COST)] : []),
      requireScope(spec.scope),
      ...(spec.form && upload ? [upload.admit] : []),
      ...(method === 'post' && idempotency && spec.idempotency !== false ? [idempotency] : []),
      ...bodyParsers(spec.body),
      async (req, res, next) => {
        spec.available?.();
        const call = {
          caller: callerOf(req),
          body: await readBody(req, spec.body),
          query: spec.query && parseInput(spec.query, req.query),
          params: spec.params && parseInput(spec.params, req.params),
          form: spec.form && streamedForm(req, spec.form, { idleTimeoutMs: upload?.idleTimeoutMs }),
          req,
        };
        await handler(call as RouteCall<S>, res, next);
      },
    ];
    this.router[method](path, ...chain);
    return this;
  }
}

function bodyParsers(body: RouteSpec['body']): RequestHandler[] {
  if (!body) return [];
  const { limit } = body;
  const json = express.json({ limit, type: JSON_TYPES });
  const urlencoded = express.urlencoded({ limit, extended: false });
  if (body.from === 'fields' || body.urlencoded) return [json, urlencoded];
  return [json];
}

async function readBody(req: Request, body: RouteSpec['body']): Promise<unknown> {
  if (!body) return undefined;
  if (body.from === 'json') return parseInput(body.schema, req.body ?? {});
  return parseInput(body.schema, await readFields(req, Object.keys(body.schema.shape)));
}
