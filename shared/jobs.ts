/**
 * The one job registry: job names, the queue each runs on, payload and result
 * types, and options. The API (producer) and the worker (consumer) both import
 * it, so a payload can only be built and read one way.
 *
 * Payloads carry keys, ids, the organization and the request id, never file
 * bytes or tokens.
 */
import { createHash } from 'node:crypto';
import type { RequestOrigin } from './db/models';
import { AppError, type ErrorCode, type ErrorDetail } from './errors';
import type { ResultRef } from './job-result';
import type { ConvertFormat } from './media/formats';
import type { OnDuplicate } from './media-creation';
import type { RenderOptions } from './media/render-options';
import type { ScanStatus } from './scan/scan';

/** Which queue each job name runs on: the queues are the ones named here, and no others. */
export const JOB_QUEUES = {
  'image.metadata': 'image',
  'image.convert': 'image',
  'image.render': 'image',
  'pdf.merge': 'pdf',
  'media.delete-folder': 'maintenance',
  'event.deliver': 'maintenance',
  'webhook.deliver': 'webhook',
  'media.scan': 'scan',
  'media.import': 'import',
  'upload.verify-direct': 'import',
  'upload.complete-direct': 'import',
  'media.purge-trash': 'maintenance',
  'upload.expire-direct': 'maintenance',
  'media.expire-resumable': 'maintenance',
} as const;

export type JobName = keyof typeof JOB_QUEUES;
export const JOB_NAMES = Object.keys(JOB_QUEUES) as JobName[];

export type QueueName = (typeof JOB_QUEUES)[JobName];
/** The queues, in the order the job map first names them (the names WORKER_QUEUES may list). */
export const QUEUE_NAMES: readonly QueueName[] = [...new Set(Object.values(JOB_QUEUES))];

interface BasePayload {
  organizationId: number;
  /** The HTTP request that made the job, for logs across processes. */
  requestId: string;
  /** W3C trace context of the request that made the job (only when tracing is on: shared/tracing). */
  trace?: { traceparent: string; tracestate?: string };
}

/** Payloads of jobs that create a record carry where the request came from (its `metaData`). */
interface CreatingPayload extends BasePayload {
  origin: RequestOrigin;
  /** The API token whose request made the job (kept on the record it creates). */
  tokenId: string | null;
}

export interface JobPayloads {
  'image.metadata': BasePayload & { key: string };
  'image.convert': CreatingPayload & {
    key: string;
    format: ConvertFormat;
    quality?: number;
  };
  /**
   * Renders a variant of a stored image (GET /media/render); its job id is
   * derived from the variant's key, so identical first requests share it.
   */
  'image.render': BasePayload & {
    key: string;
    options: RenderOptions;
    /**
     * The source's checksum, as the API read its record: the worker reads
     * and renders the source beside its own lookups (its cache of sources is
     * keyed by checksum and key). Absent in jobs queued by an older API.
     */
    checksum?: string;
  };
  'pdf.merge': CreatingPayload & {
    /**
     * In merge order; an input may appear more than once. An uploaded input
     * is a `range` of the request's bundle (one temporary object holding every
     * uploaded part); without one, the input is the whole object (a stored
     * PDF, or an uploaded part of its own, as jobs queued before bundles had).
     */
    inputs: { key: string; name: string; range?: { offset: number; length: number } }[];
    folderId: number | null;
    /** Inputs uploaded with the request (under the org's temporary prefix): removed when the job ends. */
    temporaryKeys: string[];
  };
  /** Deletes every file of a folder, then the folder (DELETE /media/folders/:id?recursive=true). */
  'media.delete-folder': BasePayload & { folderId: number };
  /**
   * Hands a recorded domain event to one listener (worker/listeners/); queued
   * once per event and listener by the dispatcher (its id derives from both).
   */
  'event.deliver': BasePayload & { eventId: string; listener: string };
  /**
   * One attempt to deliver a webhook message to an endpoint (worker/webhooks/);
   * a failed attempt queues the next one itself, after its delay. Its id
   * derives from the message, the run (the event's first sending, or a
   * replay's) and the attempt, so a crash never queues one twice.
   */
  'webhook.deliver': BasePayload & {
    endpointId: number;
    /** The `webhook-id`: the same across the message's attempts and replays. */
    messageId: string;
    /** The event it carries (recorded in the outbox); null for a test message. */
    eventId: string | null;
    eventType: string;
    /** The message's JSON payload, when queued for an event (small: a record's fields); else read from the outbox. */
    body?: string;
    trigger: 'event' | 'replay' | 'test';
    /** The run of attempts this one belongs to (`event`, or a replay's or test's own id). */
    run: string;
    /** 1 for a run's first attempt. */
    attempt: number;
    /** Times this attempt was put back because its endpoint had all its deliveries in flight. */
    waits: number;
  };
  /**
   * Scans one stored file for malware (queued by worker/listeners/scan.listener.ts
   * on `media.created`; its id derives from the record's).
   */
  'media.scan': BasePayload & { mediaId: number; key: string };
  /**
   * Fetches a URL through the guarded way out and stores it as a new record
   * (POST /media/upload/url); the API checked the URL and the folder first.
   */
  'media.import': CreatingPayload & {
    url: string;
    folderId: number | null;
    /** The record's name as the client gave it (else the URL's last path segment). */
    name?: string;
    onDuplicate: OnDuplicate;
  };
  /**
   * Reads a direct-to-storage upload's object back from its quarantine key
   * (`<org>/.tmp/direct/<id>`, the organization's own) for its SHA-256 and
   * its type detected from the first bytes: what API replicas older than
   * `upload.complete-direct` queue at a completion (they then copy and record
   * the object themselves). Kept so that workers upgraded first serve them
   * during a rolling upgrade (docs/jobs.md); nothing queues it any more.
   */
  'upload.verify-direct': BasePayload & { key: string; bytes: number };
  /**
   * Completes a direct-to-storage upload whose object the API found whole in
   * its quarantine key (`<org>/.tmp/direct/<id>`): reads it back once for its
   * SHA-256 and its type detected from the first bytes, checks them against
   * what was declared, copies it to its final key and records it (POST
   * .../complete waits for it, so the API neither carries the bytes nor does
   * the storage and database work of the record). The upload is named by its
   * id and must be the organization's own. Its job id derives from the upload
   * and the object's ETag: a repeated completion waits on the same job.
   */
  'upload.complete-direct': CreatingPayload & {
    uploadId: string;
    /** The object's size as the store listed it (the read-back must find as many bytes). */
    bytes: number;
    /** Resolved by the API (a name found or created); checked again here. */
    folderId: number | null;
    onDuplicate: OnDuplicate;
  };
  /**
   * Deletes the files kept in the trash past their organization's retention,
   * every organization's (its `organizationId` is 0: no organization's own).
   * Repeatable: the workers taking the maintenance queue schedule it.
   */
  'media.purge-trash': BasePayload;
  /**
   * Removes what direct-to-storage uploads never completed left past their
   * expiry (shared/uploads/direct-uploads.ts), every organization's
   * (`organizationId` 0). Repeatable, every minute: the workers taking the
   * maintenance queue schedule it.
   */
  'upload.expire-direct': BasePayload;
  /**
   * Removes the resumable (tus) uploads past their expiry, every
   * organization's (`organizationId` 0): their multipart uploads aborted,
   * their temporary objects removed (shared/resumable-uploads.ts).
   * Repeatable: the workers taking the maintenance queue schedule it.
   */
  'media.expire-resumable': BasePayload;
}

/** Metadata as the API returns it; Buffers travel as `{ type: 'Buffer', data: [...] }`. */
export type MetadataResult = Record<string, unknown>;

export interface JobResults {
  /** Inline when small; a pointer to the stored result when large (shared/job-result.ts). */
  'image.metadata': { metadata: MetadataResult } | ResultRef;
  'image.convert': { mediaId: number };
  'image.render': { variant: StoredVariant };
  'pdf.merge': { mediaId: number };
  'media.delete-folder': {
    folder: { id: number; name: string };
    deleted: { files: number; bytes: number };
  };
  /** False when the event or the listener is no longer there (nothing to do). */
  'event.deliver': { delivered: boolean };
  /** What the endpoint answered (null: no answer), or why nothing was sent. */
  'webhook.deliver': {
    outcome: 'delivered' | 'failed' | 'waiting' | 'skipped';
    status: number | null;
  };
  /** The verdict recorded; `gone`: the record was deleted, or had its verdict already. */
  'media.scan': { scanStatus: ScanStatus | 'gone' };
  /** The new record (or, with `onDuplicate: reuse`, the organization's record of the same bytes). */
  'media.import': { mediaId: number };
  /** The bytes read, their SHA-256 (hex) and the type detected from the first ones (null: none). */
  'upload.verify-direct': { bytes: number; sha256: string; mime: string | null };
  /** The upload's record (or, with `onDuplicate: reuse`, the organization's record of the same bytes). */
  'upload.complete-direct': { mediaId: number };
  'media.purge-trash': { purged: { files: number; bytes: number } };
  'upload.expire-direct': { removed: number };
  'media.expire-resumable': { expired: number };
}

/** A rendered variant as stored beside its source (GET /media/render streams it). */
export interface StoredVariant {
  /** The hash of its normalized options (shared/media/render-options.ts). */
  id: string;
  key: string;
  mimetype: string;
  bytes: number;
  width: number;
  height: number;
}

/** How far a long job has come (its status URL shows it while it runs). */
export interface JobProgress {
  done: number;
  total: number;
}

export type AnyJobPayload = JobPayloads[JobName];

/** Job options: retries with backoff for transient faults; finished jobs trimmed. */
export const JOB_OPTIONS = {
  attempts: 3,
  backoff: { type: 'exponential', delay: 1_000 },
  // Completed jobs are kept an hour (the status URL answers meanwhile), at most 5,000.
  removeOnComplete: { age: 3_600, count: 5_000 },
  // Failed jobs are kept a week for the dashboard, at most 10,000.
  removeOnFail: { age: 7 * 24 * 3_600, count: 10_000 },
} as const;

/**
 * Options of job names that differ from JOB_OPTIONS. A scan waits out a clamd
 * away or slow (its file stays `pending`, never served by default): 15
 * attempts, backing off from 2 s to about 9 h, some 18 h in all.
 */
export const JOB_OPTIONS_OF: Partial<
  Record<JobName, { attempts: number; backoff: { type: 'exponential'; delay: number } }>
> = {
  'media.scan': { attempts: 15, backoff: { type: 'exponential', delay: 2_000 } },
  // An import is not retried: a remote that failed once is the client's to try again
  // (a stalled job, its worker gone, is still taken over).
  'media.import': { attempts: 1, backoff: { type: 'exponential', delay: 1_000 } },
};

/**
 * Entries kept in each queue's events stream (BullMQ's `streams.events.maxLen`,
 * default 10,000): about 5 per job, a `completed` entry carrying the return
 * value (at most RESULT_INLINE_MAX_BYTES): a few hundred jobs of slack for the
 * API's QueueEvents, at most ~32 MB per queue.
 */
export const EVENTS_MAX_LEN = 2_000;

/** A UUID-shaped id derived from `text` (hex of its SHA-256): the same text, the same id. */
export function derivedUuid(text: string): string {
  const h = createHash('sha256').update(text).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
}

/** Job ids carry their queue, so a status URL finds the job without searching. */
export function newJobId(name: JobName, uuid: string): string {
  return `${JOB_QUEUES[name]}-${uuid}`;
}

export function queueOfJobId(jobId: string): QueueName | undefined {
  const queue = jobId.split('-', 1)[0];
  return QUEUE_NAMES.find((q) => q === queue);
}

/**
 * Errors cross the queue as text (BullMQ keeps `failedReason`). A refusal the
 * client should see (a 4xx AppError) is encoded with its code, status and
 * details so the API answers exactly as if it had refused the request itself.
 */
const PREFIX = 'app-error:';

export function encodeJobError(err: AppError): string {
  return `${PREFIX}${JSON.stringify({
    code: err.code,
    status: err.status,
    message: err.message,
    details: err.details,
    headers: err.headers,
    extra: err.extra,
  })}`;
}

export function decodeJobError(reason: string | undefined): AppError | undefined {
  if (!reason?.startsWith(PREFIX)) return undefined;
  try {
    const e = JSON.parse(reason.slice(PREFIX.length)) as {
      code: ErrorCode;
      status: number;
      message: string;
      details?: ErrorDetail[];
      headers?: Record<string, string>;
      extra?: Record<string, unknown>;
    };
    return new AppError(e.code, e.status, e.message, e.details, {
      headers: e.headers,
      extra: e.extra,
    });
  } catch {
    return undefined;
  }
}
