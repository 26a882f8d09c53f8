/**
 * Folders as resources: GET /media/folders (each with its files and bytes),
 * POST /media/folders {name}, GET /media/folders/{id}, PATCH
 * /media/folders/{id} {name} (a rename: existing keys never change),
 * DELETE /media/folders/{id} (409 when it holds files; `?recursive=true`
 * deletes them and the folder as a job: 202 with its status URL), and
 * POST /media/move {mediaKeys, folderId} (files into a folder; keys unchanged).
 */
import { Router } from 'express';
import { z } from 'zod';
import type { Config } from '@shared/config';
import { toMediaView } from '../domain/media-view';
import { respondToJob } from '../http/job-answer';
import { success } from '../http/respond';
import type { FoldersService } from '../services/folders.service';
import { jsonBody, RouteTable, type RouteGuards } from './route-table';

const nameBody = jsonBody(z.object({ name: z.string({ error: 'name is required' }) }).strict(), {
  limit: '16kb',
});

const deleteQuery = z
  .object({ recursive: z.enum(['true', 'false'], { error: 'recursive must be true or false' }) })
  .partial();

const ID_MESSAGE = 'the folder id must be a positive integer';

/** `{id}`: a positive integer (its 400 names no field). */
const idParams = z
  .object({ id: z.string() })
  .transform(({ id }) => Number(id))
  .pipe(z.number({ error: ID_MESSAGE }).int(ID_MESSAGE).positive(ID_MESSAGE))
  .transform((id) => ({ id }));

/** Files one move may name. */
const MAX_MOVED_KEYS = 100;
const MOVE_MESSAGE = "folderId must be a positive integer (the root folder's id: no folder)";

const moveBody = jsonBody(
  z.strictObject({
    mediaKeys: z
      .array(z.string().min(1, 'a media key is not empty'), {
        error: 'mediaKeys is an array of media keys',
      })
      .min(1, 'mediaKeys needs at least one key')
      .max(MAX_MOVED_KEYS, `at most ${MAX_MOVED_KEYS} keys per request`),
    folderId: z.int(MOVE_MESSAGE).positive(MOVE_MESSAGE),
  }),
  { limit: '64kb' },
);

export function folderRoutes(deps: {
  folders: FoldersService;
  config: Config;
  guards: RouteGuards;
}): Router {
  const routes = new RouteTable(Router(), deps.guards);
  const { folders } = deps;

  routes.get('/media/folders', { scope: 'read' }, async ({ caller }, res) => {
    success(res, await folders.list(caller));
  });

  routes.post(
    '/media/folders',
    { scope: 'write', cost: 2, body: nameBody },
    async ({ caller, body }, res) => {
      success(res, await folders.create(caller, body), 201);
    },
  );

  routes.get(
    '/media/folders/:id',
    { scope: 'read', params: idParams },
    async ({ caller, params }, res) => {
      success(res, await folders.get(caller, params));
    },
  );

  routes.patch(
    '/media/folders/:id',
    { scope: 'write', cost: 2, body: nameBody, params: idParams },
    async ({ caller, body, params }, res) => {
      success(res, await folders.rename(caller, { id: params.id, name: body.name }));
    },
  );

  routes.delete(
    '/media/folders/:id',
    { scope: 'delete', cost: 2, query: deleteQuery, params: idParams },
    async ({ caller, query, params }, res) => {
      const outcome = await folders.delete(caller, {
        id: params.id,
        recursive: query.recursive === 'true',
      });
      // A folder's files are deleted by a job; the answer is its status URL at once.
      if ('deleted' in outcome) success(res, outcome.deleted);
      else respondToJob(res, outcome.job);
    },
  );

  routes.post(
    '/media/move',
    { scope: 'write', cost: 2, body: moveBody },
    async ({ caller, body }, res) => {
      const moved = await folders.move(caller, body);
      const views = { publicBaseUrl: deps.config.publicBaseUrl, bucket: deps.config.bucket };
      const { rootFolderId } = caller.organization;
      success(res, {
        media: moved.map((r) => toMediaView(r, views, { folderId: true, rootFolderId })),
      });
    },
  );

  return routes.router;
}
