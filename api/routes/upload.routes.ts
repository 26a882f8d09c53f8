/**
 * POST /media/upload, /media/upload/multiple and /media/upload/base64. Each
 * declares its input (a streamed form: its file field, the folder fields and
 * their limits; or a JSON body), makes one call into UploadService (which
 * stores and commits, all or nothing) and answers 201 with the record(s), in
 * the interface's shapes: one record for upload and base64, `{ media: [...] }`
 * for upload/multiple; folderId only in base64's answer. `onDuplicate` (the
 * query, a form field or the body) says what bytes the organization already
 * stores do: stored again, 409 DUPLICATE, or the existing record answered.
 */
import { Router } from 'express';
import { z } from 'zod';
import type { Config } from '@shared/config';
import { Errors } from '@shared/errors';
import type { ApiMetrics } from '@shared/metrics';
import { toMediaView } from '../domain/media-view';
import { formSpec } from '../forms/form-spec';
import { success } from '../http/respond';
import { ON_DUPLICATE, type UploadService } from '../services/upload.service';
import { jsonBody, RouteTable, type RouteGuards } from './route-table';

const base64Body = z
  .object({
    file: z.string({ error: 'file (a data URL) is required' }),
    mimetype: z.string().max(200).optional(),
    name: z.string().max(4096).optional(),
    folder: z.string().optional(),
    folderId: z.union([z.string(), z.number().int()]).optional(),
    onDuplicate: z.enum(ON_DUPLICATE).optional(),
  })
  .strict();

/** `onDuplicate` in the query string (a form field or the JSON body may say it instead). */
const duplicateQuery = z.object({ onDuplicate: z.enum(ON_DUPLICATE).optional() });

/** An upload form: its file parts, and the folder they go in (by name and/or id). */
const uploadForm = (files: readonly [string, ...string[]], max: number, maxBytes: number) =>
  formSpec({
    files: { names: files, max, maxBytes },
    fields: ['folder', 'folderId', 'onDuplicate'],
    maxFields: 20,
    names: 'first',
  });

export function uploadRoutes(deps: {
  uploads: UploadService;
  config: Config;
  metrics: Pick<ApiMetrics, 'bytesStored'>;
  guards: RouteGuards;
}): Router {
  const routes = new RouteTable(Router(), deps.guards);
  const { uploads, config, metrics } = deps;
  const { maxFileSize, maxFiles, maxBase64Size } = config.limits;
  const views = { publicBaseUrl: config.publicBaseUrl, bucket: config.bucket };

  routes.post(
    '/media/upload',
    { scope: 'write', cost: 5, query: duplicateQuery, form: uploadForm(['file'], 1, maxFileSize) },
    async ({ caller, form, query }, res) => {
      const { records, storedBytes } = await uploads.uploadForm(caller, { form, ...query });
      const record = records[0];
      metrics.bytesStored('/media/upload', storedBytes);
      // The interface shows no folderId in the answers of upload and upload/multiple.
      success(res, toMediaView(record!, views, { folderId: false }), 201);
    },
  );

  routes.post(
    '/media/upload/multiple',
    {
      scope: 'write',
      cost: 10,
      query: duplicateQuery,
      form: uploadForm(['files', 'files[]'], maxFiles, maxFileSize),
    },
    async ({ caller, form, query }, res) => {
      const { records, storedBytes } = await uploads.uploadForm(caller, { form, ...query });
      metrics.bytesStored('/media/upload/multiple', storedBytes);
      success(res, { media: records.map((r) => toMediaView(r, views, { folderId: false })) }, 201);
    },
  );

  // base64 inflates by 4/3; allow that plus room for the other fields.
  const jsonLimit = Math.ceil(maxBase64Size / 3) * 4 + 64 * 1024;

  routes.post(
    '/media/upload/base64',
    {
      scope: 'write',
      cost: 5,
      query: duplicateQuery,
      body: jsonBody(base64Body, { limit: jsonLimit, urlencoded: true }),
    },
    async ({ caller, body, query }, res) => {
      if (query.onDuplicate && body.onDuplicate && query.onDuplicate !== body.onDuplicate) {
        throw Errors.validation([
          {
            field: 'onDuplicate',
            message: `onDuplicate is "${query.onDuplicate}" in the query and "${body.onDuplicate}" in the body`,
          },
        ]);
      }
      const {
        records: [record],
        storedBytes,
      } = await uploads.uploadDataUrl(caller, {
        ...body,
        onDuplicate: query.onDuplicate ?? body.onDuplicate,
      });
      metrics.bytesStored('/media/upload/base64', storedBytes);
      const { rootFolderId } = caller.organization;
      success(res, toMediaView(record!, views, { folderId: true, rootFolderId }), 201);
    },
  );

  return routes.router;
}
