/**
 * GET /media/render?media=<key>&w=&h=&fit=&format=&q=&metadata= (or
 * preset=<name>): a resized variant of a stored image, rendered on first
 * request by the image workers and streamed from storage afterwards (the
 * first answer takes the bytes the worker handed over, when it did). The
 * query is read by the render parameters' one schema
 * (shared/media/render-params.ts); what the caller may ask for is the
 * service's to say.
 *
 * Answers carry ETag (the variant's, strong: a variant's bytes never
 * change), Content-Type, Content-Length, `Accept` added to `Vary` when
 * format=auto (after the `Origin` CORS puts there), `Cache-Control: private`
 * (bearer-authenticated; a signed URL's answer may be cached publicly until
 * it expires), an inline disposition, `Accept-Ranges`; `Range` gives 206
 * (416 when unsatisfiable) and a matching `If-None-Match` gives 304
 * (http/stored-bytes.ts; without reading the record when this process has
 * served the variant: api/domain/revalidation-cache.ts).
 */
import { Router } from 'express';
import { create as contentDisposition } from 'content-disposition';
import { keyBaseName } from '@shared/media/naming';
import { renderQuerySchema, type RenderParamRules } from '@shared/media/render-params';
import type { ApiMetrics } from '@shared/metrics';
import { sendNotModified, sendStoredBytes } from '../http/stored-bytes';
import { cacheControlFor } from '../middleware/signed-url';
import { variantTag, type RenderService } from '../services/render.service';
import { RouteTable, type RouteGuards } from './route-table';

/** How long a browser may keep a bearer-fetched variant without asking (it never changes). */
export const PRIVATE_CACHE_CONTROL = 'private, max-age=86400';

export function renderRoutes(deps: {
  renders: RenderService;
  /** What the query is read against: the render maxima, the presets, the slow formats' bounds. */
  rules: RenderParamRules;
  /** Counts the bytes sent (media_bytes_served_total) and the renders by outcome (media_renders_total). */
  metrics?: Pick<ApiMetrics, 'bytesServed' | 'renderAnswered'>;
  guards: RouteGuards;
}): Router {
  const routes = new RouteTable(Router(), deps.guards);
  const query = renderQuerySchema(deps.rules);

  routes.get(
    '/media/render',
    {
      scope: 'read',
      // Follows the pixels and format asked for (docs/api.md, "Rate limits"); 1 for a refusal.
      cost: (req) => {
        const read = query.safeParse(req.query);
        return read.success ? deps.renders.cost(read.data.params, req.headers.accept) : 1;
      },
      query,
    },
    async ({ caller, query: asked, req }, res) => {
      const input = { ...asked, accept: req.headers.accept };
      // A revalidation of a variant this process has served: 304 without reading the record.
      const known = deps.renders.known(caller, input);
      if (
        known &&
        sendNotModified(req, res, {
          etag: known.etag,
          validators: {
            'Cache-Control': cacheControlFor(caller.signedUntil, PRIVATE_CACHE_CONTROL),
          },
          varyAccept: known.negotiated,
        })
      ) {
        deps.metrics?.renderAnswered('stored');
        return;
      }
      const { record, variant, negotiated, rendered, data } = await deps.renders.render(
        caller,
        input,
      );
      deps.metrics?.renderAnswered(rendered ? 'rendered' : 'stored');
      const ext = variant.key.slice(variant.key.lastIndexOf('.') + 1);
      await sendStoredBytes(
        req,
        res,
        {
          etag: `"${variantTag(variant.key)}"`,
          length: variant.bytes,
          validators: {
            'Cache-Control': cacheControlFor(caller.signedUntil, PRIVATE_CACHE_CONTROL),
          },
          varyAccept: negotiated,
          contentType: variant.mimetype,
          disposition: contentDisposition(`${keyBaseName(record.name)}.${ext}`, {
            type: 'inline',
          }),
          // A first render's bytes may have come with the job (no read from storage then).
          data,
          open: (range) => deps.renders.open(variant, range),
          interrupted: { message: 'render answer interrupted', key: variant.key },
        },
        deps.metrics,
      );
    },
  );

  return routes.router;
}
