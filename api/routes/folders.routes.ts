/**
 * Folders as resources: GET /media/folders (each with its files and bytes),
 * POST /media/folders {name}, GET /media/folders/{id}, PATCH
 * /media/folders/{id} {name} (a rename: existing keys never change),
 * DELETE /media/folders/{id} (409 when it holds files; `?recursive=true`
 * deletes them and the folder as a job: 202 with its status URL).
 */
import express, { Router, type Request } from 'express';
import { z } from 'zod';
import { principalOf, requireScope } from '../middleware/auth';
import { requestIdOf } from '../middleware/request-context';
import { success } from '../respond';
import type { FoldersService } from '../services/folders.service';
import { respondToJob } from './job-answer';
import { parseInput } from './validate';

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

export function folderRoutes(deps: { folders: FoldersService }): Router {
  const router = Router();
  const { folders } = deps;
  const json = express.json({ limit: '16kb', type: ['application/json', 'application/*+json'] });

  router.get('/media/folders', requireScope('read'), async (req, res) => {
    success(res, { folders: await folders.list(principalOf(req).organization) });
  });

  router.post('/media/folders', requireScope('write'), json, async (req, res) => {
    const { name } = parseInput(nameBody, req.body ?? {});
    success(res, await folders.create(principalOf(req).organization, name), 201);
  });

  router.get('/media/folders/:id', requireScope('read'), async (req, res) => {
    success(res, await folders.get(principalOf(req).organization, folderId(req)));
  });

  router.patch('/media/folders/:id', requireScope('write'), json, async (req, res) => {
    const { name } = parseInput(nameBody, req.body ?? {});
    success(res, await folders.rename(principalOf(req).organization, folderId(req), name));
  });

  router.delete('/media/folders/:id', requireScope('delete'), async (req, res) => {
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

  return router;
}
