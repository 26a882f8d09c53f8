/**
 * What an organization holds: list its records (filters, newest first,
 * cursor pages), get one by key or id, delete one (to the trash, or its
 * object, its record and anything derived from it; see
 * shared/media-deletion.ts) or only its
 * rendered variants (their bytes given back to the quota), and its usage
 * by type, its rendered variants and its stored job results, against its quota.
 */
import { Errors } from '@shared/errors';
import type { MediaDeletion } from '@shared/media-deletion';
import type { FoldersRepository } from '@shared/repositories/folders.repository';
import type { JobResultsRepository } from '@shared/repositories/job-results.repository';
import type {
  MediaFilter,
  MediaOrder,
  MediaRecord,
  MediaRepository,
} from '@shared/repositories/media.repository';
import type { UsageRepository } from '@shared/repositories/usage.repository';
import type { VariantsRepository } from '@shared/repositories/variants.repository';
import type { ObjectStore } from '@shared/storage/object-store';
import type { Caller } from '../domain/caller';
import { decodeCursor, encodeCursor, listingKey } from '../domain/list-cursor';

export interface ListQuery {
  folderId?: number | undefined;
  /** A folder name (an alternative to folderId). */
  folder?: string | undefined;
  /** `image`, `pdf`, or a MIME type. */
  type?: string | undefined;
  /** A prefix of the records' names. */
  name?: string | undefined;
  /** A part of the records' names, any case. */
  q?: string | undefined;
  /** The order: by creation (id), name or size, `-` first for descending (default `-createdAt`). */
  sort?: MediaSort | undefined;
  createdAfter?: Date | undefined;
  createdBefore?: Date | undefined;
  limit: number;
  cursor?: string | undefined;
}

export const MEDIA_SORTS = ['createdAt', '-createdAt', 'name', '-name', 'size', '-size'] as const;
export type MediaSort = (typeof MEDIA_SORTS)[number];

export interface ListPage {
  media: MediaRecord[];
  /** Pass as `cursor` for the next page; null on the last page. */
  nextCursor: string | null;
}

/** What DELETE /media/variants removed. */
export interface RemovedVariants {
  media: string;
  variants: number;
  bytes: number;
}

/** A record named by its key (the interface's way) or by its id. */
export type MediaRef = { key: string } | { id: number };

export interface UsageReport {
  /** The files' bytes (their variants' are `variantBytes`). */
  bytes: number;
  files: number;
  byType: Record<string, { bytes: number; files: number }>;
  /** Rendered variants stored beside the files, and their bytes: they count against the quota too. */
  variants: number;
  variantBytes: number;
  /** Job results stored until read (bounded apart, RESULTS_MAX_BYTES_PER_ORG; not in the quota). */
  resultBytes: number;
  /** What of `files` and `bytes` is in the trash (counted until purged). */
  trash: { bytes: number; files: number };
  /** `remaining`: the quota less the files' and the variants' bytes. */
  quota: { bytes: number | null; remaining: number | null };
}

export class MediaService {
  constructor(
    private readonly deps: {
      media: MediaRepository;
      folders: FoldersRepository;
      usage: UsageRepository;
      jobResults: Pick<JobResultsRepository, 'bytesByOrganization'>;
      variants: Pick<VariantsRepository, 'removeAll'>;
      store: Pick<ObjectStore, 'removeMany'>;
      deletion: MediaDeletion;
    },
  ) {}

  async list(caller: Pick<Caller, 'organization'>, query: ListQuery): Promise<ListPage> {
    const org = caller.organization;
    const filter: MediaFilter = {
      namePrefix: query.name,
      nameContains: query.q,
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
    } else if (query.folderId !== undefined && query.folderId === org.rootFolderId) {
      // The root folder's id lists the files in no folder.
      filter.folderId = null;
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

    const sort = query.sort ?? '-createdAt';
    const order: MediaOrder = {
      field:
        sort.replace('-', '') === 'size'
          ? 'bytes'
          : sort.replace('-', '') === 'name'
            ? 'name'
            : 'id',
      descending: sort.startsWith('-'),
    };
    const listing = listingKey({
      org: org.id,
      ...filter,
      // The default order keeps the cursors it always had.
      sort: sort === '-createdAt' ? undefined : sort,
      createdAfter: filter.createdAfter?.toISOString(),
      createdBefore: filter.createdBefore?.toISOString(),
    });
    const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor, listing);
    if (after && (order.field === 'id') !== (after.value === undefined)) {
      throw Errors.validation([{ field: 'cursor', message: 'cursor is not valid for this sort' }]);
    }
    // One more than asked tells whether there is a next page.
    const rows = await this.deps.media.list(org.id, filter, {
      limit: query.limit + 1,
      order,
      after,
    });
    const media = rows.slice(0, query.limit);
    const last = media[media.length - 1];
    const value = (r: MediaRecord) =>
      order.field === 'name' ? r.name : order.field === 'bytes' ? r.bytes : undefined;
    return {
      media,
      nextCursor:
        rows.length > query.limit && last
          ? encodeCursor({ id: last.id, value: value(last) }, listing)
          : null,
    };
  }

  async get(caller: Pick<Caller, 'organization'>, ref: MediaRef): Promise<MediaRecord> {
    const org = caller.organization;
    const record =
      'key' in ref
        ? await this.deps.media.findByKey(org.id, ref.key)
        : await this.deps.media.findById(org.id, ref.id);
    if (!record) throw notFound(ref);
    return record;
  }

  /**
   * Deletes a record: to the trash when its organization keeps one (its
   * object stays until the purge), else, or when `permanent`, with its object
   * and derived files. Answers the record as it was.
   */
  async delete(
    caller: Pick<Caller, 'organization' | 'tokenId'>,
    ref: MediaRef,
    options: { permanent?: boolean } = {},
  ): Promise<MediaRecord> {
    const record = await this.get(caller, ref);
    const folder =
      record.folderId === null
        ? null
        : await this.deps.folders.findById(caller.organization.id, record.folderId);
    const { done } = await this.deps.deletion.discard(record, {
      permanent: options.permanent ?? false,
      by: caller.tokenId,
      folderName: folder?.name ?? null,
    });
    // Another delete of the same record that got there first: this one is a 404, like a second delete.
    if (!done) throw notFound(ref);
    return record;
  }

  /**
   * Removes every rendered variant of a file (the file stays; a later render
   * makes a variant again): off the record first, so no request is served a
   * variant whose object is gone, then the objects, then their bytes given
   * back. A crash in between leaves objects the record no longer lists, and a
   * counter too high: `reconcile --fix` removes the one and sets the other.
   */
  async deleteVariants(
    caller: Pick<Caller, 'organization'>,
    input: { key: string },
  ): Promise<RemovedVariants> {
    const org = caller.organization;
    const { key } = input;
    const removed = await this.deps.variants.removeAll(org.id, key);
    if (!removed) throw Errors.mediaNotFound(key);
    // No replica answers 304 for a variant whose object goes now.
    if (removed.length > 0) await this.deps.deletion.forget({ organizationId: org.id, key });
    const bytes = removed.reduce((n, v) => n + v.bytes, 0);
    if (removed.length > 0) {
      await this.deps.store.removeMany(removed.map((v) => v.key));
      await this.deps.usage.release(org.id, { bytes, files: 0, variantBytes: bytes });
    }
    return { media: key, variants: removed.length, bytes };
  }

  async usage(caller: Pick<Caller, 'organization'>): Promise<UsageReport> {
    const org = caller.organization;
    const [byType, trashed, variants, results, counted] = await Promise.all([
      this.deps.media.usageByType(org.id),
      this.deps.media.usageByType(org.id, 'trashed'),
      this.deps.media.variantUsage(org.id),
      this.deps.jobResults.bytesByOrganization(org.id),
      // The counter, which the quota is checked against (files' and variants' bytes).
      org.quotaBytes === null ? undefined : this.deps.usage.get(org.id),
    ]);
    let bytes = 0;
    let files = 0;
    for (const t of byType.values()) {
      bytes += t.bytes;
      files += t.files;
    }
    return {
      bytes,
      files,
      byType: Object.fromEntries([...byType].sort(([a], [b]) => a.localeCompare(b))),
      variants: variants.variants,
      variantBytes: variants.bytes,
      resultBytes: results.get(org.id) ?? 0,
      trash: [...trashed.values()].reduce(
        (t, u) => ({ bytes: t.bytes + u.bytes, files: t.files + u.files }),
        { bytes: 0, files: 0 },
      ),
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
