/**
 * Resumable (tus) uploads as both processes see them: the state the API keeps
 * in Redis for each upload (api/services/resumable.service.ts writes it), the
 * Redis keys, what an upload holds in the object store, and its removal. The
 * worker's `media.expire-resumable` job (worker/processors/) runs
 * `expireResumableUploads` on a schedule; the API removes an upload the same
 * way when it is terminated or finished.
 *
 * What an upload holds in the store: one multipart upload (created with its
 * first whole part; its key is the file's final key, or a partial upload's
 * own object), and temporary objects under `<org>/.tmp/tus/<id>/` (the tail:
 * bytes past the last whole part; a finished partial upload's object).
 */
import type { Logger } from './logger';
import type { MediaType } from './media/media-types';
import { waitForRedis, type RedisConnection } from './queue/redis';
import type { ObjectStore } from './storage/object-store';

/** What `Upload-Metadata` may say of the file (the keys Uppy and tus-js-client send). */
export interface UploadMetadata {
  filename?: string | undefined;
  filetype?: string | undefined;
  folder?: string | undefined;
  folderId?: string | undefined;
}

/** A part stored in the upload's multipart upload. */
export interface StoredPart {
  part: number;
  etag: string;
  size: number;
}

export interface ResumableState {
  id: string;
  organizationId: number;
  /** Where its temporary objects live: `<org>/.tmp/tus/<id>/`. */
  prefix: string;
  /** null: deferred (`Upload-Defer-Length: 1`) until a PATCH says it. */
  length: number | null;
  /** Bytes kept: the parts', then the tail's. */
  offset: number;
  metadata: UploadMetadata;
  createdAt: number;
  expiresAt: number;
  /** Up to DETECTION_BYTES of the first bytes (base64), for the type check. */
  head: string;
  /** `Upload-Concat: partial`: never a record of its own. */
  partial: boolean;
  /** `Upload-Concat: final`: the partial uploads' URLs it was made of. */
  final?: string[] | undefined;
  /**
   * The store's multipart upload, made when the first whole part is sent:
   * its key (the file's final key, or a partial upload's object), its part
   * size (fixed from then on), the parts stored, and what the key was built
   * from (the detected type, the display name, the folder).
   */
  multipart?:
    | {
        key: string;
        uploadId: string;
        partSize: number;
        parts: StoredPart[];
        type?: MediaType | undefined;
        name?: string | undefined;
        folderId?: number | null | undefined;
      }
    | undefined;
  /** Bytes past the last whole part, kept as one temporary object until the next PATCH. */
  tail?: { key: string; size: number } | undefined;
  /** A finished partial upload's object (a final concatenation copies it). */
  object?: string | undefined;
  /**
   * The API process whose in-memory SHA-256 has read every byte up to
   * `offset` (its id); null once another process took a PATCH: the finished
   * file is then read back once for its checksum.
   */
  hashedBy?: string | null | undefined;
  /**
   * Every byte is stored and the parts are being joined (`checksum`: the
   * file's SHA-256, when known): a request that finds this after a crash
   * finishes the upload.
   */
  completing?: { checksum: string | null } | undefined;
  /** Once the record is written: its key (the `Media-Key` header). */
  mediaKey?: string | undefined;
  /** Set by the cleanup once expired and removed (answers 410 until the state itself expires). */
  expired?: boolean | undefined;
}

/** How long an expired upload answers 410 (then 404). */
export const TOMBSTONE_MS = 24 * 60 * 60 * 1000;

/** The Redis keys of resumable uploads (the id in a hash tag: a Redis Cluster keeps an upload's keys together). */
export function resumableKeys(queuePrefix: string) {
  const prefix = `${queuePrefix}:tus`;
  return {
    state: (id: string) => `${prefix}:{${id}}`,
    lock: (id: string) => `${prefix}:{${id}}:lock`,
    release: (id: string) => `${prefix}:{${id}}:release`,
    /** The organization's unfinished uploads by expiry (the RESUMABLE_MAX_INCOMPLETE cap). */
    org: (orgId: number) => `${prefix}:org:${orgId}`,
    /** Every unfinished upload by expiry (the cleanup, the in-progress gauge). */
    expiries: `${prefix}:expiries`,
  };
}

/** The temporary objects' prefix of an upload. */
export function resumablePrefix(orgSlug: string, id: string): string {
  return `${orgSlug}/.tmp/tus/${id}/`;
}

/**
 * Removes what an upload holds in the store: its multipart upload aborted
 * (parts and all), every object under its prefix (the tail, a partial's
 * object, one a crashed PATCH wrote and never named). Idempotent.
 */
export async function removeResumableBytes(
  store: ObjectStore,
  state: Pick<ResumableState, 'prefix' | 'multipart'>,
): Promise<void> {
  if (state.multipart) await store.multipart.abort(state.multipart.key, state.multipart.uploadId);
  const keys: string[] = [];
  for await (const object of store.list(state.prefix)) keys.push(object.key);
  await store.removeMany(keys);
}

/**
 * The store's upload ids of the multipart uploads of resumable uploads in
 * progress (not finished, not expired): `reconcile` leaves them open.
 */
export async function resumableMultipartUploads(
  redis: RedisConnection,
  queuePrefix: string,
): Promise<Set<string>> {
  const keys = resumableKeys(queuePrefix);
  await waitForRedis(redis);
  const ids = await redis.zrangebyscore(keys.expiries, String(Date.now()), '+inf');
  const open = new Set<string>();
  for (const id of ids) {
    const raw = await redis.get(keys.state(id));
    const uploadId =
      raw === null ? undefined : (JSON.parse(raw) as ResumableState).multipart?.uploadId;
    if (uploadId) open.add(uploadId);
  }
  return open;
}

/**
 * The scheduled cleanup: every upload past its `Upload-Expires` and not
 * finished loses its bytes (removeResumableBytes) and is marked expired (410
 * until its state lapses, a day later). An upload in progress holds no quota
 * booking (its quota is checked, and booked only when its record is written),
 * so there is nothing to give back. Returns how many were cleaned; any
 * process may run it at any time (the work is idempotent).
 */
export async function expireResumableUploads(
  deps: { redis: RedisConnection; store: ObjectStore; queuePrefix: string; logger: Logger },
  now = Date.now(),
): Promise<number> {
  const { redis } = deps;
  const keys = resumableKeys(deps.queuePrefix);
  let cleaned = 0;
  for (;;) {
    const ids = await redis.zrangebyscore(keys.expiries, 0, now, 'LIMIT', 0, 500);
    for (const id of ids) {
      const raw = await redis.get(keys.state(id));
      const state = raw === null ? null : (JSON.parse(raw) as ResumableState);
      if (state && state.mediaKey === undefined && !state.expired) {
        await removeResumableBytes(deps.store, state);
        const tombstone: ResumableState = {
          ...state,
          expired: true,
          multipart: undefined,
          tail: undefined,
          object: undefined,
        };
        await redis.set(keys.state(id), JSON.stringify(tombstone), 'PX', TOMBSTONE_MS);
        await redis.zrem(keys.org(state.organizationId), id);
        cleaned += 1;
      }
      await redis.zrem(keys.expiries, id);
    }
    if (ids.length < 500) break;
  }
  if (cleaned > 0) deps.logger.info({ cleaned }, 'expired resumable uploads removed');
  return cleaned;
}
