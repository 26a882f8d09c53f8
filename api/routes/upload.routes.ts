/**
 * POST /media/upload, /media/upload/multiple and /media/upload/base64.
 * Each handler validates its input, lets the upload service store and commit,
 * and answers 201 with the record(s). Multipart parsing lives in
 * middleware/multipart.ts.
 */
import express, { Router, type Request } from 'express';
import { z } from 'zod';
import type { Config } from '@shared/config';
import { Errors } from '@shared/errors';
import { DataUrlError, parseDataUrl } from '@shared/media/data-url';
import type { ApiMetrics } from '@shared/metrics';
import type { Folder } from '@shared/repositories/folders.repository';
import { principalOf } from '../middleware/auth';
import { originOf } from '../middleware/request-context';
import {
  closeAfterAnswer,
  isMultipart,
  lastField,
  MultipartFailure,
  parseMultipart,
  type Fields,
} from '../middleware/multipart';
import { success } from '../respond';
import { toMediaView } from '../services/media-view';
import type { FolderSpec, StoredObject, UploadService } from '../services/upload.service';

const FOLDER_FIELDS = ['folder', 'folderId'];

const folderSpecOf = (fields: Fields): FolderSpec => ({
  folder: lastField(fields, 'folder'),
  folderId: lastField(fields, 'folderId'),
});

function refuseUnknownField(allowed: string[], fileField: string) {
  return (name: string) => {
    if (name === fileField) {
      throw Errors.validation([
        { field: name, message: `"${name}" must be a file part (with a filename)` },
      ]);
    }
    if (!allowed.includes(name)) {
      throw Errors.validation([
        { field: name, message: `unknown field "${name}" (accepted: ${allowed.join(', ')})` },
      ]);
    }
  };
}

const sumBytes = (records: { bytes: number }[]) => records.reduce((n, r) => n + r.bytes, 0);

export function uploadRoutes(deps: {
  uploads: UploadService;
  config: Config;
  metrics: Pick<ApiMetrics, 'bytesStored'>;
}): Router {
  const router = Router();
  const { uploads, config, metrics } = deps;
  const views = { publicBaseUrl: config.publicBaseUrl, bucket: config.bucket };

  /**
   * Runs a multipart upload: every file part of `fileFields` is streamed to
   * storage (straight to its final key when the folder fields came first);
   * after the form is read, the folder is resolved and everything committed.
   * Anything that fails removes every object the request stored.
   */
  async function multipartUpload(
    req: Request,
    endpoint: string,
    fileFields: string[],
    maxFiles: number,
  ): Promise<ReturnType<typeof toMediaView>[]> {
    const org = principalOf(req).organization;
    if (!isMultipart(req)) {
      throw Errors.badRequest('The request must be multipart/form-data');
    }
    const stored: StoredObject[] = [];
    let earlyFolder: { spec: string; folder: Promise<Folder | null> } | undefined;
    try {
      const { fields, files } = await parseMultipart(
        req,
        { maxFileSize: config.limits.maxFileSize, maxFiles, maxFields: 20 },
        {
          acceptField: refuseUnknownField(FOLDER_FIELDS, fileFields[0]!),
          async onFile(part, fieldsSoFar) {
            if (!fileFields.includes(part.field)) {
              throw Errors.validation([
                {
                  field: part.field,
                  message: `unexpected file field "${part.field}" (send files as "${fileFields[0]!}")`,
                },
              ]);
            }
            // The folder is known now only if its fields came before this file.
            // Without them the file most likely goes in no folder (the common
            // form), so it streams to that key; if folder fields come after
            // all, commit moves it.
            let folder: Folder | null = null;
            if (FOLDER_FIELDS.some((f) => fieldsSoFar.has(f))) {
              const spec = folderSpecOf(fieldsSoFar);
              const specKey = JSON.stringify(spec);
              if (earlyFolder?.spec !== specKey) {
                earlyFolder = { spec: specKey, folder: uploads.resolveFolder(org, spec) };
              }
              folder = await earlyFolder.folder;
            }
            const object = await uploads.storeStream(org, part.stream, part.filename, folder);
            stored.push(object);
            return object;
          },
        },
      );
      if (files.length === 0) {
        throw Errors.validation([
          { field: fileFields[0]!, message: `a file part named "${fileFields[0]!}" is required` },
        ]);
      }
      const folder = await uploads.resolveFolder(org, folderSpecOf(fields));
      const records = await uploads.commit(org, files, folder, originOf(req));
      metrics.bytesStored(endpoint, sumBytes(records));
      // The interface shows no folderId in the answers of upload and upload/multiple.
      return records.map((r) => toMediaView(r, views, { folderId: false }));
    } catch (err) {
      await uploads.discard(stored);
      if (err instanceof MultipartFailure) {
        // The rest of the body is being discarded; close the connection after answering.
        closeAfterAnswer(req);
        throw (err as MultipartFailure<unknown>).error;
      }
      throw err;
    }
  }

  router.post('/media/upload', async (req, res) => {
    const [view] = await multipartUpload(req, '/media/upload', ['file'], 1);
    success(res, view, 201);
  });

  router.post('/media/upload/multiple', async (req, res) => {
    const records = await multipartUpload(
      req,
      '/media/upload/multiple',
      ['files', 'files[]'],
      config.limits.maxFiles,
    );
    // The interface's shape: data is { media: [record, ...] }.
    success(res, { media: records }, 201);
  });

  const base64Body = z
    .object({
      file: z.string({ error: 'file (a data URL) is required' }),
      mimetype: z.string().max(200).optional(),
      name: z.string().max(4096).optional(),
      folder: z.string().optional(),
      folderId: z.union([z.string(), z.number().int()]).optional(),
    })
    .strict();
  // base64 inflates by 4/3; allow that plus room for the other fields.
  const jsonLimit = Math.ceil(config.limits.maxBase64Size / 3) * 4 + 64 * 1024;

  router.post(
    '/media/upload/base64',
    express.json({ limit: jsonLimit, type: ['application/json', 'application/*+json'] }),
    express.urlencoded({ limit: jsonLimit, extended: false }),
    async (req, res) => {
      const org = principalOf(req).organization;
      const parsed = base64Body.safeParse(req.body ?? {});
      if (!parsed.success) {
        throw Errors.validation(
          parsed.error.issues.map((i) => ({
            field:
              i.path.join('.') || (i.code === 'unrecognized_keys' ? i.keys.join(', ') : 'body'),
            message:
              i.code === 'unrecognized_keys' ? `unknown field(s): ${i.keys.join(', ')}` : i.message,
          })),
        );
      }
      const body = parsed.data;
      let dataUrl;
      try {
        dataUrl = parseDataUrl(body.file);
      } catch (err) {
        if (err instanceof DataUrlError) throw Errors.invalidDataUrl(err.message);
        throw err;
      }
      if (dataUrl.decodedSize > config.limits.maxBase64Size) {
        throw Errors.fileTooLarge(config.limits.maxBase64Size, body.name);
      }
      const folder = await uploads.resolveFolder(org, {
        folder: body.folder,
        folderId: body.folderId === undefined ? undefined : String(body.folderId),
      });
      const bytes = Buffer.from(dataUrl.base64, 'base64');
      const object = await uploads.storeBuffer(
        org,
        bytes,
        body.name ?? 'file',
        folder,
        body.mimetype ?? dataUrl.declaredType,
      );
      const [record] = await uploads.commit(org, [object], folder, originOf(req));
      metrics.bytesStored('/media/upload/base64', record!.bytes);
      success(res, toMediaView(record!, views, { folderId: true }), 201);
    },
  );

  return router;
}
