/** Downloads: a record of the caller's organization, and its object's bytes. */
import type { Readable } from 'node:stream';
import { Errors } from '@shared/errors';
import type { MediaRecord, MediaRepository } from '@shared/repositories/media.repository';
import { scanRefusal, type ScanSettings } from '@shared/scan/scan';
import type { ByteRange, ObjectStore } from '@shared/storage/object-store';
import type { Caller } from '../domain/caller';

export class DownloadService {
  constructor(
    private readonly deps: { media: MediaRepository; store: ObjectStore; scan: ScanSettings },
  ) {}

  /**
   * The record for `key` in the caller's organization; another tenant's key is
   * simply not found. A file its organization's scan policy does not serve is
   * refused (409 SCAN_PENDING, 409 FILE_NOT_SCANNED, 403 FILE_INFECTED).
   */
  async find(caller: Pick<Caller, 'organization'>, input: { key: string }): Promise<MediaRecord> {
    const record = await this.deps.media.findByKey(caller.organization.id, input.key);
    if (!record) throw Errors.mediaNotFound(input.key);
    const refusal = scanRefusal(this.deps.scan, caller.organization, record);
    if (refusal) throw refusal;
    return record;
  }

  open(record: MediaRecord, range?: ByteRange): Promise<Readable> {
    return this.deps.store.get(record.key, range);
  }
}
