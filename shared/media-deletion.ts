/**
 * Deleting a media file, the one way every process does it (the API's
 * delete, a folder's recursive delete job, reconcile, an organization's
 * offboarding): mark the record, remove the object (and what was derived
 * from it: its rendered variants, listed under `.variants/<key>/`), remove
 * the record, give its bytes (and its variants') back to the usage count. A
 * crash at any step leaves a marked record, which lookups no longer see and
 * `reconcile` finishes; it never leaves a record without its object visible,
 * nor an object without a record. Once the record is gone, the API replicas
 * are told (shared/queue/invalidations.ts) to forget what they kept of the
 * key for revalidations (api/domain/revalidation-cache.ts).
 */
import type { EventOutbox } from './events/outbox';
import type { Logger } from './logger';
import type { InvalidationPublisher } from './queue/invalidations';
import { variantPrefix } from './media/render-options';
import type { MediaRecord, MediaRepository } from './repositories/media.repository';
import type { UsageRepository } from './repositories/usage.repository';
import type { ObjectStore } from './storage/object-store';

export class MediaDeletion {
  constructor(
    private readonly deps: {
      media: MediaRepository;
      usage: UsageRepository;
      store: ObjectStore;
      /** Where the record's events go before the record does. */
      events: Pick<EventOutbox, 'promoteMedia'>;
      logger: Logger;
      /** Keys of objects derived from a record (deleted with it); by default its variants' objects. */
      derivedKeys?: (record: MediaRecord) => Promise<string[]>;
      /** Tells the API replicas a key is gone (what they kept of it for 304s). */
      invalidations?: Pick<InvalidationPublisher, 'publish'> | undefined;
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
    // Listed after the mark: a render finishing later finds the record gone and removes its object.
    const derived = await (this.deps.derivedKeys ?? ((r) => this.variantKeys(r)))(record);
    // Read after the mark too: no variant is recorded on a marked record.
    const variantBytes = await this.deps.media.variantBytesOf(record.id);
    // A quarantined file's object lies at its quarantine key (removing the original key too
    // covers a delete that raced the quarantine's copy).
    const quarantined = record.quarantineKey ? [record.quarantineKey] : [];
    await this.deps.store.removeMany([record.key, ...quarantined, ...derived]);
    await this.deps.events.promoteMedia({ ids: [record.id] });
    await this.deps.media.removeByIds([record.id]);
    await this.forget(record);
    await this.deps.usage
      .release(
        record.organizationId,
        { bytes: record.bytes + variantBytes, files: 1, variantBytes },
        [record.id],
      )
      .catch((err: unknown) =>
        // The count is off until reconcile sets it from the records.
        this.deps.logger.warn({ err, id: record.id }, 'could not release a deleted file’s usage'),
      );
  }

  /**
   * Tells the API replicas that `record`'s key (and its variants) is gone,
   * after its record went: a replica drops what it kept of it for 304s.
   * Never throws (a replica that missed it forgets after AUTH_CACHE_MS).
   */
  async forget(record: Pick<MediaRecord, 'organizationId' | 'key'>): Promise<void> {
    await this.deps.invalidations?.publish({
      organizationId: record.organizationId,
      key: record.key,
    });
  }

  /** The objects of a record's variants (listed: one a render wrote but could not record is there too). */
  private async variantKeys(record: MediaRecord): Promise<string[]> {
    const keys: string[] = [];
    for await (const object of this.deps.store.list(variantPrefix(record.key)))
      keys.push(object.key);
    return keys;
  }
}
