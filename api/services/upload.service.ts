/**
 * Uploads, as requests make them: the files of a multipart form (one, or
 * several all or nothing) and base64 data URLs. Objects are written first
 * (IngestService), each booked while it streams, and recorded second, in one
 * write, only when every object of the request is in place, through the one
 * way files become records (shared/media-creation.ts); if anything fails,
 * every object the request stored is removed and no record is written.
 */
import type { Readable } from 'node:stream';
import { Errors } from '@shared/errors';
import { DataUrlError, parseDataUrl } from '@shared/media/data-url';
import type { MediaCreation, NewFile, OnDuplicate } from '@shared/media-creation';
import type { Folder } from '@shared/repositories/folders.repository';
import type { MediaRecord } from '@shared/repositories/media.repository';
import type { UsageRepository } from '@shared/repositories/usage.repository';
import type { Caller } from '../domain/caller';
import type { StreamedForm } from '../domain/streamed-form';
import type { FolderSpec, FoldersService } from './folders.service';
import type { IngestService, QuotaBudget, StoredObject } from './ingest.service';

/** An upload's records, in the order sent, and the bytes it stored (none for a reused record). */
export interface Uploaded {
  records: MediaRecord[];
  storedBytes: number;
}

/** What an upload does with bytes the organization already stores (a form field or the query). */
export const ON_DUPLICATE: readonly OnDuplicate[] = ['allow', 'reject', 'reuse'];

/**
 * A multipart upload's input: its form, whose text fields name the folder
 * (both optional) and may say `onDuplicate`; `onDuplicate` from the query
 * string, if it had one.
 */
export interface FormUpload {
  form: StreamedForm<FolderSpec & { onDuplicate?: string | undefined }>;
  onDuplicate?: OnDuplicate | undefined;
}

/** A data URL upload's input, as the client sent it. */
export interface DataUrlUpload {
  file: string;
  mimetype?: string | undefined;
  name?: string | undefined;
  folder?: string | undefined;
  folderId?: string | number | undefined;
  onDuplicate?: OnDuplicate | undefined;
}

export class UploadService {
  constructor(
    private readonly deps: {
      ingest: IngestService;
      folders: FoldersService;
      /** Where a stored file becomes a record (bookings, insert, events, clean-up). */
      creation: MediaCreation;
      /** The organization's usage, for the quota left to a request. */
      usage: Pick<UsageRepository, 'get'>;
      /** Decoded bytes of a data URL upload. */
      maxBase64Size: number;
      /** `onDuplicate` when the request names none (UPLOAD_ON_DUPLICATE). */
      onDuplicate: OnDuplicate;
    },
  ) {}

  /**
   * Stores the files of a multipart form: every file part streams to
   * storage as it arrives (straight to its final key when the folder fields
   * came first); once the form is read, the folder is resolved and
   * everything committed. Anything that fails removes every object the
   * request stored.
   */
  async uploadForm(caller: Caller, input: FormUpload): Promise<Uploaded> {
    const org = caller.organization;
    const budget = await this.budgetOf(caller);
    const stored: StoredObject[] = [];
    const started: NewFile[] = [];
    let earlyFolder: { spec: string; folder: Promise<Folder | null> } | undefined;
    try {
      const { fields, files } = await input.form.read({
        onFile: async (part, fieldsSoFar) => {
          // The folder is known now only if its fields came before this file.
          // Without them the file most likely goes in no folder (the common
          // form), so it streams to that key; if folder fields come after
          // all, commit moves it.
          let folder: Folder | null = null;
          if (fieldsSoFar.folder !== undefined || fieldsSoFar.folderId !== undefined) {
            const spec = folderSpecOf(fieldsSoFar);
            const specKey = JSON.stringify(spec);
            if (earlyFolder?.spec !== specKey) {
              earlyFolder = { spec: specKey, folder: this.deps.folders.resolve(org, spec) };
            }
            folder = await earlyFolder.folder;
          }
          // The record's id, taken while the bytes flow; booked once the last byte is in.
          const file = this.deps.creation.start(org);
          started.push(file);
          const object = await this.deps.ingest.storeStream(
            org,
            part.stream,
            part.filename,
            folder,
            budget,
            (bytes) => file.book(bytes),
          );
          stored.push(object);
          return { object, file };
        },
      });
      const onDuplicate = this.onDuplicateOf(input.onDuplicate, fields.onDuplicate);
      const folder = await this.deps.folders.resolve(org, folderSpecOf(fields));
      return await this.commit(caller, files, folder, onDuplicate);
    } catch (err) {
      await Promise.all([this.deps.ingest.discard(stored), this.deps.creation.abandon(started)]);
      throw err;
    }
  }

  /** Stores a file sent as a base64 data URL; the type detected from the bytes wins over the declared one. */
  async uploadDataUrl(caller: Caller, input: DataUrlUpload): Promise<Uploaded> {
    const org = caller.organization;
    let dataUrl;
    try {
      dataUrl = parseDataUrl(input.file);
    } catch (err) {
      if (err instanceof DataUrlError) throw Errors.invalidDataUrl(err.message);
      throw err;
    }
    const { maxBase64Size } = this.deps;
    if (dataUrl.decodedSize > maxBase64Size) throw Errors.fileTooLarge(maxBase64Size, input.name);
    const folder = await this.deps.folders.resolve(org, {
      folder: input.folder,
      folderId: input.folderId === undefined ? undefined : String(input.folderId),
    });
    const file = this.deps.creation.start(org);
    try {
      const object = await this.deps.ingest.storeBuffer(
        org,
        Buffer.from(dataUrl.base64, 'base64'),
        input.name ?? 'file',
        folder,
        input.mimetype ?? dataUrl.declaredType,
        await this.budgetOf(caller),
      );
      return await this.commit(
        caller,
        [{ object, file }],
        folder,
        input.onDuplicate ?? this.deps.onDuplicate,
      );
    } catch (err) {
      await this.deps.creation.abandon([file]);
      throw err;
    }
  }

  /**
   * Stores one file read from a stream (a finished resumable upload's bytes,
   * read back from its temporary objects) into the folder `folder` names, and
   * records it as every upload is: type detected from its first bytes, its
   * size and the quota metered as it streams, committed all or nothing.
   */
  async uploadStream(
    caller: Caller,
    input: { stream: Readable; filename: string | undefined; folder: FolderSpec },
  ): Promise<Uploaded> {
    const org = caller.organization;
    const folder = await this.deps.folders.resolve(org, input.folder);
    const file = this.deps.creation.start(org);
    try {
      const object = await this.deps.ingest.storeStream(
        org,
        input.stream,
        input.filename,
        folder,
        await this.budgetOf(caller),
        (bytes) => file.book(bytes),
      );
      return await this.commit(caller, [{ object, file }], folder, this.deps.onDuplicate);
    } catch (err) {
      await this.deps.creation.abandon([file]);
      throw err;
    }
  }

  /**
   * Records a file already at the key `ingest.prepare` gave it (a resumable
   * upload's parts joined by the store): into the folder `folder` names now
   * (moved there if its key was built for another), booked, committed, all
   * or nothing as every upload; on failure its object is removed.
   */
  async recordStored(
    caller: Caller,
    input: {
      object: Omit<StoredObject, 'keyFolder'>;
      /** The folder the key was built for. */
      keyFolderId: number | null;
      folder: FolderSpec;
    },
  ): Promise<Uploaded> {
    const org = caller.organization;
    let folder: Folder | null;
    try {
      folder = await this.deps.folders.resolve(org, input.folder);
    } catch (err) {
      await this.deps.ingest.discard([{ ...input.object, keyFolder: undefined }]);
      throw err;
    }
    // Built for another folder (renamed or deleted meanwhile): `place` moves it.
    const keyFolder = (folder?.id ?? null) === input.keyFolderId ? folder : undefined;
    const file = this.deps.creation.start(org);
    try {
      return await this.commit(
        caller,
        [{ object: { ...input.object, keyFolder }, file }],
        folder,
        this.deps.onDuplicate,
      );
    } catch (err) {
      await this.deps.creation.abandon([file]);
      throw err;
    }
  }

  /**
   * Makes stored objects permanent: moves any whose key was built for another
   * folder (or staged), then records them all at once (media-creation.ts:
   * their bookings checked, their records and events written, the folder
   * checked). On failure every object is removed and the error rethrown; the
   * caller gives back what the bookings counted.
   */
  private async commit(
    caller: Caller,
    files: { object: StoredObject; file: NewFile }[],
    folder: Folder | null,
    onDuplicate: OnDuplicate,
  ): Promise<Uploaded> {
    const org = caller.organization;
    const placed: StoredObject[] = [];
    try {
      for (const { object } of files)
        placed.push(await this.deps.ingest.place(org, object, folder));
      const records = await this.deps.creation.commit(
        org,
        placed.map((o, i) => ({
          file: files[i]!.file,
          record: {
            key: o.key,
            name: o.name,
            mimetype: o.type.mime,
            bytes: o.bytes,
            checksum: o.checksum,
          },
        })),
        {
          folderId: folder?.id ?? null,
          origin: caller.origin,
          createdBy: caller.tokenId,
          onDuplicate,
        },
      );
      // A reused record (onDuplicate=reuse) is not one of the ids this request took.
      const taken = new Set(await Promise.all(files.map((f) => f.file.id)));
      const storedBytes = records.filter((r) => taken.has(r.id)).reduce((n, r) => n + r.bytes, 0);
      return { records, storedBytes };
    } catch (err) {
      await this.deps.ingest.discard([...files.map((f) => f.object), ...placed]);
      throw err;
    }
  }

  /** The query's `onDuplicate`, else the form field's (checked here: a form field is any text), else the default. */
  private onDuplicateOf(query: OnDuplicate | undefined, field: string | undefined): OnDuplicate {
    if (field !== undefined && !(ON_DUPLICATE as readonly string[]).includes(field)) {
      throw Errors.validation([
        { field: 'onDuplicate', message: `onDuplicate must be one of ${ON_DUPLICATE.join(', ')}` },
      ]);
    }
    if (query !== undefined && field !== undefined && query !== field) {
      throw Errors.validation([
        {
          field: 'onDuplicate',
          message: `onDuplicate is "${query}" in the query and "${field}" in the form`,
        },
      ]);
    }
    return query ?? (field as OnDuplicate | undefined) ?? this.deps.onDuplicate;
  }

  /** What the request may store under the organization's quota (none without a quota). */
  private async budgetOf(caller: Caller): Promise<QuotaBudget | undefined> {
    const quota = caller.organization.quotaBytes;
    if (quota === null) return undefined;
    const { bytes } = await this.deps.usage.get(caller.organization.id);
    return { quota, remaining: quota - bytes };
  }
}

/** `folder` and `folderId` as the form gave them (both, or neither, keys of the spec). */
function folderSpecOf(fields: FolderSpec): FolderSpec {
  return { folder: fields.folder, folderId: fields.folderId };
}
