/**
 * The object store over S3 (MinIO, AWS S3, OpenStack Swift's s3api) with the
 * `minio` client.
 *
 * `put` does its own streaming multipart upload over the client's
 * `initiateNewMultipartUpload`/`uploadPart`/`completeMultipartUpload`: the
 * client's own `putObject` picks a ~560 MB part size for a stream of unknown
 * length (buffering up to that much per upload), never aborts a failed
 * multipart upload, and waits forever when its source stream errors. Here a
 * part is `partSize` bytes (8 MiB by default), at most `queueSize` parts are
 * uploading while the next one fills, a body that fits in one part is sent as
 * a single PUT, and any failure aborts the multipart upload. The body is cut
 * into parts by part-reader.ts, in buffers from buffer-pool.ts.
 */
import { createHash, hash } from 'node:crypto';
import { once } from 'node:events';
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import { Transform, type Readable } from 'node:stream';
import { finished, pipeline } from 'node:stream/promises';
// A static import on purpose: `await import('minio')` loads the package's ESM build under
// tsx, whose CopySourceOptions is not the class the (CommonJS) client checks with instanceof.
import { CopyDestinationOptions, CopySourceOptions, type Client } from 'minio';
import { Errors, isAppError } from '../errors';
import type { Logger } from '../logger';
import type {
  ByteRange,
  IncompleteUpload,
  ListedObject,
  ObjectInfo,
  ObjectStore,
  MultipartUploads,
  PutOptions,
  PresignedUploads,
  PutResult,
  UploadedPart,
} from './object-store';
import { BufferPool } from './buffer-pool';
import { PartReader, type Part } from './part-reader';
import { ensureBucket } from './s3-client';

/** How long a streamed part's presigned URL is valid: its whole PUT starts within it. */
const PART_URL_SECONDS = 15 * 60;

export interface S3StoreOptions {
  client: Client;
  bucket: string;
  region: string;
  /** The endpoint as clients see it, for `address()` (S3_PUBLIC_ENDPOINT, else S3_ENDPOINT). */
  publicEndpoint: string;
  logger: Logger;
  /** Bytes per multipart part (S3's minimum is 5 MiB). */
  partSize?: number;
  /** Parts uploading at once while the next one fills. */
  queueSize?: number;
  /**
   * A body of unknown length up to this many bytes goes as one PUT (a body
   * that fits in one part always does); past it, a multipart upload.
   */
  singlePutMax?: number;
  /** `multipart.streamPart` offered (S3_STREAM_PARTS; the default): false, every part is sent whole. */
  streamParts?: boolean | undefined;
  description?: string;
  /**
   * The client that signs presigned requests (direct-to-storage uploads): one
   * for the public endpoint when it is not S3_ENDPOINT (a signature covers the
   * host); `client` otherwise.
   */
  presigner?: Client;
}

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'UND_ERR_SOCKET',
]);

/** True when an S3 failure means "storage unreachable or failing", i.e. worth a 503. */
export function isStorageUnavailable(err: unknown): boolean {
  if (!err || typeof err !== 'object') return false;
  const e = err as { code?: unknown; statusCode?: unknown; $metadata?: unknown; cause?: unknown };
  if (typeof e.code === 'string' && NETWORK_CODES.has(e.code)) return true;
  if (typeof e.statusCode === 'number' && e.statusCode >= 500) return true;
  if (
    // NoSuchBucket: the configured bucket vanished; storage is unusable until an operator acts.
    ['ServiceUnavailable', 'SlowDown', 'InternalError', 'RequestTimeout', 'NoSuchBucket'].includes(
      String(e.code),
    )
  ) {
    return true;
  }
  return e.cause !== undefined && e.cause !== err && isStorageUnavailable(e.cause);
}

function isNotFound(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'NoSuchKey' || code === 'NotFound' || code === 'NoSuchObject';
}

export class S3ObjectStore implements ObjectStore {
  readonly description: string;
  private readonly client: Client;
  private readonly bucket: string;
  private readonly partSize: number;
  private readonly queueSize: number;
  private readonly singlePutMax: number;
  private readonly pool: BufferPool;
  readonly presigned: PresignedUploads;
  /** Set once a streamed part's ETag was not its MD5: every later part is sent signed. */
  private partsSigned = false;
  /** Kept-alive connections for streamed parts (the client's own calls have theirs). */
  private readonly agents = {
    http: new http.Agent({ keepAlive: true }),
    https: new https.Agent({ keepAlive: true }),
  };

  constructor(private readonly options: S3StoreOptions) {
    this.client = options.client;
    this.bucket = options.bucket;
    this.partSize = options.partSize ?? 8 * 1024 * 1024;
    this.queueSize = options.queueSize ?? 2;
    this.singlePutMax = options.singlePutMax ?? 2 * this.partSize;
    // Keeps one upload's worth: after a burst of large uploads, memory goes back to that.
    this.pool = new BufferPool(this.partSize, this.queueSize + 1);
    this.description = options.description ?? `s3 bucket ${options.bucket}`;
    this.presigned = this.presignedUploads(options.presigner ?? options.client);
    if (options.streamParts === false)
      this.multipart = { ...this.multipart, streamPart: undefined };
  }

  private presignedUploads(signer: Client): PresignedUploads {
    const bucket = this.bucket;
    return {
      presignPut: (key, expirySeconds) =>
        this.call(() => signer.presignedPutObject(bucket, key, expirySeconds)),
      presignPost: async (key, { contentType, bytes, expiresAt }) => {
        const policy = signer.newPostPolicy();
        policy.setBucket(bucket);
        policy.setKey(key);
        policy.setExpires(expiresAt);
        policy.setContentType(contentType);
        policy.setContentLengthRange(bytes, bytes);
        const { postURL, formData } = await this.call(() => signer.presignedPostPolicy(policy));
        return { url: postURL, fields: formData };
      },
      presignPart: (key, uploadId, partNumber, expirySeconds) =>
        this.call(() =>
          signer.presignedUrl('PUT', bucket, key, expirySeconds, {
            uploadId,
            partNumber: String(partNumber),
          }),
        ),
    };
  }

  address(key: string): string {
    return `${this.options.publicEndpoint.replace(/\/+$/, '')}/${this.bucket}/${key}`;
  }

  /** Runs a storage call, turning connectivity failures into a 503 AppError. */
  private async call<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (!isAppError(err) && isStorageUnavailable(err)) throw Errors.unavailable('storage', err);
      throw err;
    }
  }

  async init(): Promise<void> {
    await this.call(() =>
      ensureBucket(this.client, this.bucket, this.options.region, this.options.logger),
    );
  }

  async ping(): Promise<void> {
    const exists = await this.call(() => this.client.bucketExists(this.bucket));
    if (!exists) throw Errors.unavailable('storage', new Error(`bucket ${this.bucket} is missing`));
  }

  async put(key: string, body: Readable | Buffer, options: PutOptions): Promise<PutResult> {
    const headers = { 'Content-Type': options.contentType };
    if (Buffer.isBuffer(body)) {
      await this.call(() => this.putBuffer(key, body, headers, options.sha256));
      return { bytes: body.length };
    }
    return this.putStream(key, body, headers, options.sha256);
  }

  /**
   * One signed PUT of bytes in memory: a whole object, or a part of a
   * multipart upload (`part`); answers the object's or part's ETag.
   *
   * Over HTTP, SigV4 signs the payload's SHA-256. The client's own calls
   * compute it on the event loop, and `putObject` also an MD5 of the whole
   * body that it does not send: two synchronous passes over every byte. Here
   * the hash comes from the caller when it has one (an upload hashes its bytes
   * anyway), else from one pass over the bytes, and no MD5 is made. Over HTTPS the payload is not signed (`UNSIGNED-PAYLOAD`) and the
   * client's own calls run as they are (its Content-MD5 included).
   */
  private async putBuffer(
    key: string,
    data: Buffer,
    headers: Record<string, string>,
    sha256?: () => string | Promise<string>,
    part?: { uploadId: string; partNumber: number },
  ): Promise<string> {
    if (!this.client.enableSHA256) {
      if (!part)
        return (await this.client.putObject(this.bucket, key, data, data.length, headers)).etag;
      const { etag } = await this.client.uploadPart(
        {
          bucketName: this.bucket,
          objectName: key,
          uploadID: part.uploadId,
          partNumber: part.partNumber,
          headers: {},
        },
        data,
      );
      return etag;
    }
    // Hashed where the bytes are (crypto.subtle would hash on the thread pool, but from a
    // copy: a part's size more per part in flight, +22-28 MiB on a 1 GiB upload).
    const hex = sha256 ? await sha256() : hash('sha256', data);
    const res = await this.client.makeRequestStreamAsync(
      {
        method: 'PUT',
        bucketName: this.bucket,
        objectName: key,
        ...(part ? { query: `uploadId=${part.uploadId}&partNumber=${part.partNumber}` } : {}),
        headers: { ...(part ? {} : headers), 'Content-Length': String(data.length) },
      },
      data,
      hex,
      [200],
      '',
    );
    const etag = res.headers.etag;
    res.resume();
    await once(res, 'end');
    if (typeof etag !== 'string' || etag === '') {
      throw new Error(`storage answered the PUT of ${key} without an ETag`);
    }
    return etag.replace(/^"|"$/g, '');
  }

  /**
   * A part sent as its bytes come, so that its upload overlaps their arrival
   * (a resumable upload's PATCH: docs/resumable-uploads.md, "A PATCH's parts
   * streamed"). SigV4 cannot sign a payload whose SHA-256 is not known before
   * its first byte, so the part goes to a presigned URL, whose payload is
   * unsigned (as the client's own calls send every payload over HTTPS, where
   * TLS guards the bytes). Over HTTP the part's MD5 is taken on the way and
   * compared with the ETag the store answers, which S3, Swift and MinIO make
   * the MD5 of a part's bytes: what `Content-MD5` would prove. A store whose
   * ETag is something else (server-side encryption with KMS or a customer
   * key) fails the comparison: the part is sent again, signed, from `bytes`,
   * and this store sends every later part signed.
   */
  private async streamPart(
    key: string,
    part: { uploadId: string; partNumber: number },
    size: number,
    body: Readable,
    bytes: Buffer,
  ): Promise<string> {
    if (this.partsSigned) {
      body.resume();
      await finished(body);
      return this.putBuffer(key, bytes, {}, undefined, part);
    }
    const url = new URL(
      await this.client.presignedUrl('PUT', this.bucket, key, PART_URL_SECONDS, {
        uploadId: part.uploadId,
        partNumber: String(part.partNumber),
      }),
    );
    const md5 = this.client.enableSHA256 ? createHash('md5') : undefined;
    const request = (url.protocol === 'https:' ? https : http).request(url, {
      method: 'PUT',
      agent: url.protocol === 'https:' ? this.agents.https : this.agents.http,
      headers: { 'Content-Length': String(size) },
    });
    const answered = once(request, 'response') as Promise<[IncomingMessage]>;
    answered.catch(() => undefined);
    const hashing = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        md5?.update(chunk);
        done(null, chunk);
      },
    });
    await pipeline(body, hashing, request);
    const [res] = await answered;
    const chunks: Buffer[] = [];
    for await (const chunk of res) chunks.push(chunk as Buffer);
    if (res.statusCode !== 200) {
      const text = Buffer.concat(chunks).toString('utf8').slice(0, 300);
      // A store or bucket policy that refuses presigned requests: S3_STREAM_PARTS=false.
      const hint = res.statusCode === 403 ? ' (presigned requests refused? S3_STREAM_PARTS)' : '';
      throw new Error(
        `storage answered ${res.statusCode} to part ${part.partNumber} of ${key}${hint}: ${text}`,
      );
    }
    const etag = String(res.headers.etag ?? '').replace(/^"|"$/g, '');
    if (md5 && etag !== md5.digest('hex')) {
      this.partsSigned = true;
      this.options.logger.warn(
        { key, part: part.partNumber, etag },
        "the store's ETag of a streamed part is not its MD5: the part is sent again signed, and so are the later parts",
      );
      return this.putBuffer(key, bytes, {}, undefined, part);
    }
    if (etag === '') throw new Error(`storage answered the PUT of ${key} without an ETag`);
    return etag;
  }

  private async putStream(
    key: string,
    body: Readable,
    headers: Record<string, string>,
    sha256?: () => string | Promise<string>,
  ): Promise<PutResult> {
    const parts = new PartReader(body, this.partSize, this.pool);
    // Parts are read ahead up to singlePutMax: a body that ends within it is one PUT (of the
    // whole body: the caller's hash of it, if any, is the payload's). On Swift a 10 MiB body
    // went 1.6x as fast as one PUT as in two parts (docs/performance.md, "Choosing the part
    // size"); a larger body goes as a multipart upload, the parts read ahead first.
    const ahead: Part[] = [];
    let bytes = 0;
    try {
      do {
        const part = await parts.next();
        ahead.push(part);
        bytes += part.data.length;
      } while (!ahead[ahead.length - 1]!.done && bytes < this.singlePutMax);
    } catch (err) {
      for (const part of ahead) part.release();
      throw err;
    }
    if (ahead[ahead.length - 1]!.done && bytes <= Math.max(this.singlePutMax, this.partSize)) {
      const filled = ahead.filter((p) => p.data.length > 0);
      try {
        // More than one part: copied into one body, their buffers back to the pool at once.
        const whole =
          filled.length === 1
            ? filled[0]!.data
            : Buffer.concat(
                filled.map((p) => p.data),
                bytes,
              );
        if (filled.length !== 1) for (const part of ahead) part.release();
        await this.call(() => this.putBuffer(key, whole, headers, sha256));
      } finally {
        for (const part of ahead) part.release();
      }
      return { bytes };
    }

    let uploadId: string;
    try {
      uploadId = await this.call(() =>
        this.client.initiateNewMultipartUpload(this.bucket, key, headers),
      );
    } catch (err) {
      for (const part of ahead) part.release();
      body.destroy();
      throw err;
    }
    const etags: { part: number; etag: string }[] = [];
    const inFlight = new Set<Promise<void>>();
    let failure: Error | undefined;
    // (a function, so the check reads the variable the part uploads set)
    const throwIfFailed = () => {
      if (failure) throw failure;
    };
    const upload = (partNumber: number, part: Part) => {
      const p = this.call(() =>
        this.putBuffer(key, part.data, {}, undefined, { uploadId, partNumber }),
      )
        .then(
          (etag) => void etags.push({ part: partNumber, etag }),
          (err: unknown) => void (failure ??= err instanceof Error ? err : new Error(String(err))),
        )
        // The part's buffer goes back to the pool once the request is over.
        .finally(() => part.release());
      const tracked = p.finally(() => inFlight.delete(tracked));
      inFlight.add(tracked);
    };

    try {
      let partNumber = 0;
      bytes = 0; // counted again as the parts go
      for (;;) {
        // A part is read once one of the queueSize in flight is done: a part buffer each,
        // and one filling (reading the next part while all are busy was no faster here and
        // held a buffer more per upload).
        while (inFlight.size >= this.queueSize) await Promise.race(inFlight);
        throwIfFailed();
        const next = ahead.shift() ?? (await parts.next());
        if (next.data.length > 0) {
          bytes += next.data.length;
          upload(++partNumber, next);
        } else {
          next.release();
        }
        if (next.done) break;
      }
      await Promise.all(inFlight);
      throwIfFailed();
      etags.sort((a, b) => a.part - b.part);
      await this.call(() => this.client.completeMultipartUpload(this.bucket, key, uploadId, etags));
      return { bytes };
    } catch (err) {
      await Promise.allSettled(inFlight);
      for (const part of ahead) part.release();
      parts.dispose();
      await this.client
        .abortMultipartUpload(this.bucket, key, uploadId)
        .catch((abortErr: unknown) =>
          this.options.logger.warn({ err: abortErr, key }, 'could not abort multipart upload'),
        );
      body.destroy();
      throw err;
    }
  }

  async get(key: string, range?: ByteRange): Promise<Readable> {
    return this.call(async () => {
      try {
        return range
          ? await this.client.getPartialObject(
              this.bucket,
              key,
              range.start,
              range.end - range.start + 1,
            )
          : await this.client.getObject(this.bucket, key);
      } catch (err) {
        if (isNotFound(err)) throw Errors.mediaNotFound(key);
        throw err;
      }
    });
  }

  async stat(key: string): Promise<ObjectInfo | null> {
    return this.call(async () => {
      try {
        const s = await this.client.statObject(this.bucket, key);
        return { size: s.size, etag: s.etag, lastModified: s.lastModified };
      } catch (err) {
        if (isNotFound(err)) return null;
        throw err;
      }
    });
  }

  async copy(fromKey: string, toKey: string): Promise<void> {
    await this.call(() =>
      this.client.copyObject(
        new CopySourceOptions({ Bucket: this.bucket, Object: fromKey }),
        new CopyDestinationOptions({ Bucket: this.bucket, Object: toKey }),
      ),
    );
  }

  async remove(key: string): Promise<void> {
    await this.call(() => this.client.removeObject(this.bucket, key));
  }

  async removeMany(keys: string[]): Promise<void> {
    if (keys.length === 0) return;
    await this.call(() => this.client.removeObjects(this.bucket, keys));
  }

  async *list(prefix: string): AsyncIterable<ListedObject> {
    const stream = this.client.listObjectsV2(this.bucket, prefix, true);
    for await (const item of stream) {
      const o = item as { name?: string; size?: number; lastModified?: Date };
      if (o.name)
        yield { key: o.name, size: o.size ?? 0, lastModified: o.lastModified ?? new Date(0) };
    }
  }

  async listIncompleteUploads(prefix: string): Promise<string[]> {
    const keys: string[] = [];
    for await (const upload of this.incompleteUploads(prefix)) keys.push(upload.key);
    return keys;
  }

  async *incompleteUploads(prefix: string): AsyncIterable<IncompleteUpload> {
    // Queried page by page rather than through the client's listIncompleteUploads
    // stream, whose "recursive" mode sends an empty delimiter that Swift's s3api
    // takes literally (it then lists nothing). Keys never contain "|", so it
    // serves as a delimiter that groups nothing.
    let keyMarker = '';
    let uploadIdMarker = '';
    for (;;) {
      const page = await this.call(() =>
        this.client.listIncompleteUploadsQuery(this.bucket, prefix, keyMarker, uploadIdMarker, '|'),
      );
      for (const upload of page.uploads) {
        yield { key: String(upload.key), uploadId: upload.uploadId, initiated: upload.initiated };
      }
      if (!page.isTruncated) return;
      keyMarker = page.nextKeyMarker;
      uploadIdMarker = page.nextUploadIdMarker;
    }
  }

  readonly multipart: MultipartUploads = {
    create: (key, contentType) =>
      this.call(() =>
        this.client.initiateNewMultipartUpload(this.bucket, key, { 'Content-Type': contentType }),
      ),
    putPart: (key, uploadId, partNumber, data) =>
      this.call(() => this.putBuffer(key, data, {}, undefined, { uploadId, partNumber })),
    streamPart: (key, uploadId, partNumber, size, body, bytes) =>
      this.call(() => this.streamPart(key, { uploadId, partNumber }, size, body, bytes)),
    copyPart: (key, uploadId, partNumber, sourceKey) =>
      this.call(async () => {
        // UploadPartCopy: an UploadPart with the source named and no body.
        const { etag } = await this.client.uploadPart({
          bucketName: this.bucket,
          objectName: key,
          uploadID: uploadId,
          partNumber,
          headers: { 'x-amz-copy-source': encodeURI(`${this.bucket}/${sourceKey}`) },
        });
        return etag;
      }),
    parts: (key, uploadId) =>
      this.call(async () => {
        // listParts is protected in minio's typings; it pages through every part.
        const lister = this.client as unknown as {
          listParts(
            b: string,
            k: string,
            u: string,
          ): Promise<{ part: number; etag: string; size: number }[]>;
        };
        try {
          const parts = await lister.listParts(this.bucket, key, uploadId);
          return parts.map((p) => ({ part: p.part, etag: p.etag, size: p.size }));
        } catch (err) {
          if ((err as { code?: unknown } | null)?.code === 'NoSuchUpload') return null;
          throw err;
        }
      }),
    complete: async (key, uploadId, parts: UploadedPart[]) => {
      // The completion's answer names the object's ETag (quotes taken off, as statObject does).
      const { etag } = await this.call(() =>
        this.client.completeMultipartUpload(this.bucket, key, uploadId, parts),
      );
      return { etag };
    },
    abort: (key, uploadId) => this.abortIncompleteUpload({ key, uploadId, initiated: new Date() }),
  };

  async abortIncompleteUpload(upload: IncompleteUpload): Promise<void> {
    await this.call(async () => {
      try {
        await this.client.abortMultipartUpload(this.bucket, upload.key, upload.uploadId);
      } catch (err) {
        if ((err as { code?: unknown } | null)?.code !== 'NoSuchUpload') throw err;
      }
    });
  }
}
