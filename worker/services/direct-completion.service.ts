/**
 * A direct-to-storage upload's completion, on a worker (the
 * upload.complete-direct job; docs/direct-uploads.md): the API found the
 * object whole in the upload's quarantine key (the multipart upload
 * completed, its size as declared) and resolved the folder; here the type is
 * read from the object's first bytes (a type not accepted is refused before
 * anything is copied), the object is copied to its final key, read back from
 * there once (its size, type and SHA-256) and checked against what was
 * declared, then recorded through shared/media-creation.ts (the record's id
 * and quota booking are the ones the request took), and the quarantine is
 * emptied. So no byte of the file, and none of the record's storage and
 * database work, is on the API process.
 *
 * What is checked is what is kept: the bytes are read back from the final
 * key, which no client can write. A presigned PUT or POST to the quarantine
 * key stays valid until the upload expires, so bytes read there before the
 * copy could differ from the bytes copied (a client writing the key again
 * meanwhile would get a record whose size, type and checksum are not its
 * object's).
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
import { firstBytes, type ObjectStore } from '@shared/storage/object-store';
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
    const { store } = this.deps;
    const { acceptedTypes } = this.deps.limits;
    const head =
      state.bytes === 0 ? Buffer.alloc(0) : await firstBytes(store, [state.key], DETECTION_BYTES);
    const detected = head.length === 0 ? undefined : await detectType(head);
    const type = detected === undefined ? undefined : KNOWN_TYPES[detected.mime];
    if (!type || !acceptedTypes.includes(type.mime)) {
      throw Errors.unsupportedType(
        `"${state.name}" is not an accepted type (${acceptedTypes.join(', ')}); types are detected from the file's content`,
        [{ name: state.name, message: type ? `${type.mime} is not accepted` : 'unknown type' }],
      );
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
    await store.copy(state.key, finalKey);
    let verified: Awaited<ReturnType<typeof readBack>>;
    try {
      verified = await readBack(store, finalKey, job.signal);
      if (verified.bytes !== state.bytes || verified.bytes !== input.bytes) {
        throw Errors.sizeMismatch(state.bytes, verified.bytes);
      }
      if (verified.mime !== type.mime) {
        throw Errors.unsupportedType(
          `"${state.name}" changed while it was checked (${type.mime}, then ${verified.mime ?? 'an unknown type'}); upload it again`,
          [{ name: state.name, message: 'changed while it was checked' }],
        );
      }
      if (state.sha256 !== undefined && state.sha256 !== verified.sha256) {
        throw Errors.directChecksumMismatch();
      }
    } catch (err) {
      // Not recorded: its copy goes (one left by a failed removal is an object without a
      // record, which reconcile lists).
      await store.remove(finalKey).catch(() => undefined);
      throw err;
    }
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
 * An object read once: its size, its SHA-256 (hex) as the bytes
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
