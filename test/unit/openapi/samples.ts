/**
 * What the api/openapi.yaml tests share: the document walked as a list of
 * operations and responses, a sample media record and its envelope, job ids
 * and status URLs, and what the error handler answers for an AppError
 * (captured without a server).
 */
import { join } from 'node:path';
import type { Request, Response } from 'express';
import { errorHandler } from '../../../api/middleware/error-handler';
import { toMediaView } from '../../../api/domain/media-view';
import { decodeJobError, encodeJobError } from '../../../shared/jobs';
import type { AppError } from '../../../shared/errors';
import type { MediaRecord } from '../../../shared/repositories/media.repository';
import { deref, loadSpec, nodeAt, pointerOf, specOperations } from '../../support/openapi';

export const root = join(__dirname, '..', '..', '..');
export const spec = loadSpec();

export type JsonObject = Record<string, unknown>;
export const isObject = (v: unknown): v is JsonObject =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Every operation with its JSON pointer. */
export function operations(): { method: string; path: string; op: JsonObject; pointer: string }[] {
  return specOperations().map(({ method, path }) => {
    const pointer = pointerOf(['paths', path, method.toLowerCase()]);
    return { method, path, op: nodeAt(pointer) as JsonObject, pointer };
  });
}

/** Every (dereferenced) response of every operation. */
export function responses(): {
  where: string;
  status: string;
  path: string;
  response: JsonObject;
  pointer: string;
}[] {
  return operations().flatMap(({ method, path, op, pointer }) =>
    Object.entries(op.responses as JsonObject).map(([status, raw]) => {
      const resolved = deref(raw, `${pointer}${pointerOf(['responses', status])}`);
      return {
        where: `${method} ${path} ${status}`,
        status,
        path,
        response: resolved.node,
        pointer: resolved.pointer,
      };
    }),
  );
}

export const sampleRecord = (): MediaRecord => ({
  id: 42,
  organizationId: 3,
  folderId: 7,
  key: 'acme/photos/holiday-ILm6DTZ4Wc-R.jpg',
  name: 'holiday.jpg',
  mimetype: 'image/jpeg',
  bytes: 251505,
  checksum: 'sha256:03d87850d2dd2c31b14aeb15125caefe33ce700feabd79c5c5c0b33ecf075e8f',
  metaData: { ipAddress: '::ffff:127.0.0.1', userAgent: 'curl/8.5.0' },
  createdBy: 'f00dfeedf00dfeed',
  deletingAt: null,
  jobId: null,
  createdAt: new Date('2025-11-22T06:52:11.408Z'),
  updatedAt: new Date('2025-11-22T06:52:11.408Z'),
});

export const views = { publicBaseUrl: 'http://localhost:3000', bucket: 'media' };

/** An upload's answer (no folderId, as the interface shows it). */
export const validEnvelope = () => ({
  statusCode: 200,
  message: 'Success',
  data: toMediaView(sampleRecord(), views, { folderId: false }),
});

export const IMAGE_JOB = 'image-0b6f7c1e-2d9a-4c35-8e41-5f3a9b7d2c10';
export const IMPORT_JOB = 'import-0b6f7c1e-2d9a-4c35-8e41-5f3a9b7d2c10';
export const PDF_JOB = 'pdf-5c1d8e2f-7a3b-4f90-b6c4-1e2d3f4a5b6c';
export const statusUrl = (jobId: string) => `http://localhost:3000/media/jobs/${jobId}`;

/** An error as a failed job reports it: through the queue's encoding, with its job id. */
export const fromJob = (error: AppError, jobId = error.status === 413 ? PDF_JOB : IMAGE_JOB) =>
  decodeJobError(encodeJobError(error))!.withExtra({ jobId });

export const jsonHeaders = {
  'content-type': 'application/json; charset=utf-8',
  'x-request-id': '5b2f0c8e-9d4f-4a51-a1e3-2c7d9b0f6a14',
};

/** What the error handler answers for an AppError: status, headers and body. */
export function errorResponse(error: AppError): {
  status: number;
  headers: Record<string, string>;
  body: unknown;
} {
  const captured = { status: 0, headers: {} as Record<string, string>, body: undefined as unknown };
  const res = {
    headersSent: false,
    setHeader(name: string, value: string) {
      captured.headers[name.toLowerCase()] = value;
      return res;
    },
    status(code: number) {
      captured.status = code;
      return res;
    },
    json(body: unknown) {
      captured.body = body;
      return res;
    },
  };
  const req = { id: 'req-1' };
  errorHandler(error, req as unknown as Request, res as unknown as Response, () => undefined);
  return captured;
}
