/**
 * Uploads: bytes stream from the client into object storage while their
 * SHA-256 and length are computed; the type is decided from the first bytes;
 * records are written only after every object of the request is in place.
 *
 * Write order is object first, record second. If a record cannot be written
 * the objects are deleted; if a stream fails (client gone, limit tripped) the
 * partial upload is aborted by the store. An object's key is built for the
 * folder known while its bytes flow (none, when the folder fields come later
 * in the form); if the request's folder turns out to be another, the object is
 * moved (server-side copy, then delete) at commit.
 */
import { createHash, randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { Errors } from '@shared/errors';
import type { Logger } from '@shared/logger';
import {
  DETECTION_BYTES,
  detectType,
  normaliseMime,
  type MediaType,
} from '@shared/media/media-types';
import { buildKey, keyBaseName, safeDisplayName } from '@shared/media/naming';
import type { Folder, FoldersRepository } from '@shared/repositories/folders.repository';
import type {
  MediaRecord,
  MediaRepository,
  RequestOrigin,
} from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
import type { ObjectStore } from '@shared/storage/object-store';

export interface UploadLimits {
  maxFileSize: number;
  acceptedTypes: readonly string[];
}

/** `folder` (a name) and/or `folderId` as they came in the request. */
export interface FolderSpec {
  folder?: string | undefined;
  folderId?: string | undefined;
}

/** An object written to storage whose record is not written yet. */
export interface StoredObject {
  key: string;
  /** The folder its key was built for; undefined for a job's temporary input. */
  keyFolder: Folder | null | undefined;
  type: MediaType;
  name: string;
  bytes: number;
  checksum: string;
}

export class UploadService {
  constructor(
    private readonly deps: {
      store: ObjectStore;
      folders: FoldersRepository;
      media: MediaRepository;
      limits: UploadLimits;
      logger: Logger;
    },
  ) {}

  /** Validates and resolves a folder spec: a name finds or creates, an id must exist; both must agree. */
  async resolveFolder(org: Organization, spec: FolderSpec): Promise<Folder | null> {
    const name = spec.folder?.trim();
    const rawId = spec.folderId?.trim();
    let byId: Folder | null = null;
    if (rawId !== undefined && rawId !== '') {
      if (!/^[1-9]\d{0,14}$/.test(rawId)) {
        throw Errors.validation([
          { field: 'folderId', message: 'folderId must be a positive integer' },
        ]);
      }
      byId = await this.deps.folders.findById(org.id, Number(rawId));
      if (!byId) throw Errors.folderNotFound(rawId);
    }
    if (name !== undefined && name !== '') {
      if (name.length > 200) {
        throw Errors.validation([
          { field: 'folder', message: 'folder must be at most 200 characters' },
        ]);
      }
      if (byId) {
        if (byId.name !== name) throw Errors.folderMismatch(name, byId.id);
        return byId;
      }
      return this.deps.folders.findOrCreate(org.id, name);
    }
    return byId;
  }

  /**
   * Streams one file into storage, to a key built for `folder` (commit moves
   * it if the request's folder turns out to be another).
   */
  async storeStream(
    org: Organization,
    source: Readable,
    filename: string | undefined,
    folder: Folder | null,
  ): Promise<StoredObject> {
    const stored = await this.streamToStore(
      source,
      filename,
      this.deps.limits.acceptedTypes,
      (name, type) => this.keyFor(org, name, type, folder),
    );
    return { ...stored, keyFolder: folder };
  }

  /**
   * Streams a job input (a merge's uploaded PDF) to a temporary key under the
   * organization's prefix; the job removes it when it ends.
   */
  async storeTemporary(
    org: Organization,
    source: Readable,
    filename: string | undefined,
    acceptedTypes: readonly string[],
  ): Promise<StoredObject> {
    const stored = await this.streamToStore(
      source,
      filename,
      acceptedTypes.filter((t) => this.deps.limits.acceptedTypes.includes(t)),
      (_name, type) => `${org.slug}/.tmp/${randomUUID()}.${type.ext}`,
    );
    return { ...stored, keyFolder: undefined };
  }

  private async streamToStore(
    source: Readable,
    filename: string | undefined,
    acceptedTypes: readonly string[],
    keyOf: (name: string, type: MediaType) => string,
  ): Promise<Omit<StoredObject, 'keyFolder'>> {
    const iterator = source[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
    const head = await readHead(iterator, DETECTION_BYTES);
    const type = await this.acceptType(head.bytes, filename, acceptedTypes);
    const name = safeDisplayName(filename);
    const key = keyOf(name, type);
    const hash = createHash('sha256');
    let bytes = 0;
    const { maxFileSize } = this.deps.limits;
    const meter = (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > maxFileSize) throw Errors.fileTooLarge(maxFileSize, name);
      hash.update(chunk);
      return chunk;
    };
    async function* body(): AsyncGenerator<Buffer> {
      yield meter(head.bytes);
      if (head.done) return;
      for (;;) {
        const next = await iterator.next();
        if (next.done) return;
        yield meter(next.value);
      }
    }
    const stream = Readable.from(body(), { objectMode: false });
    await this.deps.store.put(key, stream, { contentType: type.mime });
    return { key, type, name, bytes, checksum: `sha256:${hash.digest('hex')}` };
  }

  /** Stores bytes already in memory (base64 uploads). */
  async storeBuffer(
    org: Organization,
    data: Buffer,
    filename: string | undefined,
    folder: Folder | null,
    declaredType?: string,
  ): Promise<StoredObject> {
    if (data.length > this.deps.limits.maxFileSize) {
      throw Errors.fileTooLarge(this.deps.limits.maxFileSize, filename);
    }
    const type = await this.acceptType(data.subarray(0, DETECTION_BYTES), filename);
    if (declaredType && normaliseMime(declaredType) !== type.mime) {
      this.deps.logger.debug(
        { declaredType, detected: type.mime },
        'declared type differs from the bytes; using the bytes',
      );
    }
    const name = safeDisplayName(filename);
    const key = this.keyFor(org, name, type, folder);
    await this.deps.store.put(key, data, { contentType: type.mime });
    const checksum = `sha256:${createHash('sha256').update(data).digest('hex')}`;
    return { key, keyFolder: folder, type, name, bytes: data.length, checksum };
  }

  /**
   * Makes stored objects permanent: moves any whose key was built for another
   * folder (or staged), then writes their records in one all-or-nothing write.
   * On failure every object is removed and the error is rethrown.
   */
  async commit(
    org: Organization,
    objects: StoredObject[],
    folder: Folder | null,
    origin: RequestOrigin,
  ): Promise<MediaRecord[]> {
    const placed: StoredObject[] = [];
    try {
      for (const object of objects) {
        if (
          object.keyFolder !== undefined &&
          (object.keyFolder?.id ?? null) === (folder?.id ?? null)
        ) {
          placed.push(object);
          continue;
        }
        const key = this.keyFor(org, object.name, object.type, folder);
        await this.deps.store.copy(object.key, key);
        placed.push({ ...object, key, keyFolder: folder });
        await this.deps.store.remove(object.key);
      }
      return await this.deps.media.insertAll(
        placed.map((o) => ({
          organizationId: org.id,
          folderId: folder?.id ?? null,
          key: o.key,
          name: o.name,
          mimetype: o.type.mime,
          bytes: o.bytes,
          checksum: o.checksum,
          metaData: origin,
        })),
      );
    } catch (err) {
      await this.discard([...objects, ...placed]);
      throw err;
    }
  }

  /** Removes objects that will get no record. Never throws; failures are logged for reconciliation. */
  async discard(objects: StoredObject[]): Promise<void> {
    const keys = [...new Set(objects.map((o) => o.key))];
    if (keys.length === 0) return;
    try {
      await this.deps.store.removeMany(keys);
    } catch (err) {
      this.deps.logger.error({ err, keys }, 'could not remove objects left without a record');
    }
  }

  private async acceptType(
    head: Buffer,
    filename: string | undefined,
    acceptedTypes: readonly string[] = this.deps.limits.acceptedTypes,
  ): Promise<MediaType> {
    if (head.length === 0) {
      throw Errors.badRequest(
        `${filename ? `"${safeDisplayName(filename)}"` : 'The file'} is empty`,
      );
    }
    const type = await detectType(head);
    if (!type || !acceptedTypes.includes(type.mime)) {
      const what = filename ? `"${safeDisplayName(filename)}"` : 'The file';
      throw Errors.unsupportedType(
        `${what} is not an accepted type (${acceptedTypes.join(', ')}); types are detected from the file's content`,
        filename
          ? [
              {
                name: safeDisplayName(filename),
                message: type ? `${type.mime} is not accepted` : 'unknown type',
              },
            ]
          : undefined,
      );
    }
    return type;
  }

  private keyFor(org: Organization, name: string, type: MediaType, folder: Folder | null): string {
    return buildKey({
      orgSlug: org.slug,
      folderSlug: folder?.slug ?? null,
      baseName: keyBaseName(name),
      ext: type.ext,
    });
  }
}

/** Reads at least `min` bytes (or to the end) from a byte stream. */
async function readHead(
  iterator: AsyncIterator<Buffer>,
  min: number,
): Promise<{ bytes: Buffer; done: boolean }> {
  const chunks: Buffer[] = [];
  let length = 0;
  while (length < min) {
    const next = await iterator.next();
    if (next.done) return { bytes: Buffer.concat(chunks, length), done: true };
    chunks.push(next.value);
    length += next.value.length;
  }
  return { bytes: Buffer.concat(chunks, length), done: false };
}
