/**
 * Resumable uploads, tus 1.0 (docs/resumable-uploads.md): `POST
 * /media/upload/resumable` creates an upload, each upload lives at
 * `/media/upload/resumable/<id>` (HEAD, PATCH, DELETE). Extensions: creation,
 * creation-with-upload, creation-defer-length, termination, expiration,
 * checksum (sha1, sha256), concatenation. The headers are read and checked
 * here; ResumableService keeps the state and the bytes. Every answer carries
 * `Tus-Resumable`, and `Upload-Expires` once the upload is known; errors are
 * the service's error envelope (shared/errors.ts) with the status tus names.
 *
 * Written by hand rather than with `@tus/server` (decision in the docs): its
 * stores talk to S3 through the AWS SDK, not our object store; it has no
 * checksum nor a shared lock; and its answers would bypass the error mapper,
 * the scopes and the route guards every other route goes through.
 */
import {
  Router,
  type NextFunction,
  type Request,
  type RequestHandler,
  type Response,
} from 'express';
import type { Config } from '@shared/config';
import { Errors } from '@shared/errors';
import { toMediaView } from '../domain/media-view';
import { closeAfterAnswer } from '../forms/multipart-form';
import { callerOf } from '../http/request-context';
import { success } from '../http/respond';
import { requireScope } from '../middleware/auth';
import type { Cost } from '../middleware/rate-limit';
import {
  CHECKSUM_ALGORITHMS,
  MAX_METADATA_HEADER,
  MAX_METADATA_VALUE,
  type ChecksumAlgorithm,
  type PatchResult,
  type ResumableService,
  type ResumableState,
  type UploadMetadata,
} from '../services/resumable.service';

export const RESUMABLE_PATH = '/media/upload/resumable';
export const TUS_VERSION = '1.0.0';
export const TUS_EXTENSIONS = [
  'creation',
  'creation-with-upload',
  'creation-defer-length',
  'termination',
  'expiration',
  'checksum',
  'concatenation',
];
const OFFSET_TYPE = 'application/offset+octet-stream';

/** The tus headers a browser sends and reads (added to the CORS lists). */
export const TUS_REQUEST_HEADERS = [
  'Tus-Resumable',
  'Upload-Length',
  'Upload-Offset',
  'Upload-Metadata',
  'Upload-Defer-Length',
  'Upload-Concat',
  'Upload-Checksum',
];
export const TUS_RESPONSE_HEADERS = [
  'Tus-Resumable',
  'Tus-Version',
  'Tus-Extension',
  'Tus-Max-Size',
  'Tus-Checksum-Algorithm',
  'Upload-Offset',
  'Upload-Length',
  'Upload-Defer-Length',
  'Upload-Metadata',
  'Upload-Expires',
  'Upload-Concat',
  'Media-Key',
];

type Handler = (req: Request, res: Response) => Promise<void>;

/**
 * OPTIONS (discovery): answered before authentication, as a client asks
 * before it has a token (a middleware, not a route: it is described with
 * the creation in the OpenAPI document).
 */
export function resumableDiscovery(config: Pick<Config, 'limits'>): RequestHandler {
  const paths = new RegExp(`^${RESUMABLE_PATH}(/[0-9a-f]{32})?/?$`, 'i');
  return (req, res, next) => {
    if (req.method !== 'OPTIONS' || !paths.test(req.path)) {
      next();
      return;
    }
    res
      .status(204)
      .set({
        'Tus-Resumable': TUS_VERSION,
        'Tus-Version': TUS_VERSION,
        'Tus-Extension': TUS_EXTENSIONS.join(','),
        'Tus-Max-Size': String(config.limits.maxFileSize),
        'Tus-Checksum-Algorithm': CHECKSUM_ALGORITHMS.join(','),
      })
      .end();
  };
}

export function resumableRoutes(deps: {
  resumable: ResumableService;
  config: Config;
  guards: { charge?: ((cost: Cost) => RequestHandler) | undefined };
}): Router {
  const router = Router();
  const { resumable, config } = deps;
  const views = { publicBaseUrl: config.publicBaseUrl, bucket: config.bucket };

  const route = (
    method: 'post' | 'head' | 'patch' | 'delete',
    path: string,
    cost: Cost,
    handler: Handler,
  ) => {
    router[method](
      path,
      ...(deps.guards.charge ? [deps.guards.charge(cost)] : []),
      tusHeader,
      requireScope('write'),
      tusVersion,
      (req: Request, res: Response, next: NextFunction) => {
        handler(req, res).catch((err: unknown) => {
          // A body refused before its end: answer, then close the connection while reading
          // what the client still sends (so it reads the answer, not a reset).
          if (!req.readableEnded) closeAfterAnswer(req);
          next(err);
        });
      },
    );
  };

  /** The answer for an upload: its offset, length and expiry (and Media-Key once recorded). */
  const describe = (res: Response, state: ResumableState) => {
    res.set('Upload-Offset', String(state.offset));
    if (state.length === null) res.set('Upload-Defer-Length', '1');
    else res.set('Upload-Length', String(state.length));
    if (state.mediaKey === undefined) {
      res.set('Upload-Expires', new Date(state.expiresAt).toUTCString());
    }
    if (state.mediaKey !== undefined) res.set('Media-Key', state.mediaKey);
    if (state.partial) res.set('Upload-Concat', 'partial');
    if (state.final) res.set('Upload-Concat', `final;${state.final.map(urlOf).join(' ')}`);
    const metadata = encodeMetadata(state.metadata);
    if (metadata) res.set('Upload-Metadata', metadata);
  };

  /** 204 with the offset, or, when this request finished the upload, its record. */
  const answer = (res: Response, { state, record }: PatchResult, created: boolean) => {
    describe(res, state);
    if (created) res.set('Location', urlOf(state.id));
    if (record) {
      success(res, toMediaView(record, views, { folderId: false }), created ? 201 : 200);
    } else {
      res.status(created ? 201 : 204).end();
    }
  };

  route('post', RESUMABLE_PATH, 5, async (req, res) => {
    const caller = callerOf(req);
    const metadata = parseMetadata(req.get('Upload-Metadata'));
    const concat = req.get('Upload-Concat');
    if (concat !== undefined && concat.startsWith('final;')) {
      const ids = concat
        .slice('final;'.length)
        .trim()
        .split(/\s+/)
        .filter(Boolean)
        .map((url) => url.replace(/\/+$/, '').split('/').pop() ?? '');
      if (ids.length === 0) throw Errors.badRequest('Upload-Concat: final names no upload');
      if (req.get('Upload-Length') !== undefined) {
        throw Errors.badRequest('A final upload takes no Upload-Length');
      }
      answer(res, await resumable.concatenate(caller, ids, metadata), true);
      return;
    }
    if (concat !== undefined && concat !== 'partial') {
      throw Errors.badRequest('Upload-Concat is "partial" or "final;<urls>"');
    }
    const length = optionalInteger(req.get('Upload-Length'), 'Upload-Length');
    const deferred = req.get('Upload-Defer-Length');
    if (deferred !== undefined && deferred !== '1') {
      throw Errors.badRequest('Upload-Defer-Length must be 1');
    }
    if ((length === undefined) === (deferred === undefined)) {
      throw Errors.badRequest('Send exactly one of Upload-Length and Upload-Defer-Length: 1');
    }
    const withBody = req.get('Content-Type') !== undefined || Number(req.get('Content-Length')) > 0;
    if (withBody) checkContentType(req);
    const state = await resumable.create(caller, {
      length: length ?? null,
      metadata,
      partial: concat === 'partial',
    });
    if (withBody || state.length === 0) {
      // creation-with-upload (or an empty file, complete at once).
      res.set('Upload-Expires', new Date(state.expiresAt).toUTCString());
      res.set('Location', urlOf(state.id));
      answer(res, await resumable.patch(caller, state.id, patchInput(req, 0)), true);
      return;
    }
    answer(res, { state }, true);
  });

  route('head', `${RESUMABLE_PATH}/:id`, 1, async (req, res) => {
    const state = await resumable.status(callerOf(req), String(req.params.id));
    res.set('Cache-Control', 'no-store');
    describe(res, state);
    res.status(200).end();
  });

  route('patch', `${RESUMABLE_PATH}/:id`, 5, async (req, res) => {
    checkContentType(req);
    const offset = optionalInteger(req.get('Upload-Offset'), 'Upload-Offset');
    if (offset === undefined) throw Errors.badRequest('Upload-Offset is required');
    const result = await resumable.patch(
      callerOf(req),
      String(req.params.id),
      patchInput(req, offset),
    );
    // Ended early (another writer asked for the lock): the rest of the body is not read.
    if (!req.readableEnded) closeAfterAnswer(req);
    answer(res, result, false);
  });

  route('delete', `${RESUMABLE_PATH}/:id`, 1, async (req, res) => {
    await resumable.terminate(callerOf(req), String(req.params.id));
    res.status(204).end();
  });

  return router;
}

/** Every answer says our version. */
const tusHeader: RequestHandler = (_req, res, next) => {
  res.set('Tus-Resumable', TUS_VERSION);
  next();
};

/** Every tus request (but OPTIONS) says its version (412 otherwise). */
const tusVersion: RequestHandler = (req, _res, next) => {
  next(req.get('Tus-Resumable') === TUS_VERSION ? undefined : Errors.tusVersion());
};

function urlOf(id: string): string {
  return `${RESUMABLE_PATH}/${id}`;
}

function checkContentType(req: Request): void {
  const type = req.get('Content-Type')?.split(';')[0]?.trim().toLowerCase();
  if (type !== OFFSET_TYPE) {
    throw Errors.unsupportedType(`A PATCH body is sent as ${OFFSET_TYPE}`);
  }
}

function patchInput(req: Request, offset: number) {
  return {
    offset,
    body: req,
    length: optionalInteger(req.get('Upload-Length'), 'Upload-Length'),
    checksum: parseChecksum(req.get('Upload-Checksum')),
    // Node's parser holds the body to it (absent: chunked).
    contentLength: optionalInteger(req.get('Content-Length'), 'Content-Length'),
  };
}

function optionalInteger(value: string | undefined, header: string): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d{1,15}$/.test(value))
    throw Errors.badRequest(`${header} must be a non-negative integer`);
  return Number(value);
}

function parseChecksum(
  value: string | undefined,
): { algorithm: ChecksumAlgorithm; digest: string } | undefined {
  if (value === undefined) return undefined;
  const [algorithm, digest, ...rest] = value.trim().split(' ');
  if (!(CHECKSUM_ALGORITHMS as readonly string[]).includes(algorithm ?? '')) {
    throw Errors.badRequest(
      `Upload-Checksum: the algorithms are ${CHECKSUM_ALGORITHMS.join(', ')}`,
    );
  }
  if (!digest || rest.length > 0 || !/^[A-Za-z0-9+/]+={0,2}$/.test(digest)) {
    throw Errors.badRequest('Upload-Checksum is "<algorithm> <base64 digest>"');
  }
  return { algorithm: algorithm as ChecksumAlgorithm, digest };
}

/** The metadata keys kept, under the names Uppy and tus-js-client send. */
const METADATA_KEYS: Record<string, keyof UploadMetadata> = {
  filename: 'filename',
  name: 'filename',
  filetype: 'filetype',
  type: 'filetype',
  folder: 'folder',
  folderId: 'folderId',
};

/**
 * `Upload-Metadata`: comma-separated `key base64value` pairs. Every value is
 * checked (bounded length, no CR, LF or NUL: 400), whether kept or not.
 */
export function parseMetadata(header: string | undefined): UploadMetadata {
  const metadata: UploadMetadata = {};
  if (header === undefined || header.trim() === '') return metadata;
  if (header.length > MAX_METADATA_HEADER) {
    throw Errors.badRequest(`Upload-Metadata is longer than ${MAX_METADATA_HEADER} characters`);
  }
  for (const pair of header.split(',')) {
    const [key, encoded, ...rest] = pair.trim().split(' ');
    if (!key || !/^[A-Za-z0-9_.-]{1,64}$/.test(key) || rest.length > 0) {
      throw Errors.validation([{ field: 'Upload-Metadata', message: 'a key is malformed' }]);
    }
    if (encoded !== undefined && !/^[A-Za-z0-9+/]*={0,2}$/.test(encoded)) {
      throw Errors.validation([{ field: 'Upload-Metadata', message: `${key} is not base64` }]);
    }
    const value = Buffer.from(encoded ?? '', 'base64').toString('utf8');
    if (/[\r\n\0]/.test(value)) {
      throw Errors.validation([
        { field: 'Upload-Metadata', message: `${key} contains CR, LF or NUL` },
      ]);
    }
    if (value.length > MAX_METADATA_VALUE) {
      throw Errors.validation([
        { field: 'Upload-Metadata', message: `${key} is longer than ${MAX_METADATA_VALUE}` },
      ]);
    }
    const kept = METADATA_KEYS[key];
    if (kept && metadata[kept] === undefined) metadata[kept] = value;
  }
  return metadata;
}

/** The kept metadata, base64-encoded again (a header never carries a decoded value). */
function encodeMetadata(metadata: UploadMetadata): string {
  return Object.entries(metadata)
    .filter(([, value]) => value !== undefined)
    .map(([key, value]) => `${key} ${Buffer.from(String(value)).toString('base64')}`)
    .join(',');
}
