/**
 * Direct-to-storage uploads (docs/direct-uploads.md): the client sends the
 * bytes to the object store itself, with presigned requests, and the API
 * only signs, checks and records.
 *
 * - `request`: the declared name, size, type and folder checked as an upload's
 *   (MAX_FILE_SIZE 413, accepted types 415, the folder), the organization's
 *   incomplete uploads capped (429), the record's id taken and the size booked
 *   against the quota at once (413), until the upload's expiry; answers a
 *   presigned POST policy or PUT (a file of at most one part) or presigned
 *   multipart part URLs, every one for the upload's quarantine key
 *   (`<org>/.tmp/direct/<id>`), expiring with the upload.
 * - `complete`: the multipart upload completed and the object's size checked
 *   as declared, the folder resolved; then a worker (the upload.complete-direct
 *   job, worker/services/direct-completion.service.ts) reads the object back
 *   once (its type from the first bytes, its SHA-256 compared with the
 *   declared one), copies it to its final key and records it through
 *   shared/media-creation.ts (quota, record, `media.created`), the quarantine
 *   emptied. A refused object is removed with its booking; a repeated
 *   completion answers the same record.
 * - What is never completed, the scheduled cleanup removes
 *   (shared/uploads/direct-uploads.ts).
 */
import { randomUUID } from 'node:crypto';
import type { Config } from '@shared/config';
import { Errors, isAppError } from '@shared/errors';
import { derivedUuid, newJobId } from '@shared/jobs';
import type { Logger } from '@shared/logger';
import type { ApiMetrics } from '@shared/metrics';
import { normaliseMime } from '@shared/media/media-types';
import { safeDisplayName } from '@shared/media/naming';
import type { OnDuplicate } from '@shared/media-creation';
import type { MediaRecord, MediaRepository } from '@shared/repositories/media.repository';
import type { UsageRepository } from '@shared/repositories/usage.repository';
import type { ListedPart, ObjectStore, PresignedUploads } from '@shared/storage/object-store';
import {
  quarantineKey,
  type DirectUploadMethod,
  type DirectUploadState,
  type DirectUploads,
} from '@shared/uploads/direct-uploads';
import type { Caller } from '../domain/caller';
import type { FolderSpec, FoldersService } from './folders.service';
import type { JobsService } from './jobs.service';

/** S3's bound on a multipart upload's parts. */
export const MAX_PARTS = 10_000;
const MiB = 1024 * 1024;
/** A booking outlives its upload by this much, so the cleanup gives it back rather than its expiry. */
const BOOKING_MARGIN_MS = 60_000;

export interface DirectUploadRequest {
  name: string;
  size: number;
  type: string;
  folder?: string | undefined;
  folderId?: string | undefined;
  /** The file's SHA-256, hex. */
  sha256?: string | undefined;
}

/** What a client does next: where to send the bytes, and where to say it is done. */
export interface DirectUploadTicket {
  id: string;
  method: DirectUploadMethod;
  expiresAt: Date;
  /** `post`: the form's URL and fields (the file last); `put`: the URL and headers to send. */
  url?: string | undefined;
  fields?: Record<string, string> | undefined;
  headers?: Record<string, string> | undefined;
  /** `multipart`: every part's URL, each part `partSize` bytes but the last. */
  partSize?: number | undefined;
  parts?: { partNumber: number; url: string }[] | undefined;
}

export class DirectUploadService {
  constructor(
    private readonly deps: {
      store: ObjectStore;
      uploads: DirectUploads;
      folders: Pick<FoldersService, 'resolve'>;
      media: Pick<MediaRepository, 'nextIds' | 'findById'>;
      usage: Pick<UsageRepository, 'book' | 'cancel'>;
      /** The worker job that reads an object back and records it (upload.complete-direct). */
      jobs: Pick<JobsService, 'runShared'>;
      config: {
        limits: Pick<Config['limits'], 'maxFileSize' | 'acceptedTypes' | 'direct'>;
      };
      onDuplicate: OnDuplicate;
      logger: Logger;
      metrics?: Pick<ApiMetrics, 'directUpload'>;
    },
  ) {}

  private get presigned(): PresignedUploads {
    const presigned = this.deps.store.presigned;
    if (!presigned) throw Errors.directUploadsUnsupported();
    return presigned;
  }

  /** Books the file and signs the requests that bring its bytes to the store. */
  async request(caller: Caller, input: DirectUploadRequest): Promise<DirectUploadTicket> {
    const presigned = this.presigned;
    const org = caller.organization;
    const { maxFileSize, acceptedTypes, direct } = this.deps.config.limits;
    const name = safeDisplayName(input.name);
    if (input.size > maxFileSize) throw Errors.fileTooLarge(maxFileSize, name);
    const contentType = normaliseMime(input.type);
    if (!acceptedTypes.includes(contentType)) {
      throw Errors.unsupportedType(
        `"${name}" is declared ${input.type}, not an accepted type (${acceptedTypes.join(', ')})`,
      );
    }
    // The folder is checked now (a missing folderId is 404 before any byte is sent) and again
    // at completion, where a folder deleted meanwhile refuses the record.
    await this.deps.folders.resolve(org, { folder: input.folder, folderId: input.folderId });
    const now = Date.now();
    const uploads = this.deps.uploads;
    if ((await uploads.incomplete(org.id, now)) >= direct.maxIncomplete) {
      throw Errors.tooManyIncompleteDirectUploads(direct.maxIncomplete);
    }
    const expiresAt = now + direct.expiryMs;
    const [mediaId] = await this.deps.media.nextIds(1);
    const booking = await this.deps.usage.book(
      org.id,
      mediaId!,
      { bytes: input.size, files: 1 },
      org.quotaBytes,
      { until: new Date(expiresAt + BOOKING_MARGIN_MS) },
    );
    if (booking === null) throw Errors.quotaExceeded(org.quotaBytes ?? 0);
    const id = randomUUID().replaceAll('-', '');
    const key = quarantineKey(org.slug, id);
    const partSize = partSizeFor(input.size, direct.partSize);
    const method: DirectUploadMethod = input.size <= partSize ? direct.single : 'multipart';
    const state: DirectUploadState = {
      id,
      organizationId: org.id,
      key,
      name,
      bytes: input.size,
      contentType,
      sha256: input.sha256?.toLowerCase(),
      folder: input.folder,
      folderId: input.folderId,
      method,
      mediaId: mediaId!,
      bookingUntil: booking.until.getTime(),
      createdAt: now,
      expiresAt,
    };
    const seconds = Math.max(1, Math.floor(direct.expiryMs / 1000));
    try {
      const ticket: DirectUploadTicket = { id, method, expiresAt: new Date(expiresAt) };
      if (method === 'post') {
        const { url, fields } = await presigned.presignPost(key, {
          contentType,
          bytes: input.size,
          expiresAt: new Date(expiresAt),
        });
        Object.assign(ticket, { url, fields });
      } else if (method === 'put') {
        ticket.url = await presigned.presignPut(key, seconds);
        ticket.headers = { 'Content-Type': contentType };
      } else {
        state.uploadId = await this.deps.store.multipart.create(key, contentType);
        state.partSize = partSize;
        const count = Math.ceil(input.size / partSize);
        const parts = [];
        for (let n = 1; n <= count; n++) {
          parts.push({
            partNumber: n,
            url: await presigned.presignPart(key, state.uploadId, n, seconds),
          });
        }
        Object.assign(ticket, { partSize, parts });
      }
      await uploads.add(state);
      this.deps.metrics?.directUpload('requested');
      return ticket;
    } catch (err) {
      await uploads
        .discard(state)
        .catch((cleanupErr: unknown) =>
          this.deps.logger.warn({ err: cleanupErr, upload: id }, 'could not undo a direct upload'),
        );
      throw err;
    }
  }

  /**
   * Checks the stored object and makes it a record (the same record again
   * when the upload was completed before).
   */
  async complete(caller: Caller, id: string): Promise<MediaRecord> {
    if (!this.deps.store.presigned) throw Errors.directUploadsUnsupported();
    const uploads = this.deps.uploads;
    const found = await this.find(caller, id);
    if (found.completed) return this.recorded(caller, found.completed.mediaId);
    if (found.expiresAt <= Date.now()) throw Errors.directUploadExpired();
    const done = await uploads.locked(id, async () => {
      // Read again under the lock: another completion may have finished meanwhile.
      const state = await this.find(caller, id);
      if (state.completed) return this.recorded(caller, state.completed.mediaId);
      // The parts of a multipart upload still open (null: none, or it was completed before).
      const parts = state.uploadId
        ? await this.deps.store.multipart.parts(state.key, state.uploadId)
        : null;
      // A completion cut off after the record was written: the record is the upload's. Its
      // multipart upload was completed then, so one still open spares the lookup.
      if (parts === null) {
        const earlier = await this.deps.media.findById(caller.organization.id, state.mediaId);
        if (earlier) {
          await this.finish(state, earlier);
          return earlier;
        }
      }
      try {
        const record = await this.check(caller, state, parts);
        this.deps.metrics?.directUpload('completed');
        return record;
      } catch (err) {
        // A refused upload is over (its object, booking and state go); an outage leaves it for a retry.
        const retryable = !isAppError(err) || err.status >= 500 || err.code === 'UPLOAD_INCOMPLETE';
        if (!retryable) {
          await uploads.discard(state);
          this.deps.metrics?.directUpload('refused');
        }
        throw err;
      }
    });
    if (done === null) throw Errors.conflict('This upload is being completed; retry shortly');
    return done.value;
  }

  /**
   * Cancels an upload not completed: its bytes, multipart upload and booking
   * go (docs/direct-uploads.md, "Cancelling"). A completed upload is a record
   * now (409: delete the file instead); one being completed, 409 too.
   */
  async cancel(caller: Caller, id: string): Promise<void> {
    if (!this.deps.store.presigned) throw Errors.directUploadsUnsupported();
    const uploads = this.deps.uploads;
    const completedConflict = () =>
      Errors.conflict(
        'This upload is completed: its file is a record (delete it with DELETE /media)',
      );
    if ((await this.find(caller, id)).completed) throw completedConflict();
    const done = await uploads.locked(id, async () => {
      const state = await this.find(caller, id);
      if (state.completed) throw completedConflict();
      // A completion cut off after the record was written: the record is the upload's.
      const earlier = await this.deps.media.findById(caller.organization.id, state.mediaId);
      if (earlier) {
        await this.finish(state, earlier);
        throw completedConflict();
      }
      await uploads.cancel(state);
      this.deps.metrics?.directUpload('cancelled');
    });
    if (done === null) throw Errors.conflict('This upload is being completed; retry shortly');
  }

  /**
   * The object found whole (the multipart upload completed, its size as
   * declared) and the folder resolved here; the rest, on a worker: the
   * object read back and checked, copied to its final key, recorded.
   */
  private async check(
    caller: Caller,
    state: DirectUploadState,
    parts: ListedPart[] | null,
  ): Promise<MediaRecord> {
    const org = caller.organization;
    const info = await this.stored(state, parts);
    if (info === null) throw Errors.uploadIncomplete('The file is not in the store yet');
    if (info.size !== state.bytes) throw Errors.sizeMismatch(state.bytes, info.size);
    // A folder named by the request is found or created now; the worker checks it is still there.
    const folder = await this.deps.folders.resolve(org, {
      folder: state.folder,
      folderId: state.folderId,
    } satisfies FolderSpec);
    // A repeated completion of the same object waits on the same job (its id derives from
    // the upload and the object's ETag).
    const jobUuid = derivedUuid(`direct-upload:${state.id}:${info.etag}`);
    const { mediaId } = await this.deps.jobs
      .runShared(
        'upload.complete-direct',
        {
          organizationId: org.id,
          requestId: caller.requestId,
          origin: caller.origin,
          tokenId: caller.tokenId,
          uploadId: state.id,
          bytes: info.size,
          folderId: folder?.id ?? null,
          onDuplicate: this.deps.onDuplicate,
        },
        jobUuid,
      )
      .catch((err: unknown) => {
        // Its status URL would answer the job, not the record: the client completes again.
        if (isAppError(err) && err.code === 'JOB_TIMEOUT') {
          throw Errors.directUploadStillChecking(newJobId('upload.complete-direct', jobUuid));
        }
        throw err;
      });
    return this.recorded(caller, mediaId);
  }

  /** The object, completed from `parts` (listed by the caller) when its multipart upload is open. */
  private async stored(
    state: DirectUploadState,
    parts: ListedPart[] | null,
  ): Promise<{ size: number; etag: string } | null> {
    const { store } = this.deps;
    if (!state.uploadId) return store.stat(state.key);
    const noPart = () => Errors.uploadIncomplete('No part of this upload is in the store yet');
    if (parts === null) {
      const info = await store.stat(state.key);
      if (info === null) throw noPart();
      return info;
    }
    if (parts.length === 0) throw noPart();
    const { etag } = await store.multipart.complete(
      state.key,
      state.uploadId,
      parts.map(({ part, etag }) => ({ part, etag })),
    );
    return { size: parts.reduce((sum, p) => sum + p.size, 0), etag };
  }

  /** The upload is recorded: its quarantined object goes, its state says so. */
  private async finish(state: DirectUploadState, record: MediaRecord): Promise<void> {
    await this.deps.store.remove(state.key);
    await this.deps.uploads.completed(state, record.id);
  }

  private async recorded(caller: Caller, mediaId: number): Promise<MediaRecord> {
    const record = await this.deps.media.findById(caller.organization.id, mediaId);
    if (!record) throw Errors.uploadNotFound();
    return record;
  }

  /** The caller's upload: 404 when missing, cancelled or another organization's. */
  private async find(caller: Caller, id: string): Promise<DirectUploadState> {
    const state = await this.deps.uploads.get(id);
    if (!state || state.organizationId !== caller.organization.id || state.cancelled) {
      throw Errors.uploadNotFound();
    }
    return state;
  }
}

/** The part size for `size` bytes: the setting, grown (whole MiB) to keep within S3's 10,000 parts. */
export function partSizeFor(size: number, setting: number): number {
  if (Math.ceil(size / setting) <= MAX_PARTS) return setting;
  return Math.ceil(size / MAX_PARTS / MiB) * MiB;
}
