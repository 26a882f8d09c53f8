/**
 * POST /media/archive: a ZIP of `mediaKeys`, or of the files of `folderId`
 * (`recursive`: with the folders named under it), streamed as it is made;
 * with `signed: true`, instead a signed GET URL of that archive (checked
 * now). GET /media/archive?selection=…: the same archive, by a signed URL
 * (no token) or with a bearer token. Both need the `read` scope. Everything
 * is checked before the first byte (api/services/archive.service.ts); a
 * failure after it cuts the connection (a ZIP that is not whole is never
 * ended as if it were).
 */
import { pipeline } from 'node:stream/promises';
import type { Request, Response } from 'express';
import { Router } from 'express';
import { create as contentDisposition } from 'content-disposition';
import { z } from 'zod';
import { logOf } from '../http/request-context';
import { success } from '../http/respond';
import { parseInput } from '../http/validate';
import type { Caller } from '../domain/caller';
import {
  ARCHIVE_PATH,
  decodeSelection,
  SELECTION_PARAM,
  type ArchiveSelection,
  type ArchiveService,
} from '../services/archive.service';
import { MAX_SIGNED_KEYS } from './sign.routes';
import { jsonBody, RouteTable, type RouteGuards } from './route-table';

const key = z.string({ error: 'a media key is a string' }).min(1, 'a media key is not empty');

const selectionFields = {
  mediaKeys: z
    .array(key, { error: 'mediaKeys is an array of media keys' })
    .min(1, 'mediaKeys needs at least one key')
    .optional(),
  folderId: z
    .int('folderId must be a folder id')
    .positive('folderId must be a folder id')
    .optional(),
  recursive: z.boolean({ error: 'recursive must be true or false' }).optional(),
};

type SelectionFields = {
  mediaKeys?: string[] | undefined;
  folderId?: number | undefined;
  recursive?: boolean | undefined;
};

const oneSelection = (b: SelectionFields) =>
  (b.mediaKeys === undefined) !== (b.folderId === undefined) &&
  (b.recursive === undefined || b.folderId !== undefined);
const ONE_SELECTION = {
  error: 'give mediaKeys, or folderId (with recursive, if wanted), not both',
  path: ['mediaKeys'],
};

const toSelection = (b: SelectionFields): ArchiveSelection =>
  b.mediaKeys ? { mediaKeys: b.mediaKeys } : { folderId: b.folderId!, recursive: !!b.recursive };

const archiveBody = z
  .strictObject({
    ...selectionFields,
    signed: z.boolean({ error: 'signed must be true or false' }).optional(),
    expiresIn: z
      .int('expiresIn must be a whole number of seconds')
      .min(1, 'expiresIn must be at least 1 second')
      .optional(),
  })
  .refine(oneSelection, ONE_SELECTION)
  .refine((b) => !b.signed || (b.mediaKeys?.length ?? 0) <= MAX_SIGNED_KEYS, {
    error: `a signed archive names at most ${MAX_SIGNED_KEYS} keys (its URL carries them): archive a folder instead`,
    path: ['mediaKeys'],
  })
  .refine((b) => b.signed === true || b.expiresIn === undefined, {
    error: 'expiresIn goes with signed: true',
    path: ['expiresIn'],
  });

/** A signed URL's selection, as the POST wrote it. */
const selectionSchema = z.strictObject(selectionFields).refine(oneSelection, ONE_SELECTION);

const SELECTION_REQUIRED = `the ${SELECTION_PARAM} query parameter is required`;
const archiveQuery = z.looseObject({
  [SELECTION_PARAM]: z.string({ error: SELECTION_REQUIRED }).min(1, SELECTION_REQUIRED),
});

export function archiveRoutes(deps: { archives: ArchiveService; guards: RouteGuards }): Router {
  const routes = new RouteTable(Router(), deps.guards);

  const send = async (
    caller: Caller,
    selection: ArchiveSelection,
    req: Request,
    res: Response,
  ): Promise<void> => {
    const plan = await deps.archives.plan(caller, selection);
    res.status(200).set({
      'Content-Type': 'application/zip',
      'Content-Disposition': contentDisposition(plan.filename),
      'Cache-Control': 'private, no-store',
    });
    try {
      await pipeline(deps.archives.open(plan), res);
    } catch (err) {
      logOf(req)?.warn({ err, entries: plan.entries.length }, 'archive interrupted');
      res.destroy();
    }
  };

  routes.post(
    ARCHIVE_PATH,
    {
      scope: 'read',
      cost: 10,
      idempotency: false,
      body: jsonBody(archiveBody, { limit: '1mb' }),
    },
    async ({ caller, body, req }, res) => {
      const selection = toSelection(body);
      if (body.signed) {
        success(res, await deps.archives.sign(caller, selection, body.expiresIn));
        return;
      }
      await send(caller, selection, req, res);
    },
  );

  routes.get(
    ARCHIVE_PATH,
    { scope: 'read', cost: 10, query: archiveQuery },
    async ({ caller, query, req }, res) => {
      const decoded = decodeSelection(query[SELECTION_PARAM]);
      const fields = parseInput(selectionSchema, decoded ?? 'not base64url JSON');
      await send(caller, toSelection(fields), req, res);
    },
  );

  return routes.router;
}
