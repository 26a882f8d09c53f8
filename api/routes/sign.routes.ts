/**
 * POST /media/sign: signed URLs for one record (`mediaKey`) or several
 * (`mediaKeys`), valid `expiresIn` seconds, optionally `disposition` and
 * `render` options (then the URLs are `/media/render` URLs, signed only when
 * the render operation would accept their options). Needs the `read` scope:
 * a signed URL reads, it grants nothing a reading token could not do.
 */
import { Router } from 'express';
import { z } from 'zod';
import { Errors } from '@shared/errors';
import { success } from '../http/respond';
import type { SignedUrlService } from '../services/signed-urls.service';
import { jsonBody, RouteTable, type RouteGuards } from './route-table';

/** Keys one request may sign. */
export const MAX_SIGNED_KEYS = 100;

const key = z.string({ error: 'a media key is a string' }).min(1, 'a media key is not empty');

/**
 * An object of render parameters; which names and values it may hold is the
 * render parameters' one schema (shared/media/render-params.ts), applied by
 * the service as the render applies it (RenderService.check).
 */
const render = z.record(z.string(), z.unknown(), {
  error: 'render is an object of render options',
});

const signBody = z
  .strictObject({
    mediaKey: key.optional(),
    mediaKeys: z
      .array(key, { error: 'mediaKeys is an array of media keys' })
      .min(1, 'mediaKeys needs at least one key')
      .max(MAX_SIGNED_KEYS, `at most ${MAX_SIGNED_KEYS} keys per request`)
      .optional(),
    expiresIn: z
      .int('expiresIn must be a whole number of seconds')
      .min(1, 'expiresIn must be at least 1 second')
      .optional(),
    disposition: z
      .enum(['inline', 'attachment'], { error: 'disposition must be inline or attachment' })
      .optional(),
    render: render.optional(),
  })
  .refine((b) => (b.mediaKey === undefined) !== (b.mediaKeys === undefined), {
    error: 'give mediaKey (one key) or mediaKeys (several), not both',
    path: ['mediaKey'],
  });

export function signRoutes(deps: { signedUrls: SignedUrlService; guards: RouteGuards }): Router {
  const routes = new RouteTable(Router(), deps.guards);

  routes.post(
    '/media/sign',
    {
      scope: 'read',
      cost: 2,
      available: () => {
        if (!deps.signedUrls.enabled) throw Errors.signedUrlsDisabled();
      },
      body: jsonBody(signBody, { limit: '64kb' }),
    },
    async ({ caller, body }, res) => {
      const mediaKeys = body.mediaKeys ?? [body.mediaKey!];
      const signed = await deps.signedUrls.sign(caller, {
        mediaKeys: [...new Set(mediaKeys)],
        expiresIn: body.expiresIn,
        disposition: body.disposition,
        render: body.render,
      });
      // One key asked for: its URL beside the list, for convenience.
      success(res, body.mediaKey === undefined ? signed : { ...signed, url: signed.urls[0]!.url });
    },
  );

  return routes.router;
}
