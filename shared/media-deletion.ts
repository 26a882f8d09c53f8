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
 *
 * With a trash (TRASH_RETENTION_S, or the organization's own retention, above
 * 0) a delete that is not `permanent` only moves the record to the trash
 * (`discard`): one update marks it, with its `media.trashed` event; its
 * object and bytes stay until the purge (worker/processors/purge-trash.processor.ts)
 * deletes it the way above. A trashed key is forgotten by the replicas too.
 */
import type { EventOutbox } from './events/outbox';
import type { Logger } from './logger';
import type { InvalidationPublisher } from './queue/invalidations';
import { variantPrefix } from './media/render-options';
import type { MediaRecord, MediaRepository } from './repositories/media.repository';
import type { OrganizationsRepository } from './repositories/organizations.repository';
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
      /** The trash: without it every delete is permanent. */
      trash?: {
        /** Seconds in the trash of an organization without its own retention (TRASH_RETENTION_S). */
        retentionS: number;
        organizations: Pick<OrganizationsRepository, 'findById'>;
      };
    },
  ) {}

  /** Seconds the organization's deleted files stay in the trash (0: none, deleted at once). */
  async retentionOf(organizationId: number): Promise<number> {
    const trash = this.deps.trash;
    if (!trash) return 0;
    const org = await trash.organizations.findById(organizationId);
    return org?.trashRetentionS ?? trash.retentionS;
  }

  /**
   * A user's delete: to the trash when the organization keeps one and the
   * delete is not `permanent`, else deleted. False when another delete got
   * there first.
   */
  async discard(
    record: MediaRecord,
    options: { permanent?: boolean; by?: string | null; folderName?: string | null } = {},
  ): Promise<{ done: boolean; trashed: boolean }> {
    const keep = !options.permanent && (await this.retentionOf(record.organizationId)) > 0;
    if (!keep) return { done: await this.delete(record), trashed: false };
    const now = this.deps.now?.() ?? new Date();
    const from =
      record.folderId !== null && options.folderName
        ? { id: record.folderId, name: options.folderName }
        : null;
    const done = await this.deps.media.markTrashed(record.id, now, options.by ?? null, from);
    // Its media.trashed event, recorded (the dispatcher's sweep does, should this fail).
    if (done) await this.deps.events.promoteMedia({ ids: [record.id] }).catch(() => undefined);
    // The replicas stop answering 304s for it: a trashed file is a 404.
    if (done) await this.forget(record);
    return { done, trashed: true };
  }

  /**
   * Deletes a record and its object (in the trash or not). False when the
   * record is gone or another delete has already marked it (that one
   * finishes the job), or a restore holds it (unless `evenIfRestoring`: an
   * organization's offboarding).
   */
  async delete(record: MediaRecord, options: { evenIfRestoring?: boolean } = {}): Promise<boolean> {
    const now = this.deps.now?.() ?? new Date();
    if (!(await this.deps.media.markDeleting(record.id, now, options.evenIfRestoring))) {
      return false;
    }
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
