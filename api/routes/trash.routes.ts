/**
 * The trash: GET /media/trash (records with `deletedAt`, newest first,
 * cursor pages like GET /media), POST /media/trash/{id}/restore (back to its
 * folder, re-created if gone), DELETE /media/trash/{id} (purged now).
 * Scopes: reading the trash is `read`; restoring and purging are `delete`
 * (the scope that put the file there undoes or completes its delete).
 */
import { Router } from 'express';
import { z } from 'zod';
import type { Config } from '@shared/config';
import { viewsFor } from '../domain/media-view';
import { success } from '../http/respond';
import type { TrashService } from '../services/trash.service';
import { RouteTable, type RouteGuards } from './route-table';

const listQuery = z
  .object({
    limit: z.coerce
      .number({ error: 'limit must be an integer from 1 to 1000' })
      .int('limit must be an integer from 1 to 1000')
      .min(1, 'limit must be an integer from 1 to 1000')
      .max(1000, 'limit must be an integer from 1 to 1000')
      .default(50),
    cursor: z.string().min(1).max(512).optional(),
  })
  .strict();

const ID_MESSAGE = 'the media id must be a positive integer';

/** `{id}`: a record's id, a positive integer. */
const idParams = z
  .object({ id: z.string() })
  .transform(({ id }) => Number(id))
  .pipe(z.number({ error: ID_MESSAGE }).int(ID_MESSAGE).positive(ID_MESSAGE))
  .transform((id) => ({ id }));

export function trashRoutes(deps: {
  trash: TrashService;
  config: Config;
  guards: RouteGuards;
}): Router {
  const routes = new RouteTable(Router(), deps.guards);
  const views = { publicBaseUrl: deps.config.publicBaseUrl, bucket: deps.config.bucket };
  // Every read shows folderId; a file in no folder answers the root folder's id.
  const viewFor = viewsFor(views);

  routes.get(
    '/media/trash',
    { scope: 'read', cost: 2, query: listQuery },
    async ({ caller, query }, res) => {
      const page = await deps.trash.list(caller, query);
      success(res, {
        media: page.media.map((t) => ({
          ...viewFor(caller)(t.record),
          deletedAt: t.deletedAt.toISOString(),
          purgeAt: t.purgeAt.toISOString(),
        })),
        nextCursor: page.nextCursor,
      });
    },
  );

  routes.post(
    '/media/trash/:id/restore',
    { scope: 'delete', cost: 2, params: idParams },
    async ({ caller, params }, res) => {
      success(res, viewFor(caller)(await deps.trash.restore(caller, params.id)));
    },
  );

  routes.delete(
    '/media/trash/:id',
    { scope: 'delete', cost: 2, params: idParams },
    async ({ caller, params }, res) => {
      success(res, viewFor(caller)(await deps.trash.purge(caller, params.id)));
    },
  );

  return routes.router;
}
