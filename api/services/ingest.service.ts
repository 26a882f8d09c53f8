/**
 * Bytes into object storage: each file streams from the client into the store
 * while its SHA-256 and length are computed, its type decided from the first
 * bytes (never the name or the declared type) and its size metered against
 * the limit. A stream that fails (client gone, limit tripped) makes the store
 * abort its partial upload. An object's key is built for the folder known
 * while its bytes flow; `place` moves it when the request's folder turns out
 * to be another. Nothing here writes records (see UploadService).
 */
import { createHash, hash } from 'node:crypto';
import { Readable } from 'node:stream';
import { Errors } from '@shared/errors';
import type { Logger } from '@shared/logger';
import {
  DETECTION_BYTES,
  detectType,
  normaliseMime,
  readHead,
  type MediaType,
} from '@shared/media/media-types';
import { buildKey, keyBaseName, safeDisplayName } from '@shared/media/naming';
import type { Folder } from '@shared/repositories/folders.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
import type { ObjectStore } from '@shared/storage/object-store';
import { InputBundle } from '../domain/input-bundle';

/**
 * What one request may still store under its organization's quota: the
 * quota, and the bytes left under it when the request began. Every file of
 * the request draws on it as its bytes flow; past it the upload is cut off.
 */
export interface QuotaBudget {
  quota: number;
  remaining: number;
}

export interface IngestLimits {
  maxFileSize: number;
  acceptedTypes: readonly string[];
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

export class IngestService {
  constructor(
    private readonly deps: { store: ObjectStore; limits: IngestLimits; logger: Logger },
  ) {}

  /**
   * Streams one file into storage, to a key built for `folder` (commit moves
   * it if the request's folder turns out to be another). `onEnded` learns the
   * file's size once its last byte has come in, while the store may still be
   * writing it.
   */
  async storeStream(
    org: Organization,
    source: Readable,
    filename: string | undefined,
    folder: Folder | null,
    budget?: QuotaBudget,
    onEnded?: (bytes: number) => void,
  ): Promise<StoredObject> {
    const stored = await this.streamToStore(
      source,
      filename,
      this.deps.limits.acceptedTypes,
      (name, type) => this.keyFor(org, name, type, folder),
      budget,
      onEnded,
    );
    return { ...stored, keyFolder: folder };
  }

  /**
   * A temporary object for a request's uploaded job inputs (a merge's PDFs),
   * each part type-checked and metered against the file limit as it joins.
   */
  bundle(org: Organization): InputBundle {
    return new InputBundle(
      {
        store: this.deps.store,
        accept: (head, filename, types) =>
          this.acceptType(
            head,
            filename,
            types.filter((t) => this.deps.limits.acceptedTypes.includes(t)),
          ),
        maxFileSize: this.deps.limits.maxFileSize,
      },
      org.slug,
    );
  }

  private async streamToStore(
    source: Readable,
    filename: string | undefined,
    acceptedTypes: readonly string[],
    keyOf: (name: string, type: MediaType) => string,
    budget?: QuotaBudget,
    onEnded?: (bytes: number) => void,
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
      if (budget && (budget.remaining -= chunk.length) < 0)
        throw Errors.quotaExceeded(budget.quota);
      hash.update(chunk);
      return chunk;
    };
    async function* body(): AsyncGenerator<Buffer> {
      yield meter(head.bytes);
      if (!head.done) {
        for (;;) {
          const next = await iterator.next();
          if (next.done) break;
          yield meter(next.value);
        }
      }
      onEnded?.(bytes);
    }
    const stream = Readable.from(body(), { objectMode: false });
    // The store may sign a single PUT with this hash (asked once the body has ended).
    await this.deps.store.put(key, stream, {
      contentType: type.mime,
      sha256: () => hash.copy().digest('hex'),
    });
    return { key, type, name, bytes, checksum: `sha256:${hash.digest('hex')}` };
  }

  /**
   * What a file whose bytes go to storage part by part (a resumable upload)
   * will be, from its first bytes: its type (refused as `storeStream` refuses
   * it: 400 empty, 415 not accepted), display name and key in `folder`.
   */
  async prepare(
    org: Organization,
    head: Buffer,
    filename: string | undefined,
    folder: Folder | null,
  ): Promise<{ key: string; type: MediaType; name: string }> {
    const type = await this.acceptType(head.subarray(0, DETECTION_BYTES), filename);
    const name = safeDisplayName(filename);
    return { key: this.keyFor(org, name, type, folder), type, name };
  }

  /** Stores bytes already in memory (base64 uploads). */
  async storeBuffer(
    org: Organization,
    data: Buffer,
    filename: string | undefined,
    folder: Folder | null,
    declaredType?: string,
    budget?: QuotaBudget,
  ): Promise<StoredObject> {
    if (data.length > this.deps.limits.maxFileSize) {
      throw Errors.fileTooLarge(this.deps.limits.maxFileSize, filename);
    }
    if (budget && (budget.remaining -= data.length) < 0) throw Errors.quotaExceeded(budget.quota);
    const type = await this.acceptType(data.subarray(0, DETECTION_BYTES), filename);
    if (declaredType && normaliseMime(declaredType) !== type.mime) {
      this.deps.logger.debug(
        { declaredType, detected: type.mime },
        'declared type differs from the bytes; using the bytes',
      );
    }
    const name = safeDisplayName(filename);
    const key = this.keyFor(org, name, type, folder);
    // Hashed once: the checksum, and the PUT's signed payload hash.
    const hex = hash('sha256', data);
    await this.deps.store.put(key, data, { contentType: type.mime, sha256: () => hex });
    return { key, keyFolder: folder, type, name, bytes: data.length, checksum: `sha256:${hex}` };
  }

  /**
   * The object at the key it should have in `folder` (server-side copy, then
   * delete) when its key was built for another folder or staged; as it is
   * otherwise.
   */
  async place(
    org: Organization,
    object: StoredObject,
    folder: Folder | null,
  ): Promise<StoredObject> {
    if (object.keyFolder !== undefined && (object.keyFolder?.id ?? null) === (folder?.id ?? null)) {
      return object;
    }
    const key = this.keyFor(org, object.name, object.type, folder);
    await this.deps.store.copy(object.key, key);
    const placed = { ...object, key, keyFolder: folder };
    try {
      await this.deps.store.remove(object.key);
    } catch (err) {
      // The caller discards the original; the copy goes too.
      await this.discard([placed]);
      throw err;
    }
    return placed;
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
