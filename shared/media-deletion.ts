/**
 * Deleting a media file, the one way every process does it (the API's
 * delete, a folder's recursive delete job, reconcile, an organization's
 * offboarding): mark the record, remove the object (and what was derived
 * from it), remove the record, give its bytes back to the usage count. A
 * crash at any step leaves a marked record, which lookups no longer see and
 * `reconcile` finishes; it never leaves a record without its object visible,
 * nor an object without a record.
 */
import type { Logger } from './logger';
import type { MediaRecord, MediaRepository } from './repositories/media.repository';
import type { UsageRepository } from './repositories/usage.repository';
import type { ObjectStore } from './storage/object-store';

export class MediaDeletion {
  constructor(
    private readonly deps: {
      media: MediaRepository;
      usage: UsageRepository;
      store: ObjectStore;
      logger: Logger;
      /** Keys of objects derived from a record (deleted with it); none by default. */
      derivedKeys?: (record: MediaRecord) => Promise<string[]>;
      now?: () => Date;
    },
  ) {}

  /**
   * Deletes a record and its object. False when the record is gone or
   * another delete has already marked it (that one finishes the job).
   */
  async delete(record: MediaRecord): Promise<boolean> {
    const now = this.deps.now?.() ?? new Date();
    if (!(await this.deps.media.markDeleting(record.id, now))) return false;
    await this.finish(record);
    return true;
  }

  /** The steps after the mark: the object and what was derived from it, the record, the usage. */
  async finish(record: MediaRecord): Promise<void> {
    const derived = (await this.deps.derivedKeys?.(record)) ?? [];
    await this.deps.store.removeMany([record.key, ...derived]);
    await this.deps.media.removeByIds([record.id]);
    await this.deps.usage
      .release(record.organizationId, { bytes: record.bytes, files: 1 })
      .catch((err: unknown) =>
        // The count is off until reconcile sets it from the records.
        this.deps.logger.warn({ err, id: record.id }, 'could not release a deleted file’s usage'),
      );
  }
}
