/**
 * Archives: a ZIP of a selection of the caller's organization's files (keys,
 * or a folder with or without the folders named under it), written as it is
 * sent. `plan` checks everything first (every key a record of the caller's
 * organization, else 404 for the whole request; the folder; the scan policy;
 * the limits), so a refusal comes before any byte. `open` then writes the
 * ZIP with yazl, one object at a time: the next object is opened only when
 * the ZIP has taken the previous one, and the ZIP is read only as fast as the
 * client takes it, so the memory does not grow with the archive. Entries are
 * stored as they are (no deflate) except TIFF: JPEG, PNG, WebP, GIF, AVIF,
 * HEIF and PDF bytes are compressed already. Past 4 GiB yazl writes ZIP64.
 * docs/api.md, "Archives".
 */
import type { Readable } from 'node:stream';
import { ZipFile } from 'yazl';
import { Errors } from '@shared/errors';
import type { FoldersRepository } from '@shared/repositories/folders.repository';
import type { MediaRecord, MediaRepository } from '@shared/repositories/media.repository';
import { scanRefusal, type ScanSettings } from '@shared/scan/scan';
import type { ObjectStore } from '@shared/storage/object-store';
import type { Caller } from '../domain/caller';
import { EntryNames, folderSegments } from '../domain/archive-names';
import type { SignedUrlService } from './signed-urls.service';

export const ARCHIVE_PATH = '/media/archive';
/** The signed URL's parameter carrying the selection (base64url of its JSON). */
export const SELECTION_PARAM = 'selection';

/** What goes in an archive: records by key (in their order), or a folder's files. */
export type ArchiveSelection =
  | { mediaKeys: string[] }
  | {
      folderId: number;
      /** With the folders whose names start with the folder's name and `/` (folders are flat; a `/` in names is their hierarchy). */
      recursive: boolean;
    };

export interface ArchiveEntry {
  /** The safe, unique path in the archive. */
  path: string;
  record: MediaRecord;
  /** Stored as is (true) or deflated. */
  store: boolean;
}

export interface ArchivePlan {
  /** The archive's file name for Content-Disposition. */
  filename: string;
  entries: ArchiveEntry[];
  /** Bytes of the entries, by their records. */
  bytes: number;
}

export interface ArchiveLimits {
  maxEntries: number;
  maxBytes: number;
}

/** Types deflated in an archive; every other is stored (compressed already). */
const DEFLATED_TYPES: ReadonlySet<string> = new Set(['image/tiff']);

export class ArchiveService {
  constructor(
    private readonly deps: {
      media: MediaRepository;
      folders: Pick<FoldersRepository, 'findById' | 'list'>;
      store: ObjectStore;
      scan: ScanSettings;
      limits: ArchiveLimits;
      signedUrls: Pick<SignedUrlService, 'signPath'>;
    },
  ) {}

  /** The archive of a selection, checked: 404 for a key or folder not the caller's, 413 past a limit. */
  async plan(
    caller: Pick<Caller, 'organization'>,
    selection: ArchiveSelection,
  ): Promise<ArchivePlan> {
    const org = caller.organization;
    const { maxEntries, maxBytes } = this.deps.limits;
    const names = new EntryNames();
    let picked: { record: MediaRecord; folders: string[] }[];
    let filename = 'archive.zip';
    if ('mediaKeys' in selection) {
      const keys = [...new Set(selection.mediaKeys)];
      if (keys.length > maxEntries) throw Errors.tooManyFiles(maxEntries);
      const records = await this.deps.media.findByKeys(org.id, keys);
      picked = keys.map((key) => {
        const record = records.get(key);
        if (!record) throw Errors.mediaNotFound(key);
        return { record, folders: [] };
      });
    } else {
      const isRoot = selection.folderId === org.rootFolderId;
      const folder = isRoot ? null : await this.deps.folders.findById(org.id, selection.folderId);
      if (!isRoot && !folder) throw Errors.folderNotFound(selection.folderId);
      if (folder) filename = `${folderSegments(folder.name).join('-') || 'folder'}.zip`;
      // Each folder in the selection, with its path inside the archive.
      const within = new Map<number | null, string[]>();
      if (folder) within.set(folder.id, []);
      else within.set(null, []);
      if (selection.recursive) {
        const prefix = folder ? `${folder.name}/` : '';
        for (const f of await this.deps.folders.list(org.id)) {
          if (f.id !== folder?.id && f.name.startsWith(prefix)) {
            within.set(f.id, folderSegments(f.name.slice(prefix.length)));
          }
        }
      }
      // Everything in the organization: one query without a folder filter.
      const all = isRoot && selection.recursive;
      const records = await this.deps.media.inFolders(
        org.id,
        all ? undefined : [...within.keys()],
        maxEntries + 1,
      );
      if (records.length > maxEntries) throw Errors.tooManyFiles(maxEntries);
      picked = records.flatMap((record) => {
        const folders = within.get(record.folderId);
        // (a folder created meanwhile: not in the list read above)
        return folders ? [{ record, folders }] : [];
      });
      picked.sort((a, b) => compareFolders(a.folders, b.folders) || a.record.id - b.record.id);
    }
    if (picked.length === 0) {
      throw Errors.validation([
        { field: 'folderId', message: 'the folder holds no files: an archive needs at least one' },
      ]);
    }
    let bytes = 0;
    const entries = picked.map(({ record, folders }) => {
      const refusal = scanRefusal(this.deps.scan, org, record);
      if (refusal) throw refusal;
      bytes += record.bytes;
      return {
        path: names.next(folders, record.name),
        record,
        store: !DEFLATED_TYPES.has(record.mimetype),
      };
    });
    if (bytes > maxBytes) {
      throw Errors.payloadTooLarge(
        `The selection holds ${bytes} bytes, over the archive limit of ${maxBytes} bytes (ARCHIVE_MAX_BYTES)`,
      );
    }
    return { filename, entries, bytes };
  }

  /**
   * The ZIP of a plan, made as it is read. Destroying the stream (a client
   * gone) destroys the object being read and opens no other; a storage
   * failure, or an object whose length is not its record's, destroys the
   * stream with the error (the client sees a cut transfer, never a ZIP that
   * looks whole).
   */
  open(plan: ArchivePlan): Readable {
    const zip = new ZipFile();
    const out = zip.outputStream as Readable;
    let current: Readable | undefined;
    let closed = false;
    out.once('close', () => {
      closed = true;
      current?.destroy();
    });
    zip.on('error', (err: Error) => out.destroy(err));
    for (const entry of plan.entries) {
      const options = {
        size: entry.record.bytes,
        compress: entry.store === false,
        mtime: entry.record.updatedAt,
        mode: 0o100644,
      };
      zip.addReadStreamLazy(entry.path, options, (done) => {
        if (closed) return done(new Error('the archive was closed'), undefined as never);
        this.deps.store.get(entry.record.key).then(
          (stream) => {
            current = stream;
            if (closed) stream.destroy();
            done(null, stream);
          },
          (err: unknown) => done(err, undefined as never),
        );
      });
    }
    zip.end();
    return out;
  }

  /** A signed GET URL of the archive of a selection (checked now, as `plan` checks it). */
  async sign(
    caller: Pick<Caller, 'organization'>,
    selection: ArchiveSelection,
    expiresIn: number | undefined,
  ): Promise<{ url: string; expiresAt: string; expires: number; entries: number; bytes: number }> {
    const plan = await this.plan(caller, selection);
    const signed = this.deps.signedUrls.signPath(
      caller,
      ARCHIVE_PATH,
      [[SELECTION_PARAM, encodeSelection(selection)]],
      expiresIn,
    );
    return { ...signed, entries: plan.entries.length, bytes: plan.bytes };
  }
}

/** Folders' paths in order, a folder's own files before its subfolders'. */
function compareFolders(a: readonly string[], b: readonly string[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1;
  }
  return a.length - b.length;
}

export function encodeSelection(selection: ArchiveSelection): string {
  return Buffer.from(JSON.stringify(selection)).toString('base64url');
}

/** The JSON text of an encoded selection (its shape is the route's to check); undefined when not base64url JSON. */
export function decodeSelection(text: string): unknown {
  try {
    return JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}
