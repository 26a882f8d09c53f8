/**
 * The object store: one interface, implemented over S3 (`s3-object-store.ts`).
 * Keys are opaque strings; the store knows nothing of organizations or records.
 * Connectivity failures surface as `Errors.unavailable('storage')` (503).
 */
import type { Readable } from 'node:stream';

export interface PutOptions {
  contentType: string;
  /**
   * The SHA-256 (hex) of the whole body, when the caller computes it anyway
   * (an upload's checksum): asked for only once the body has been read to its
   * end, and then only when the body goes to storage in one request, so a
   * store that signs its payloads (S3 over HTTP) need not hash it again.
   */
  sha256?: () => string | Promise<string>;
}

export interface PutResult {
  /** Bytes written. */
  bytes: number;
}

export interface ObjectInfo {
  size: number;
  etag: string;
  lastModified: Date;
}

export interface ByteRange {
  /** First byte, inclusive. */
  start: number;
  /** Last byte, inclusive. */
  end: number;
}

export interface ListedObject {
  key: string;
  size: number;
  lastModified: Date;
}

/** A multipart upload still open: a put in progress, or one a crash or an outage left behind. */
export interface IncompleteUpload {
  key: string;
  /** The store's id for it (the S3 upload id; the temporary file's name on the file system). */
  uploadId: string;
  initiated: Date;
}

/**
 * Presigned requests a client sends to the store itself (direct-to-storage
 * uploads, api/services/direct-upload.service.ts): signed with the store's
 * credentials for its public endpoint, valid for `expirySeconds`. Only an S3
 * store has them.
 */
export interface PresignedUploads {
  /** A presigned PUT of `key`. */
  presignPut(key: string, expirySeconds: number): Promise<string>;
  /**
   * A presigned POST policy for exactly `key`, exactly `bytes` bytes and the
   * content type `contentType`: the form fields to send before the file.
   */
  presignPost(
    key: string,
    options: { contentType: string; bytes: number; expiresAt: Date },
  ): Promise<{ url: string; fields: Record<string, string> }>;
  /** A presigned UploadPart of part `partNumber` (1-based). */
  presignPart(
    key: string,
    uploadId: string,
    partNumber: number,
    expirySeconds: number,
  ): Promise<string>;
}

/** A part of a multipart upload, as its completion names it. */
export interface UploadedPart {
  part: number;
  etag: string;
}

/** A part of a multipart upload as the store lists it: with its size. */
export interface ListedPart extends UploadedPart {
  size: number;
}

/**
 * A multipart upload held open across requests (a resumable upload's parts,
 * api/services/resumable.service.ts): S3's own (parts of at least 5 MiB but
 * the last, at most 10,000), or, on the file system, a directory of part
 * files joined at completion.
 */
export interface MultipartUploads {
  /** Starts one for `key`; answers its id. */
  create(key: string, contentType: string): Promise<string>;
  /** Stores part `partNumber` (from 1); a part sent again replaces it. Answers its ETag. */
  putPart(key: string, uploadId: string, partNumber: number, data: Buffer): Promise<string>;
  /**
   * Part `partNumber` sent while its bytes come: `body` yields exactly `size`
   * bytes, which the caller also holds, in order, in `bytes` (what is sent
   * again, signed, when the store's answer does not prove the part arrived
   * whole). Destroying `body` stops the part: nothing of it is stored.
   * Answers its ETag. Absent where the store cannot take a part as a stream
   * (the file system): `putPart` then.
   */
  streamPart?(
    key: string,
    uploadId: string,
    partNumber: number,
    size: number,
    body: Readable,
    bytes: Buffer,
  ): Promise<string>;
  /** Part `partNumber` copied from the whole stored object `sourceKey` by the store itself (UploadPartCopy). */
  copyPart(key: string, uploadId: string, partNumber: number, sourceKey: string): Promise<string>;
  /**
   * The parts the store holds, in order, with their sizes (a direct upload's
   * client sent them itself), or null when the upload is gone (completed or
   * aborted).
   */
  parts(key: string, uploadId: string): Promise<ListedPart[] | null>;
  /**
   * The parts, in order, become the object at `key` (no byte passes through
   * the caller); answers the object's ETag, as `stat` would.
   */
  complete(key: string, uploadId: string, parts: UploadedPart[]): Promise<{ etag: string }>;
  /** Removes the upload and its parts; one already gone (completed or aborted) is not an error. */
  abort(key: string, uploadId: string): Promise<void>;
}

export interface ObjectStore {
  /** Presigned requests for direct-to-storage uploads; absent when the store has none (the file system). */
  readonly presigned?: PresignedUploads | undefined;
  /** A short description for logs: which backend, where. */
  readonly description: string;
  /**
   * The object's full address in the store, as a client outside the service
   * would name it: `<endpoint>/<bucket>/<key>` (S3_PUBLIC_ENDPOINT or
   * S3_ENDPOINT for S3; STORAGE_PUBLIC_ENDPOINT, by default `file://`, for
   * the file system, never the server's own path). (A merged PDF's record
   * `name`; the address needs the store's own credentials to be read.)
   */
  address(key: string): string;
  /** Prepares the store (creates the bucket when missing). */
  init(): Promise<void>;
  /** Checks that the store answers (for readiness probes). */
  ping(): Promise<void>;
  /**
   * Streams `body` to `key`. If `body` fails (the client went away, a limit
   * tripped), the partial write is aborted and nothing is left behind, and the
   * body's error is rethrown.
   */
  put(key: string, body: Readable | Buffer, options: PutOptions): Promise<PutResult>;
  /** The whole object, or the given byte range of it. */
  get(key: string, range?: ByteRange): Promise<Readable>;
  /** The object's size and dates, or null when it does not exist. */
  stat(key: string): Promise<ObjectInfo | null>;
  /** Server-side copy. */
  copy(fromKey: string, toKey: string): Promise<void>;
  /** Removes the object; removing a missing object is not an error. */
  remove(key: string): Promise<void>;
  removeMany(keys: string[]): Promise<void>;
  list(prefix: string): AsyncIterable<ListedObject>;
  /** Keys with a multipart upload still open under `prefix`. */
  listIncompleteUploads(prefix: string): Promise<string[]>;
  /** The multipart uploads still open under `prefix`, page by page (for reconciliation). */
  incompleteUploads(prefix: string): AsyncIterable<IncompleteUpload>;
  /** Aborts an open multipart upload, deleting its parts; one already gone is not an error. */
  abortIncompleteUpload(upload: IncompleteUpload): Promise<void>;
  /** Multipart uploads driven by the caller, part by part. */
  readonly multipart: MultipartUploads;
}

/**
 * The first `limit` bytes of the objects at `keys` taken end to end (say, for
 * type detection), read with ranged gets that stop at `limit`. Each object
 * must hold at least one byte (a range of an empty object is refused).
 */
export async function firstBytes(
  store: Pick<ObjectStore, 'get'>,
  keys: readonly string[],
  limit: number,
): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let length = 0;
  for (const key of keys) {
    if (length >= limit) break;
    for await (const data of await store.get(key, { start: 0, end: limit - length - 1 })) {
      chunks.push(data as Buffer);
      length += (data as Buffer).length;
    }
  }
  return Buffer.concat(chunks).subarray(0, limit);
}
