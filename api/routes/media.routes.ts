/**
 * What an organization holds: GET /media (list, filtered and searched,
 * newest first or sorted by name or size, cursor pages), GET and DELETE /media/record?media=<key> and /media/{id}
 * (one record; a delete moves it to the trash, or with `permanent=true` or
 * without a trash removes the object, the record and what was derived from
 * it, and answers the deleted record), DELETE /media/variants?media=<key>
 * (a file's rendered variants only), GET /media/usage.
 */
import { Router, type NextFunction, type Request } from 'express';
import { z } from 'zod';
import type { Config } from '@shared/config';
import { viewsFor } from '../domain/media-view';
import { success } from '../http/respond';
import { MEDIA_SORTS, type MediaRef, type MediaService } from '../services/media.service';
import { RouteTable, type RouteGuards } from './route-table';

const MIME_TYPE = /^[a-z]+\/[a-z0-9][a-z0-9.+-]*$/i;

const date = (field: string) =>
  z.iso
    .datetime({ offset: true, error: `${field} must be an ISO 8601 date-time` })
    .transform((s) => new Date(s))
    .optional();

const listQuery = z
  .object({
    folderId: z.coerce
      .number({ error: 'folderId must be a positive integer' })
      .int('folderId must be a positive integer')
      .positive('folderId must be a positive integer')
      .optional(),
    folder: z.string().min(1).max(200).optional(),
    type: z
      .string()
      .refine((t) => t === 'image' || t === 'pdf' || MIME_TYPE.test(t), {
        error: 'type must be image, pdf or a MIME type',
      })
      .optional(),
    name: z.string().min(1).max(255).optional(),
    q: z.string().min(1).max(255).optional(),
    sort: z
      .enum(MEDIA_SORTS, { error: `sort must be one of ${MEDIA_SORTS.join(', ')}` })
      .optional(),
    createdAfter: date('createdAfter'),
    createdBefore: date('createdBefore'),
    limit: z.coerce
      .number({ error: 'limit must be an integer from 1 to 1000' })
      .int('limit must be an integer from 1 to 1000')
      .min(1, 'limit must be an integer from 1 to 1000')
      .max(1000, 'limit must be an integer from 1 to 1000')
      .default(50),
    cursor: z.string().min(1).max(512).optional(),
  })
  .strict();

const keyQuery = z.object({
  media: z.string({ error: 'media (a key) is required' }).min(1, 'media (a key) is required'),
});

/** `permanent=true`: the delete skips the trash (the object, its variants and the record go at once). */
const permanentQuery = z.object({
  permanent: z
    .enum(['true', 'false'], { error: 'permanent must be true or false' })
    .optional()
    .transform((p) => p === 'true'),
});

const deleteKeyQuery = keyQuery.extend(permanentQuery.shape);

/** `{id}` of /media/{id}: only digits name a record (any other word is another route, or none). */
const ID = /^[1-9]\d{0,15}$/;

export function mediaRoutes(deps: {
  media: MediaService;
  config: Config;
  guards: RouteGuards;
}): Router {
  const routes = new RouteTable(Router(), deps.guards);
  const views = { publicBaseUrl: deps.config.publicBaseUrl, bucket: deps.config.bucket };
  // Every read shows folderId; a file in no folder answers the root folder's id.
  const viewFor = viewsFor(views);

  routes.get(
    '/media',
    { scope: 'read', cost: 2, query: listQuery },
    async ({ caller, query }, res) => {
      const page = await deps.media.list(caller, query);
      success(res, { media: page.media.map(viewFor(caller)), nextCursor: page.nextCursor });
    },
  );

  routes.get('/media/usage', { scope: 'read' }, async ({ caller }, res) => {
    success(res, await deps.media.usage(caller));
  });

  routes.get(
    '/media/record',
    { scope: 'read', query: keyQuery },
    async ({ caller, query }, res) => {
      success(res, viewFor(caller)(await deps.media.get(caller, { key: query.media })));
    },
  );

  routes.delete(
    '/media/record',
    { scope: 'delete', cost: 2, query: deleteKeyQuery },
    async ({ caller, query }, res) => {
      const deleted = await deps.media.delete(
        caller,
        { key: query.media },
        { permanent: query.permanent },
      );
      success(res, viewFor(caller)(deleted));
    },
  );

  routes.delete(
    '/media/variants',
    { scope: 'delete', cost: 2, query: keyQuery },
    async ({ caller, query }, res) => {
      success(res, await deps.media.deleteVariants(caller, { key: query.media }));
    },
  );

  /** `/media/{id}`, for digits only: anything else goes on to the other routes (or 404). */
  const byId = (req: Request, next: NextFunction): MediaRef | undefined => {
    const id = String(req.params.id);
    if (!ID.test(id)) return void next();
    return { id: Number(id) };
  };

  routes.get('/media/:id', { scope: 'read' }, async ({ caller, req }, res, next) => {
    const ref = byId(req, next);
    if (ref) success(res, viewFor(caller)(await deps.media.get(caller, ref)));
  });

  routes.delete(
    '/media/:id',
    { scope: 'delete', cost: 2, query: permanentQuery },
    async ({ caller, req, query }, res, next) => {
      const ref = byId(req, next);
      if (ref) {
        const deleted = await deps.media.delete(caller, ref, { permanent: query.permanent });
        success(res, viewFor(caller)(deleted));
      }
    },
  );

  return routes.router;
}
