/**
 * POST /media/upload, /media/upload/multiple and /media/upload/base64. Each
 * parses its input, makes one call into UploadService (which stores and
 * commits, all or nothing) and answers 201 with the record(s), in the
 * interface's shapes: one record for upload and base64, `{ media: [...] }`
 * for upload/multiple; folderId only in base64's answer.
 */
import express, { Router } from 'express';
import { z } from 'zod';
import type { Config } from '@shared/config';
import type { ApiMetrics } from '@shared/metrics';
import { multipartForm } from '../forms/multipart-form';
import { callerOf } from '../middleware/auth';
import { success } from '../http/respond';
import { toMediaView } from '../domain/media-view';
import type { UploadService } from '../services/upload.service';
import { RouteTable, type RouteGuards } from './route-table';
import { parseInput } from '../http/validate';

const base64Body = z
  .object({
    file: z.string({ error: 'file (a data URL) is required' }),
    mimetype: z.string().max(200).optional(),
    name: z.string().max(4096).optional(),
    folder: z.string().optional(),
    folderId: z.union([z.string(), z.number().int()]).optional(),
  })
  .strict();

const sumBytes = (records: { bytes: number }[]) => records.reduce((n, r) => n + r.bytes, 0);

export function uploadRoutes(deps: {
  uploads: UploadService;
  config: Config;
  metrics: Pick<ApiMetrics, 'bytesStored'>;
  guards: RouteGuards;
}): Router {
  const routes = new RouteTable(Router(), deps.guards);
  const { uploads, config, metrics } = deps;
  const views = { publicBaseUrl: config.publicBaseUrl, bucket: config.bucket };

  routes.post('/media/upload', { scope: 'write', cost: 5, upload: true }, async (req, res) => {
    const [record] = await uploads.uploadForm(callerOf(req), multipartForm(req), {
      fileFields: ['file'],
      maxFiles: 1,
    });
    metrics.bytesStored('/media/upload', record!.bytes);
    // The interface shows no folderId in the answers of upload and upload/multiple.
    success(res, toMediaView(record!, views, { folderId: false }), 201);
  });

  routes.post(
    '/media/upload/multiple',
    { scope: 'write', cost: 10, upload: true },
    async (req, res) => {
      const records = await uploads.uploadForm(callerOf(req), multipartForm(req), {
        fileFields: ['files', 'files[]'],
        maxFiles: config.limits.maxFiles,
      });
      metrics.bytesStored('/media/upload/multiple', sumBytes(records));
      success(res, { media: records.map((r) => toMediaView(r, views, { folderId: false })) }, 201);
    },
  );

  // base64 inflates by 4/3; allow that plus room for the other fields.
  const jsonLimit = Math.ceil(config.limits.maxBase64Size / 3) * 4 + 64 * 1024;

  routes.post(
    '/media/upload/base64',
    { scope: 'write', cost: 5 },
    express.json({ limit: jsonLimit, type: ['application/json', 'application/*+json'] }),
    express.urlencoded({ limit: jsonLimit, extended: false }),
    async (req, res) => {
      const body = parseInput(base64Body, req.body ?? {});
      const record = await uploads.uploadDataUrl(callerOf(req), body);
      metrics.bytesStored('/media/upload/base64', record.bytes);
      success(res, toMediaView(record, views, { folderId: true }), 201);
    },
  );

  return routes.router;
}
