/**
 * The trash of an organization: what its deletes kept (records with
 * `deletedAt`, newest first, cursor pages like GET /media), restoring one
 * (shared/media-restore.ts) and purging one now (shared/media-deletion.ts).
 * The purge after the retention is a job (worker/processors/purge-trash.processor.ts).
 */
import { Errors } from '@shared/errors';
import type { MediaDeletion } from '@shared/media-deletion';
import type { MediaRestore } from '@shared/media-restore';
import type { MediaRecord, MediaRepository } from '@shared/repositories/media.repository';
import type { Caller } from '../domain/caller';
import { decodeCursor, encodeCursor, listingKey } from '../domain/list-cursor';

export interface TrashPage {
  media: TrashedRecord[];
  /** Pass as `cursor` for the next page; null on the last page. */
  nextCursor: string | null;
}

/** A record in the trash, with when it went there and when the purge deletes it. */
export interface TrashedRecord {
  record: MediaRecord;
  deletedAt: Date;
  /** deletedAt plus the organization's retention (the purge runs every TRASH_PURGE_INTERVAL_MS). */
  purgeAt: Date;
}

export class TrashService {
  constructor(
    private readonly deps: {
      media: MediaRepository;
      deletion: Pick<MediaDeletion, 'delete' | 'retentionOf'>;
      restore: Pick<MediaRestore, 'restore'>;
    },
  ) {}

  async list(
    caller: Pick<Caller, 'organization'>,
    query: { limit: number; cursor?: string | undefined },
  ): Promise<TrashPage> {
    const org = caller.organization;
    const listing = listingKey({ org: org.id, trash: true });
    const beforeId =
      query.cursor === undefined ? undefined : decodeCursor(query.cursor, listing).id;
    const [rows, retentionS] = await Promise.all([
      this.deps.media.listTrash(org.id, { limit: query.limit + 1, beforeId }),
      this.deps.deletion.retentionOf(org.id),
    ]);
    const page = rows.slice(0, query.limit);
    const last = page[page.length - 1];
    return {
      media: page.map((record) => {
        const deletedAt = record.deletedAt ?? record.updatedAt;
        return { record, deletedAt, purgeAt: new Date(deletedAt.getTime() + retentionS * 1000) };
      }),
      nextCursor: rows.length > query.limit && last ? encodeCursor({ id: last.id }, listing) : null,
    };
  }

  /** Brings a trashed file back to its folder (re-created if gone); answers the restored record. */
  async restore(caller: Pick<Caller, 'organization'>, id: number): Promise<MediaRecord> {
    const record = await this.trashed(caller, id);
    const restored = await this.deps.restore.restore(record);
    // Purged or restored by another request meanwhile.
    if (!restored) throw Errors.mediaIdNotFound(id);
    return restored;
  }

  /** Deletes a trashed file now (bytes, variants, record); answers the deleted record. */
  async purge(caller: Pick<Caller, 'organization'>, id: number): Promise<MediaRecord> {
    const record = await this.trashed(caller, id);
    if (!(await this.deps.deletion.delete(record))) throw Errors.mediaIdNotFound(id);
    return record;
  }

  private async trashed(caller: Pick<Caller, 'organization'>, id: number): Promise<MediaRecord> {
    const record = await this.deps.media.findTrashed(caller.organization.id, id);
    if (!record) throw Errors.mediaIdNotFound(id);
    return record;
  }
}
