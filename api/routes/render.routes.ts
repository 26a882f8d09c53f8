/**
 * GET /media/render?media=<key>&w=&h=&fit=&format=&q=&metadata= (or
 * preset=<name>): a resized variant of a stored image, rendered on first
 * request by the image workers and streamed from storage afterwards (the
 * first answer takes the bytes the worker handed over, when it did).
 *
 * Answers carry ETag (the variant's, strong: a variant's bytes never
 * change), Content-Type, Content-Length, `Accept` added to `Vary` when
 * format=auto (after the `Origin` CORS puts there),
 * `Cache-Control: private` (bearer-authenticated), an inline disposition,
 * `Accept-Ranges`; `Range` gives 206 (416 when unsatisfiable) and a matching
 * `If-None-Match` gives 304.
 *
 * `renderHandler` is the whole operation, apart from authentication: a
 * signature middleware may stand in front of it instead of the bearer token
 * (it marks the request through `isSigned`; the route here is bearer-only).
 */
import { Router, type Request, type RequestHandler, type Response } from 'express';
import { create as contentDisposition } from 'content-disposition';
import { pipeline } from 'node:stream/promises';
import { Errors } from '@shared/errors';
import { keyBaseName } from '@shared/media/naming';
import type { ApiMetrics } from '@shared/metrics';
import { principalOf } from '../middleware/auth';
import { requestIdOf } from '../middleware/request-context';
import { variantTag, type RenderService } from '../services/render.service';
import { noneMatch, requestedRange } from '../http/byte-ranges';
import { RouteTable, type Cost, type RouteGuards } from './route-table';

/** How long a browser may keep a bearer-fetched variant without asking (it never changes). */
export const PRIVATE_CACHE_CONTROL = 'private, max-age=86400';

export interface RenderRouteDeps {
  renders: RenderService;
  /** Counts the bytes sent (media_bytes_served_total) and the renders by outcome (media_renders_total). */
  metrics?: Pick<ApiMetrics, 'bytesServed' | 'renderAnswered'>;
  /** Whether a request carries a valid render signature (set by the signature middleware); none by default. */
  isSigned?: (req: Request) => boolean;
  /** Cache-Control of the answer; PRIVATE_CACHE_CONTROL by default. */
  cacheControl?: (req: Request) => string;
}

export function renderHandler(deps: RenderRouteDeps): RequestHandler {
  return async (req: Request, res: Response) => {
    const org = principalOf(req).organization;
    const accept = req.headers.accept;
    const { record, variant, negotiated, rendered, data } = await deps.renders.render(
      org,
      req.query,
      {
        requestId: requestIdOf(req),
        accept,
        signed: deps.isSigned?.(req) ?? false,
      },
    );
    deps.metrics?.renderAnswered(rendered ? 'rendered' : 'stored');
    const etag = `"${variantTag(variant.key)}"`;
    res.setHeader('ETag', etag);
    res.setHeader('Cache-Control', deps.cacheControl?.(req) ?? PRIVATE_CACHE_CONTROL);
    // Appended: the CORS layer may have set `Vary: Origin` already, and a shared cache needs both.
    if (negotiated) res.vary('Accept');
    res.setHeader('Accept-Ranges', 'bytes');
    if (noneMatch(req.headers['if-none-match'], etag)) {
      res.status(304).end();
      return;
    }
    const range = requestedRange(req, variant.bytes, etag);
    if (range === 'unsatisfiable') throw Errors.rangeNotSatisfiable(variant.bytes);
    // A first render's bytes may have come with the job (no read from storage then).
    const body =
      req.method === 'HEAD' || data
        ? undefined
        : await deps.renders.open(variant, range ?? undefined);
    const ext = variant.key.slice(variant.key.lastIndexOf('.') + 1);
    res.setHeader('Content-Type', variant.mimetype);
    res.setHeader(
      'Content-Disposition',
      contentDisposition(`${keyBaseName(record.name)}.${ext}`, { type: 'inline' }),
    );
    res.setHeader('X-Content-Type-Options', 'nosniff');
    if (range) {
      res.status(206);
      res.setHeader('Content-Range', `bytes ${range.start}-${range.end}/${variant.bytes}`);
      res.setHeader('Content-Length', String(range.end - range.start + 1));
    } else {
      res.status(200);
      res.setHeader('Content-Length', String(variant.bytes));
    }
    if (data && req.method !== 'HEAD') {
      const sent = range ? data.subarray(range.start, range.end + 1) : data;
      res.end(sent);
      deps.metrics?.bytesServed(sent.length);
      return;
    }
    if (!body) {
      res.end();
      return;
    }
    let sent = 0;
    body.on('data', (chunk: Buffer) => (sent += chunk.length));
    try {
      await pipeline(body, res);
    } catch (err) {
      // Headers are gone; the error handler can only cut the connection.
      req.log.warn({ err, key: variant.key }, 'render answer interrupted');
      res.destroy();
    } finally {
      deps.metrics?.bytesServed(sent);
    }
  };
}

export function renderRoutes(
  deps: RenderRouteDeps & {
    guards: RouteGuards;
    /** A render's rate-limit cost (1 by default; a function of the request where it depends on it). */
    cost?: Cost;
  },
): Router {
  const routes = new RouteTable(Router(), deps.guards);
  routes.get('/media/render', { scope: 'read', cost: deps.cost }, renderHandler(deps));
  return routes.router;
}
