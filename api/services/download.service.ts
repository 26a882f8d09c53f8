/** Downloads: a record of the caller's organization, and its object's bytes. */
import type { Readable } from 'node:stream';
import { Errors } from '@shared/errors';
import type { MediaRecord, MediaRepository } from '@shared/repositories/media.repository';
import { scanRefusal, type ScanSettings } from '@shared/scan/scan';
import type { ByteRange, ObjectStore } from '@shared/storage/object-store';
import type { Caller } from '../domain/caller';
import type { FileValidators, RevalidationCache } from '../domain/revalidation-cache';

/** A file's validators: its content hash as a strong ETag, and its record's last change. */
export function fileValidators(record: MediaRecord): FileValidators {
  return {
    etag: `"${record.checksum.replace(/^sha256:/, '')}"`,
    lastModified: record.updatedAt.toUTCString(),
  };
}

export class DownloadService {
  constructor(
    private readonly deps: {
      media: MediaRepository;
      store: ObjectStore;
      scan: ScanSettings;
      /** Validators kept from earlier answers (304s without a MongoDB read); none without it. */
      revalidations?: RevalidationCache | undefined;
    },
  ) {}

  /**
   * The validators of `key` kept from an earlier answer to the caller's
   * organization, without reading MongoDB; undefined when none are kept.
   */
  known(caller: Pick<Caller, 'organization'>, input: { key: string }): FileValidators | undefined {
    return this.deps.revalidations?.file(caller.organization.id, input.key);
  }

  /**
   * The record for `key` in the caller's organization; another tenant's key is
   * simply not found. A file its organization's scan policy does not serve is
   * refused (409 SCAN_PENDING, 409 FILE_NOT_SCANNED, 403 FILE_INFECTED).
   */
  async find(caller: Pick<Caller, 'organization'>, input: { key: string }): Promise<MediaRecord> {
    const cache = this.deps.revalidations;
    const generation = cache?.begin();
    const record = await this.deps.media.findByKey(caller.organization.id, input.key);
    if (!record) throw Errors.mediaNotFound(input.key);
    const refusal = scanRefusal(this.deps.scan, caller.organization, record);
    if (refusal) throw refusal;
    // A pending scan's verdict changes what is served: kept once it is in.
    if (cache && generation !== undefined && record.scanStatus !== 'pending') {
      cache.keepFile(generation, caller.organization.id, record.key, fileValidators(record));
    }
    return record;
  }

  open(record: MediaRecord, range?: ByteRange): Promise<Readable> {
    return this.deps.store.get(record.key, range);
  }

  /**
   * Starts reading the whole of `key` while its record is still being looked
   * up, so that the store's first byte and the record arrive together rather
   * than one after the other (docs/performance.md, "Downloads"). Only a key
   * under the caller's organization's prefix is read (another tenant's object
   * is never opened); its bytes are the caller's only through `take`, after
   * `find` answered the record, and a prefetch not taken is `discard`ed.
   */
  prefetch(caller: Pick<Caller, 'organization'>, key: string): Prefetch | undefined {
    if (!key.startsWith(`${caller.organization.slug}/`)) return undefined;
    const opened = this.deps.store.get(key);
    // A failure is the download's only when taken (its own open would fail alike).
    opened.catch(() => undefined);
    let taken = false;
    return {
      take: () => {
        taken = true;
        return opened;
      },
      discard: () => {
        if (taken) return;
        taken = true;
        opened.then(
          (body) => body.destroy(),
          () => undefined,
        );
      },
    };
  }
}

/** A read of an object started before its record was found (`DownloadService.prefetch`). */
export interface Prefetch {
  /** The object's bytes, once the record allows them. */
  take(): Promise<Readable>;
  /** The read ended unused (the record missing, refused, or not a plain download after all). */
  discard(): void;
}
