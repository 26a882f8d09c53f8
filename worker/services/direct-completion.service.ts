/**
 * A direct-to-storage upload's completion, on a worker (the
 * upload.complete-direct job; docs/direct-uploads.md): the API found the
 * object whole in the upload's quarantine key (the multipart upload
 * completed, its size as declared) and resolved the folder; here the object
 * is read back once (its type from the first bytes, the SHA-256 of all of
 * them), checked against what was declared and the accepted types, copied to
 * its final key and recorded through shared/media-creation.ts (the record's
 * id and quota booking are the ones the request took), and the quarantine is
 * emptied. So no byte of the file, and none of the record's storage and
 * database work, is on the API process.
 *
 * A refusal throws; the API then discards the upload (its object, booking
 * and state). A retry of the job (a worker killed mid-way) finds the record
 * an earlier attempt wrote.
 */
import { createHash } from 'node:crypto';
import type { Config } from '@shared/config';
import type { Organization } from '@shared/repositories/organizations.repository';
import { Errors } from '@shared/errors';
import type { JobPayloads } from '@shared/jobs';
import { DETECTION_BYTES, detectType, KNOWN_TYPES } from '@shared/media/media-types';
import { buildKey, keyBaseName } from '@shared/media/naming';
import type { MediaCreation, NewFile } from '@shared/media-creation';
import type { FoldersRepository } from '@shared/repositories/folders.repository';
import type { MediaRecord, MediaRepository } from '@shared/repositories/media.repository';
import type { ObjectStore } from '@shared/storage/object-store';
import {
  bookingOf,
  DIRECT_SEGMENT,
  type DirectUploads,
  type DirectUploadState,
} from '@shared/uploads/direct-uploads';

export class DirectCompletionService {
  constructor(
    private readonly deps: {
      store: ObjectStore;
      uploads: Pick<DirectUploads, 'ready' | 'get' | 'completed'>;
      creation: Pick<MediaCreation, 'commit'>;
      media: Pick<MediaRepository, 'findById'>;
      folders: Pick<FoldersRepository, 'findById'>;
      limits: Pick<Config['limits'], 'acceptedTypes'>;
    },
  ) {}

  async complete(
    job: { id: string; signal: AbortSignal },
    org: Organization,
    input: JobPayloads['upload.complete-direct'],
  ): Promise<MediaRecord> {
    const { uploads, media } = this.deps;
    // The state's connection is made on a fresh worker's first use: ready before it is read.
    await uploads.ready();
    const state = await uploads.get(input.uploadId);
    // Only the organization's own upload, and only its quarantine key is ever read.
    if (
      !state ||
      state.organizationId !== org.id ||
      state.cancelled ||
      !state.key.startsWith(`${org.slug}${DIRECT_SEGMENT}`)
    ) {
      throw Errors.uploadNotFound();
    }
    if (state.completed) {
      const record = await media.findById(org.id, state.completed.mediaId);
      if (!record) throw Errors.uploadNotFound();
      return record;
    }
    // An earlier attempt of this job wrote the record and was cut off before the rest.
    const earlier = await media.findById(org.id, state.mediaId);
    if (earlier) {
      await this.finish(state, earlier);
      return earlier;
    }
    const verified = await readBack(this.deps.store, state.key, job.signal);
    if (verified.bytes !== state.bytes || verified.bytes !== input.bytes) {
      throw Errors.sizeMismatch(state.bytes, verified.bytes);
    }
    const { acceptedTypes } = this.deps.limits;
    const type = verified.mime === null ? undefined : KNOWN_TYPES[verified.mime];
    if (!type || !acceptedTypes.includes(type.mime)) {
      throw Errors.unsupportedType(
        `"${state.name}" is not an accepted type (${acceptedTypes.join(', ')}); types are detected from the file's content`,
        [{ name: state.name, message: type ? `${type.mime} is not accepted` : 'unknown type' }],
      );
    }
    if (state.sha256 !== undefined && state.sha256 !== verified.sha256) {
      throw Errors.directChecksumMismatch();
    }
    // The API resolved the folder; one deleted since refuses the record.
    const folder =
      input.folderId === null ? null : await this.deps.folders.findById(org.id, input.folderId);
    if (input.folderId !== null && !folder) throw Errors.folderNotFound(input.folderId);
    const finalKey = buildKey({
      orgSlug: org.slug,
      folderSlug: folder?.slug ?? null,
      baseName: keyBaseName(state.name),
      ext: type.ext,
    });
    await this.deps.store.copy(state.key, finalKey);
    const file: NewFile = {
      id: Promise.resolve(state.mediaId),
      book: () => undefined,
      booking: Promise.resolve(bookingOf(state)),
    };
    // On failure, commit gives the booking back and removes the final key's object.
    const [record] = await this.deps.creation.commit(
      org,
      [
        {
          file,
          record: {
            key: finalKey,
            name: state.name,
            mimetype: type.mime,
            bytes: verified.bytes,
            checksum: `sha256:${verified.sha256}`,
          },
        },
      ],
      {
        folderId: folder?.id ?? null,
        origin: input.origin,
        createdBy: input.tokenId,
        onDuplicate: input.onDuplicate,
        signal: job.signal,
      },
    );
    await this.finish(state, record!);
    return record!;
  }

  /** The upload is recorded: its quarantined object goes, its state says so. */
  private async finish(state: DirectUploadState, record: MediaRecord): Promise<void> {
    await this.deps.store.remove(state.key);
    await this.deps.uploads.completed(state, record.id);
  }
}

/**
 * A quarantined object read once: its size, its SHA-256 (hex) as the bytes
 * stream by, its type detected from the first bytes (null: none).
 */
export async function readBack(
  store: Pick<ObjectStore, 'get'>,
  key: string,
  signal: AbortSignal,
): Promise<{ bytes: number; sha256: string; mime: string | null }> {
  const hash = createHash('sha256');
  const head: Buffer[] = [];
  let headBytes = 0;
  let bytes = 0;
  for await (const chunk of await store.get(key)) {
    signal.throwIfAborted();
    const buffer = chunk as Buffer;
    hash.update(buffer);
    bytes += buffer.length;
    if (headBytes < DETECTION_BYTES) {
      head.push(buffer.subarray(0, DETECTION_BYTES - headBytes));
      headBytes += Math.min(buffer.length, DETECTION_BYTES - headBytes);
    }
  }
  const type = headBytes === 0 ? undefined : await detectType(Buffer.concat(head));
  return { bytes, sha256: hash.digest('hex'), mime: type?.mime ?? null };
}
