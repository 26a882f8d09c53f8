/**
 * Folders as resources: GET /media/folders (each with its files and bytes),
 * POST /media/folders {name}, GET /media/folders/{id}, PATCH
 * /media/folders/{id} {name} (a rename: existing keys never change),
 * DELETE /media/folders/{id} (409 when it holds files; `?recursive=true`
 * deletes them and the folder as a job: 202 with its status URL).
 */
import express, { Router, type Request } from 'express';
import { z } from 'zod';
import { principalOf } from '../middleware/auth';
import { requestIdOf } from '../middleware/request-context';
import { success } from '../http/respond';
import type { FoldersService } from '../services/folders.service';
import { respondToJob } from '../http/job-answer';
import { RouteTable, type RouteGuards } from './route-table';
import { parseInput } from '../http/validate';

const nameBody = z.object({ name: z.string({ error: 'name is required' }) }).strict();

const deleteQuery = z
  .object({ recursive: z.enum(['true', 'false'], { error: 'recursive must be true or false' }) })
  .partial();

function folderId(req: Request): number {
  const raw = String(req.params.id);
  return parseInput(
    z.coerce
      .number({ error: 'the folder id must be a positive integer' })
      .int('the folder id must be a positive integer')
      .positive('the folder id must be a positive integer'),
    raw,
  );
}

export function folderRoutes(deps: { folders: FoldersService; guards: RouteGuards }): Router {
  const routes = new RouteTable(Router(), deps.guards);
  const { folders } = deps;
  const json = express.json({ limit: '16kb', type: ['application/json', 'application/*+json'] });

  routes.get('/media/folders', { scope: 'read' }, async (req, res) => {
    success(res, { folders: await folders.list(principalOf(req).organization) });
  });

  routes.post('/media/folders', { scope: 'write', cost: 2 }, json, async (req, res) => {
    const { name } = parseInput(nameBody, req.body ?? {});
    success(res, await folders.create(principalOf(req).organization, name), 201);
  });

  routes.get('/media/folders/:id', { scope: 'read' }, async (req, res) => {
    success(res, await folders.get(principalOf(req).organization, folderId(req)));
  });

  routes.patch('/media/folders/:id', { scope: 'write', cost: 2 }, json, async (req, res) => {
    const { name } = parseInput(nameBody, req.body ?? {});
    success(res, await folders.rename(principalOf(req).organization, folderId(req), name));
  });

  routes.delete('/media/folders/:id', { scope: 'delete', cost: 2 }, async (req, res) => {
    const { recursive } = parseInput(deleteQuery, req.query);
    const outcome = await folders.delete(principalOf(req).organization, folderId(req), {
      recursive: recursive === 'true',
      requestId: requestIdOf(req),
      // A folder's files are deleted by a job; the answer is its status URL at once.
      async: true,
    });
    if ('deleted' in outcome) success(res, outcome.deleted);
    else respondToJob(res, outcome.job);
  });

  return routes.router;
}
