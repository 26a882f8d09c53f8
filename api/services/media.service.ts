/**
 * What an organization holds: list its records (filters, newest first,
 * cursor pages), get one by key or id, delete one (its object, its record
 * and anything derived from it; see shared/media-deletion.ts), and its usage
 * by type against its quota.
 */
import { Errors } from '@shared/errors';
import type { MediaDeletion } from '@shared/media-deletion';
import type { FoldersRepository } from '@shared/repositories/folders.repository';
import type {
  MediaFilter,
  MediaRecord,
  MediaRepository,
} from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
import type { UsageRepository } from '@shared/repositories/usage.repository';
import { decodeCursor, encodeCursor, listingKey } from './list-cursor';

export interface ListQuery {
  folderId?: number | undefined;
  /** A folder name (an alternative to folderId). */
  folder?: string | undefined;
  /** `image`, `pdf`, or a MIME type. */
  type?: string | undefined;
  /** A prefix of the records' names. */
  name?: string | undefined;
  createdAfter?: Date | undefined;
  createdBefore?: Date | undefined;
  limit: number;
  cursor?: string | undefined;
}

export interface ListPage {
  media: MediaRecord[];
  /** Pass as `cursor` for the next page; null on the last page. */
  nextCursor: string | null;
}

/** A record named by its key (the interface's way) or by its id. */
export type MediaRef = { key: string } | { id: number };

export interface UsageReport {
  bytes: number;
  files: number;
  byType: Record<string, { bytes: number; files: number }>;
  quota: { bytes: number | null; remaining: number | null };
}

export class MediaService {
  constructor(
    private readonly deps: {
      media: MediaRepository;
      folders: FoldersRepository;
      usage: UsageRepository;
      deletion: MediaDeletion;
    },
  ) {}

  async list(org: Organization, query: ListQuery): Promise<ListPage> {
    const filter: MediaFilter = {
      namePrefix: query.name,
      createdAfter: query.createdAfter,
      createdBefore: query.createdBefore,
    };
    if (query.folder !== undefined) {
      const folder = await this.deps.folders.findByName(org.id, query.folder);
      if (!folder) throw Errors.folderNameNotFound(query.folder);
      if (query.folderId !== undefined && query.folderId !== folder.id) {
        throw Errors.folderMismatch(query.folder, query.folderId);
      }
      filter.folderId = folder.id;
    } else if (query.folderId !== undefined) {
      // Like everywhere else, a folderId must name one of the organization's folders.
      if (!(await this.deps.folders.findById(org.id, query.folderId))) {
        throw Errors.folderNotFound(query.folderId);
      }
      filter.folderId = query.folderId;
    }
    if (query.type === 'image') filter.mimetypePrefix = 'image/';
    else if (query.type === 'pdf') filter.mimetype = 'application/pdf';
    else if (query.type !== undefined) filter.mimetype = query.type.toLowerCase();

    const listing = listingKey({
      org: org.id,
      ...filter,
      createdAfter: filter.createdAfter?.toISOString(),
      createdBefore: filter.createdBefore?.toISOString(),
    });
    const beforeId = query.cursor === undefined ? undefined : decodeCursor(query.cursor, listing);
    // One more than asked tells whether there is a next page.
    const rows = await this.deps.media.list(org.id, filter, {
      limit: query.limit + 1,
      beforeId,
    });
    const media = rows.slice(0, query.limit);
    const last = media[media.length - 1];
    return {
      media,
      nextCursor: rows.length > query.limit && last ? encodeCursor(last.id, listing) : null,
    };
  }

  async get(org: Organization, ref: MediaRef): Promise<MediaRecord> {
    const record =
      'key' in ref
        ? await this.deps.media.findByKey(org.id, ref.key)
        : await this.deps.media.findById(org.id, ref.id);
    if (!record) throw notFound(ref);
    return record;
  }

  /** Deletes a record with its object and derived files; answers the deleted record. */
  async delete(org: Organization, ref: MediaRef): Promise<MediaRecord> {
    const record = await this.get(org, ref);
    // Another delete of the same record that got there first: this one is a 404, like a second delete.
    if (!(await this.deps.deletion.delete(record))) throw notFound(ref);
    return record;
  }

  async usage(org: Organization): Promise<UsageReport> {
    const byType = await this.deps.media.usageByType(org.id);
    let bytes = 0;
    let files = 0;
    for (const t of byType.values()) {
      bytes += t.bytes;
      files += t.files;
    }
    const counted = org.quotaBytes === null ? undefined : await this.deps.usage.get(org.id);
    return {
      bytes,
      files,
      byType: Object.fromEntries([...byType].sort(([a], [b]) => a.localeCompare(b))),
      quota: {
        bytes: org.quotaBytes,
        remaining:
          org.quotaBytes === null ? null : Math.max(0, org.quotaBytes - (counted?.bytes ?? 0)),
      },
    };
  }
}

function notFound(ref: MediaRef) {
  return 'key' in ref ? Errors.mediaNotFound(ref.key) : Errors.mediaIdNotFound(ref.id);
}
