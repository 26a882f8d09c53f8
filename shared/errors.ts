/**
 * The one error type. Every failure the service reports carries a stable code
 * and an HTTP status; `api/middleware/error-handler.ts` is the one place that
 * turns it into the documented error envelope. Create errors through the named
 * factories in `Errors` so the same situation always gets the same code.
 */
export type ErrorCode =
  | 'BAD_REQUEST'
  | 'VALIDATION_FAILED'
  | 'INVALID_DATA_URL'
  | 'FOLDER_MISMATCH'
  | 'UNAUTHORIZED'
  | 'INSUFFICIENT_SCOPE'
  | 'SIGNED_URL_INVALID'
  | 'SIGNED_URL_EXPIRED'
  | 'NOT_FOUND'
  | 'MEDIA_NOT_FOUND'
  | 'FOLDER_NOT_FOUND'
  | 'JOB_NOT_FOUND'
  | 'METHOD_NOT_ALLOWED'
  | 'CONFLICT'
  | 'FOLDER_NOT_EMPTY'
  | 'ROOT_FOLDER'
  | 'DUPLICATE'
  | 'IDEMPOTENCY_KEY_IN_USE'
  | 'IDEMPOTENCY_KEY_REUSED'
  | 'RANGE_NOT_SATISFIABLE'
  | 'FILE_TOO_LARGE'
  | 'QUOTA_EXCEEDED'
  | 'TOO_MANY_FILES'
  | 'TOO_MANY_PARTS'
  | 'PAYLOAD_TOO_LARGE'
  | 'HEADERS_TOO_LARGE'
  | 'UNSUPPORTED_MEDIA_TYPE'
  | 'UNREADABLE_MEDIA'
  | 'ENCRYPTED_PDF'
  | 'RATE_LIMITED'
  | 'TOO_MANY_JOBS'
  | 'TOO_MANY_UPLOADS'
  | 'TOO_MANY_RESULTS'
  | 'REQUEST_TIMEOUT'
  | 'DEPENDENCY_UNAVAILABLE'
  | 'JOB_TIMEOUT'
  | 'SIGNED_URLS_DISABLED'
  | 'PROCESSING_TIMEOUT'
  | 'OUTPUT_TOO_LARGE'
  | 'URL_NOT_ALLOWED'
  | 'URL_FETCH_FAILED'
  | 'SCAN_PENDING'
  | 'FILE_NOT_SCANNED'
  | 'FILE_INFECTED'
  | 'TUS_VERSION_UNSUPPORTED'
  | 'OFFSET_MISMATCH'
  | 'CHECKSUM_MISMATCH'
  | 'UPLOAD_EXPIRED'
  | 'UPLOAD_LOCKED'
  | 'UPLOAD_FINAL'
  | 'TOO_MANY_INCOMPLETE_UPLOADS'
  | 'DIRECT_UPLOADS_UNSUPPORTED'
  | 'UPLOAD_INCOMPLETE'
  | 'UPLOAD_NOT_FOUND'
  | 'SIZE_MISMATCH'
  | 'INTERNAL';

export interface ErrorDetail {
  field?: string;
  index?: number;
  name?: string;
  message: string;
  [key: string]: unknown;
}

export class AppError extends Error {
  override readonly name = 'AppError';

  constructor(
    readonly code: ErrorCode,
    readonly status: number,
    message: string,
    readonly details?: ErrorDetail[],
    options?: {
      cause?: unknown;
      headers?: Record<string, string>;
      extra?: Record<string, unknown>;
    },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.headers = options?.headers;
    this.extra = options?.extra;
  }

  /** Response headers the error requires (WWW-Authenticate, Retry-After, ...). */
  readonly headers: Record<string, string> | undefined;
  /** Extra top-level fields of the error envelope (for example `jobId` on a 504). */
  readonly extra: Record<string, unknown> | undefined;

  /** The same error with more envelope fields (for example the `jobId` it concerns). */
  withExtra(extra: Record<string, unknown>): AppError {
    return new AppError(this.code, this.status, this.message, this.details, {
      cause: this.cause,
      headers: this.headers,
      extra: { ...(this.extra ?? {}), ...extra },
    });
  }

  /** The same error about one named input (for example the 3rd input of a merge). */
  forInput(index: number, name: string): AppError {
    return new AppError(
      this.code,
      this.status,
      this.message,
      [{ index, name, message: this.message }],
      {
        cause: this.cause,
        headers: this.headers,
        extra: this.extra,
      },
    );
  }
}

export const isAppError = (e: unknown): e is AppError => e instanceof AppError;

/**
 * Whether an answer's status is the server's failure, logged at `error` and
 * counted by the 5xx alert: every 5xx but 501, the answer of a feature this
 * deployment has switched off (`SIGNED_URLS_DISABLED`,
 * `DIRECT_UPLOADS_UNSUPPORTED`), which is its configuration working as set.
 */
export const isServerFault = (status: number): boolean => status >= 500 && status !== 501;

/** The error envelope, the same from every process: `{ statusCode, message, error, details?, …extra, requestId }`. */
export interface ErrorBody {
  statusCode: number;
  message: string;
  error: string;
  details?: unknown[];
  requestId: string;
  [key: string]: unknown;
}

export function errorBody(error: AppError, requestId: string): ErrorBody {
  return {
    statusCode: error.status,
    message: error.message,
    error: error.code,
    ...(error.details ? { details: error.details } : {}),
    ...(error.extra ?? {}),
    requestId,
  };
}

const MB = 1024 * 1024;
const humanBytes = (n: number) =>
  n >= MB
    ? `${+(n / MB).toFixed(1)} MB`
    : n >= 1024
      ? `${+(n / 1024).toFixed(1)} KB`
      : `${n} bytes`;

/** Named factories: the only way errors are made. */
export const Errors = {
  badRequest: (message: string, details?: ErrorDetail[]) =>
    new AppError('BAD_REQUEST', 400, message, details),
  validation: (details: ErrorDetail[]) =>
    new AppError(
      'VALIDATION_FAILED',
      400,
      details.length === 1 && details[0] ? details[0].message : 'The request is not valid',
      details,
    ),
  /** A render of a new variant of a source that has RENDER_MAX_VARIANTS already. */
  tooManyVariants: (key: string, count: number, max: number) =>
    Errors.validation([
      {
        field: 'media',
        message: `"${key}" has ${count} variants, the most a file may have (RENDER_MAX_VARIANTS ${max})`,
      },
    ]),
  invalidDataUrl: (message: string) => new AppError('INVALID_DATA_URL', 400, message),
  folderMismatch: (folder: string, folderId: number) =>
    new AppError(
      'FOLDER_MISMATCH',
      400,
      `folder "${folder}" and folderId ${folderId} do not name the same folder`,
    ),
  unauthorized: (message = 'A valid bearer token is required') =>
    new AppError('UNAUTHORIZED', 401, message, undefined, {
      headers: { 'WWW-Authenticate': 'Bearer realm="media"' },
    }),
  insufficientScope: (scope: string) =>
    new AppError('INSUFFICIENT_SCOPE', 403, `This token lacks the "${scope}" scope`, undefined, {
      headers: {
        'WWW-Authenticate': `Bearer realm="media", error="insufficient_scope", scope="${scope}"`,
      },
    }),
  /** A signed URL whose signature does not verify: tampered, for other parameters, or its key retired. */
  signedUrlInvalid: (message = 'The signature of this URL is not valid') =>
    new AppError('SIGNED_URL_INVALID', 403, message),
  signedUrlExpired: (expiredAt: Date) =>
    new AppError(
      'SIGNED_URL_EXPIRED',
      403,
      `This signed URL expired at ${expiredAt.toISOString()}; ask for a new one`,
      undefined,
      { extra: { expiredAt: expiredAt.toISOString() } },
    ),
  /** URL_SIGNING_KEYS is not set: no URL can be signed, no signed URL accepted. */
  signedUrlsDisabled: () =>
    new AppError(
      'SIGNED_URLS_DISABLED',
      501,
      'Signed URLs are not enabled on this server (URL_SIGNING_KEYS is not set)',
    ),
  notFound: (message = 'Not found') => new AppError('NOT_FOUND', 404, message),
  methodNotAllowed: (allow: string) =>
    new AppError('METHOD_NOT_ALLOWED', 405, `Only ${allow} is allowed here`, undefined, {
      headers: { Allow: allow },
    }),
  mediaNotFound: (key: string) =>
    new AppError('MEDIA_NOT_FOUND', 404, `No media with key "${key}"`),
  mediaIdNotFound: (id: number) => new AppError('MEDIA_NOT_FOUND', 404, `No media with id ${id}`),
  folderNotFound: (folderId: number | string) =>
    new AppError('FOLDER_NOT_FOUND', 404, `No folder with id ${folderId}`),
  folderNameNotFound: (name: string) =>
    new AppError('FOLDER_NOT_FOUND', 404, `No folder named "${name}"`),
  jobNotFound: (jobId: string) => new AppError('JOB_NOT_FOUND', 404, `No job with id "${jobId}"`),
  conflict: (message: string) => new AppError('CONFLICT', 409, message),
  /** A URL the guarded way out refuses (shared/egress/): the reason says why. */
  urlNotAllowed: (reason: string, field = 'url') =>
    new AppError('URL_NOT_ALLOWED', 400, `The URL is not allowed: ${reason}`, [
      { field, message: reason },
    ]),
  /**
   * A URL import that could not be fetched: 502 with what the remote server
   * answered (`details[0].status`) or why nothing came (`reason`: dns,
   * connect, tls, protocol, too_many_redirects); 504 when it was too slow
   * (`reason: timeout`).
   */
  urlFetchFailed: (message: string, detail: { status?: number; reason?: string }) =>
    new AppError(
      'URL_FETCH_FAILED',
      detail.reason === 'timeout' ? 504 : 502,
      `The URL could not be fetched: ${message}`,
      [{ field: 'url', message, ...detail }],
    ),
  /** The file has not been scanned for malware yet, and its organization's policy serves only clean files. */
  scanPending: (key: string) =>
    new AppError(
      'SCAN_PENDING',
      409,
      `"${key}" is being scanned for malware; it is served once found clean`,
      undefined,
      { headers: { 'Retry-After': '5' }, extra: { scanStatus: 'pending' } },
    ),
  /** The file was not scanned (larger than the scanner's limit), and the policy serves only clean files. */
  fileNotScanned: (key: string) =>
    new AppError(
      'FILE_NOT_SCANNED',
      409,
      `"${key}" was not scanned for malware (larger than the scanner's limit or stored before scanning was on); this organization is served clean files only`,
      undefined,
      { extra: { scanStatus: 'unscanned' } },
    ),
  /** Malware was found in the file: it is quarantined and never served. */
  fileInfected: (key: string) =>
    new AppError(
      'FILE_INFECTED',
      403,
      `"${key}" was found to contain malware; it is quarantined and never served`,
      undefined,
      { extra: { scanStatus: 'infected' } },
    ),
  folderNotEmpty: (folderId: number, files: number) =>
    new AppError(
      'FOLDER_NOT_EMPTY',
      409,
      `Folder ${folderId} holds ${files} file${files === 1 ? '' : 's'}; delete them first, or delete with ?recursive=true`,
      undefined,
      { extra: { files } },
    ),
  /** The root folder (files in no folder) has no name to change and cannot go. */
  rootFolder: (folderId: number, action: 'read as a folder' | 'renamed' | 'deleted') =>
    new AppError(
      'ROOT_FOLDER',
      409,
      `Folder ${folderId} is the organization's root folder (the files in no folder): it cannot be ${action}; GET /media/folders shows it as root, GET /media?folderId=${folderId} lists its files`,
    ),
  /** An upload with `onDuplicate=reject` whose bytes the organization already stores (as `key`). */
  duplicate: (name: string, key: string) =>
    new AppError('DUPLICATE', 409, `"${name}" has the same content as the stored file "${key}"`, [
      { name, key, message: `same content (SHA-256) as "${key}"` },
    ]),
  idempotencyKeyInUse: () =>
    new AppError(
      'IDEMPOTENCY_KEY_IN_USE',
      409,
      'A request with this Idempotency-Key is still being processed; retry once it has finished',
      undefined,
      { headers: { 'Retry-After': '1' } },
    ),
  idempotencyKeyReused: () =>
    new AppError(
      'IDEMPOTENCY_KEY_REUSED',
      422,
      'This Idempotency-Key was used for a different request',
    ),
  rangeNotSatisfiable: (size: number) =>
    new AppError(
      'RANGE_NOT_SATISFIABLE',
      416,
      `The requested range is not within the ${size} bytes of the file`,
      undefined,
      {
        headers: { 'Content-Range': `bytes */${size}` },
      },
    ),
  fileTooLarge: (limit: number, name?: string) =>
    new AppError(
      'FILE_TOO_LARGE',
      413,
      `${name ? `"${name}"` : 'The file'} is larger than the limit of ${humanBytes(limit)}`,
      name ? [{ name, message: 'file too large' }] : undefined,
      { extra: { limit } },
    ),
  quotaExceeded: (quota: number) =>
    new AppError(
      'QUOTA_EXCEEDED',
      413,
      `The organization's storage quota of ${humanBytes(quota)} would be exceeded`,
      undefined,
      { extra: { limit: quota } },
    ),
  tooManyFiles: (limit: number, what = 'files') =>
    new AppError(
      'TOO_MANY_FILES',
      413,
      `At most ${limit} ${limit === 1 ? what.replace(/s$/, '') + ' is' : what + ' are'} accepted per request`,
      undefined,
      {
        extra: { limit },
      },
    ),
  tooManyParts: (message: string) => new AppError('TOO_MANY_PARTS', 413, message),
  payloadTooLarge: (message: string) => new AppError('PAYLOAD_TOO_LARGE', 413, message),
  /** Request headers over Node's limit (answered before Express sees the request). */
  headersTooLarge: (limit: number) =>
    new AppError(
      'HEADERS_TOO_LARGE',
      431,
      `The request headers are larger than the ${humanBytes(limit)} this server accepts`,
    ),
  unsupportedType: (message: string, details?: ErrorDetail[]) =>
    new AppError('UNSUPPORTED_MEDIA_TYPE', 415, message, details),
  unreadable: (message: string, details?: ErrorDetail[], cause?: unknown) =>
    new AppError('UNREADABLE_MEDIA', 422, message, details, { cause }),
  /**
   * The output asked for has more pixels than its format is encoded to (a
   * slow encoder's bound); `details` carry the size, the limit and the setting.
   */
  outputTooLarge: (
    format: string,
    width: number,
    height: number,
    limit: number,
    setting: string,
  ) => {
    const n = (v: number) => v.toLocaleString('en-US');
    return new AppError(
      'OUTPUT_TOO_LARGE',
      422,
      `A ${format} of ${width} × ${height} (${n(width * height)} pixels) is over the limit of ` +
        `${n(limit)} pixels for ${format} output (${setting}): ask for a smaller size or another format`,
      [{ message: 'output too large', format, width, height, limit, setting }],
    );
  },
  encryptedPdf: (message: string, details?: ErrorDetail[]) =>
    new AppError('ENCRYPTED_PDF', 422, message, details),
  rateLimited: (
    retryAfterSeconds: number,
    policy?: { limit: number; windowMs: number; what?: string },
  ) => {
    const seconds = Math.max(1, Math.ceil(retryAfterSeconds));
    const per = policy
      ? `at most ${policy.limit} per ${+(policy.windowMs / 1000).toFixed(3)} s`
      : '';
    return new AppError(
      'RATE_LIMITED',
      429,
      !policy
        ? 'Too many requests; slow down'
        : policy.what
          ? `Too many ${policy.what} (${per}); try again in ${seconds} s`
          : `Too many requests for this token (${per}, counted in cost units); try again in ${seconds} s`,
      undefined,
      { headers: { 'Retry-After': String(seconds) } },
    );
  },
  tooManyJobs: (cap: number) =>
    new AppError(
      'TOO_MANY_JOBS',
      429,
      `This organization has ${cap} jobs waiting or running, its limit; try again when some have finished`,
      undefined,
      { headers: { 'Retry-After': '5' }, extra: { limit: cap } },
    ),
  /** A job's result over RESULT_MAX_BYTES: it is not stored (a metadata answer of a huge XMP, say). */
  resultTooLarge: (bytes: number, limit: number) =>
    new AppError(
      'PAYLOAD_TOO_LARGE',
      413,
      `The job's result (${humanBytes(bytes)}) is larger than the limit of ${humanBytes(limit)} a result may have`,
      undefined,
      { extra: { limit } },
    ),
  /** The organization's stored, unread job results would pass RESULTS_MAX_BYTES_PER_ORG. */
  tooManyResults: (limit: number, retryAfterSeconds: number) =>
    new AppError(
      'TOO_MANY_RESULTS',
      429,
      `This organization's job results waiting to be read would pass its limit of ${humanBytes(limit)}; read them (their status URLs) or try again when they have expired`,
      undefined,
      {
        headers: { 'Retry-After': String(Math.max(1, Math.ceil(retryAfterSeconds))) },
        extra: { limit },
      },
    ),
  /** An upload whose client sent nothing for `ms` (UPLOAD_IDLE_TIMEOUT_MS). */
  uploadIdle: (ms: number) =>
    new AppError(
      'REQUEST_TIMEOUT',
      408,
      `The upload sent nothing for ${ms} ms and was cut; nothing of it was kept`,
      undefined,
      { extra: { limit: ms } },
    ),
  tooManyUploads: (cap: number) =>
    new AppError(
      'TOO_MANY_UPLOADS',
      429,
      `This token has ${cap} uploads in flight, its limit; try again when one has finished`,
      undefined,
      { headers: { 'Retry-After': '1' }, extra: { limit: cap } },
    ),
  /** Resumable uploads (tus 1.0): a request without `Tus-Resumable: 1.0.0`. */
  tusVersion: () =>
    new AppError(
      'TUS_VERSION_UNSUPPORTED',
      412,
      'Only tus 1.0.0 is supported (Tus-Resumable: 1.0.0)',
      undefined,
      {
        headers: { 'Tus-Version': '1.0.0' },
      },
    ),
  /** A PATCH whose `Upload-Offset` is not the upload's: the current offset in a header and the body. */
  offsetMismatch: (offset: number) =>
    new AppError(
      'OFFSET_MISMATCH',
      409,
      `The upload's offset is ${offset}; resume from there`,
      undefined,
      {
        headers: { 'Upload-Offset': String(offset) },
        extra: { offset },
      },
    ),
  /** tus `checksum`: the PATCH's bytes did not match `Upload-Checksum`; none of them were kept. */
  checksumMismatch: (offset: number) =>
    new AppError(
      'CHECKSUM_MISMATCH',
      460,
      'The bytes sent do not match Upload-Checksum; none were kept',
      undefined,
      {
        headers: { 'Upload-Offset': String(offset) },
        extra: { offset },
      },
    ),
  uploadExpired: () => new AppError('UPLOAD_EXPIRED', 410, 'This resumable upload has expired'),
  uploadLocked: () =>
    new AppError(
      'UPLOAD_LOCKED',
      423,
      'Another request is writing to this upload; retry shortly',
      undefined,
      {
        headers: { 'Retry-After': '1' },
      },
    ),
  uploadFinal: () =>
    new AppError('UPLOAD_FINAL', 403, 'A final (concatenated) upload takes no PATCH'),
  tooManyIncompleteUploads: (cap: number) =>
    new AppError(
      'TOO_MANY_INCOMPLETE_UPLOADS',
      429,
      `The organization has ${cap} resumable uploads in progress, its limit; finish or terminate one first`,
      undefined,
      { extra: { limit: cap } },
    ),
  /** Direct-to-storage uploads on a store without presigned requests (the file system). */
  directUploadsUnsupported: () =>
    new AppError(
      'DIRECT_UPLOADS_UNSUPPORTED',
      501,
      "This server's object store (the file system) takes no direct-to-storage uploads; use POST /media/upload or /media/upload/resumable",
    ),
  /** A direct upload completed before its bytes are all in the store: it stays, for another try. */
  uploadIncomplete: (message: string) => new AppError('UPLOAD_INCOMPLETE', 409, message),
  /** A resumable or direct upload that does not exist, or is another organization's. */
  uploadNotFound: () => new AppError('UPLOAD_NOT_FOUND', 404, 'No such upload'),
  /** A direct upload's object is not the size its request declared: it was removed. */
  sizeMismatch: (declared: number, stored: number) =>
    new AppError(
      'SIZE_MISMATCH',
      400,
      `The upload declared ${declared} bytes and the store holds ${stored}; it was removed`,
    ),
  /** A direct upload's bytes do not match the SHA-256 its request declared: it was removed. */
  directChecksumMismatch: () =>
    new AppError(
      'CHECKSUM_MISMATCH',
      400,
      'The stored bytes do not match the declared sha256; the upload was removed',
    ),
  /** A direct upload past its expiry (its presigned URLs too). */
  directUploadExpired: () =>
    new AppError('UPLOAD_EXPIRED', 410, 'This direct upload has expired; request another'),
  tooManyIncompleteDirectUploads: (cap: number) =>
    new AppError(
      'TOO_MANY_INCOMPLETE_UPLOADS',
      429,
      `The organization has ${cap} direct uploads requested and not completed, its limit; complete one or let it expire first`,
      undefined,
      { extra: { limit: cap } },
    ),
  unavailable: (dependency: 'MongoDB' | 'Redis' | 'storage' | 'clamd', cause?: unknown) =>
    new AppError(
      'DEPENDENCY_UNAVAILABLE',
      503,
      `${dependency} is unavailable; try again shortly`,
      undefined,
      { cause, headers: { 'Retry-After': '5' }, extra: { dependency } },
    ),
  /** A job ran past JOB_TIMEOUT_MS: stopped, not retried (the same input would cost as much again). */
  processingTimeout: (limitMs: number) =>
    new AppError(
      'PROCESSING_TIMEOUT',
      422,
      `Processing took longer than the limit of ${+(limitMs / 1000).toFixed(1)} s and was stopped`,
    ),
  jobTimeout: (jobId: string, statusUrl: string) =>
    new AppError(
      'JOB_TIMEOUT',
      504,
      `The job did not finish in time; its result will be available at ${statusUrl}`,
      undefined,
      { headers: { Location: statusUrl }, extra: { jobId } },
    ),
  /** A direct upload's completion whose read-back job did not finish within JOB_WAIT_MS. */
  directUploadStillChecking: (jobId: string) =>
    new AppError(
      'JOB_TIMEOUT',
      504,
      'The upload is still being checked (its read-back job did not finish in time); complete it again for its record',
      undefined,
      { extra: { jobId } },
    ),
  internal: (cause?: unknown) =>
    new AppError('INTERNAL', 500, 'Internal server error', undefined, { cause }),
} as const;
