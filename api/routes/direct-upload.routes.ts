/**
 * Direct-to-storage uploads (docs/direct-uploads.md), S3 deployments:
 * `POST /media/upload/direct` books a file and answers the presigned
 * request(s) that send its bytes to the store; `POST
 * /media/upload/direct/:id/complete` checks what the store holds and answers
 * the record as `POST /media/upload` does (201); `DELETE
 * /media/upload/direct/:id` cancels one not completed (204). The file-system
 * store of `npm start` answers 501 DIRECT_UPLOADS_UNSUPPORTED.
 */
import { Router } from 'express';
import { z } from 'zod';
import type { Config } from '@shared/config';
import { toMediaView } from '../domain/media-view';
import { success } from '../http/respond';
import type { DirectUploadService } from '../services/direct-upload.service';
import { jsonBody, RouteTable, type RouteGuards } from './route-table';

export const DIRECT_UPLOAD_PATH = '/media/upload/direct';

/** No CR, LF or NUL in what becomes a name or a folder (as tus metadata). */
const plain = (max: number) =>
  z
    .string()
    .max(max)
    .refine((v) => !/[\r\n\0]/.test(v), 'must not contain CR, LF or NUL');

const requestBody = z
  .object({
    name: plain(1024).min(1, 'name is required'),
    size: z.number().int().min(1),
    type: plain(200).min(1, 'type is required'),
    folder: plain(1024).optional(),
    folderId: z.union([z.string().max(32), z.number().int()]).optional(),
    sha256: z
      .string()
      .regex(/^[0-9a-fA-F]{64}$/, 'sha256 must be 64 hexadecimal digits')
      .optional(),
  })
  .strict();

const uploadParams = z.object({ id: z.string().max(64) });

export function directUploadRoutes(deps: {
  directUploads: DirectUploadService;
  config: Config;
  guards: RouteGuards;
}): Router {
  const routes = new RouteTable(Router(), deps.guards);
  const { directUploads, config } = deps;
  const views = { publicBaseUrl: config.publicBaseUrl, bucket: config.bucket };

  routes.post(
    DIRECT_UPLOAD_PATH,
    { scope: 'write', cost: 5, body: jsonBody(requestBody, { limit: '16kb' }) },
    async ({ caller, body }, res) => {
      const ticket = await directUploads.request(caller, {
        ...body,
        folderId: body.folderId === undefined ? undefined : String(body.folderId),
      });
      success(
        res,
        {
          ...ticket,
          expiresAt: ticket.expiresAt.toISOString(),
          completeUrl: `${config.publicBaseUrl}${DIRECT_UPLOAD_PATH}/${ticket.id}/complete`,
        },
        201,
      );
    },
  );

  routes.post(
    `${DIRECT_UPLOAD_PATH}/:id/complete`,
    { scope: 'write', cost: 5, params: uploadParams },
    async ({ caller, params }, res) => {
      const record = await directUploads.complete(caller, params.id);
      success(res, toMediaView(record, views, { folderId: false }), 201);
    },
  );

  routes.delete(
    `${DIRECT_UPLOAD_PATH}/:id`,
    { scope: 'write', cost: 1, params: uploadParams },
    async ({ caller, params }, res) => {
      await directUploads.cancel(caller, params.id);
      res.status(204).end();
    },
  );

  return routes.router;
}
