/**
 * Uploads, as requests make them: the files of a multipart form (one, or
 * several all or nothing) and base64 data URLs. Objects are written first
 * (IngestService) and records second, in one write, only when every object
 * of the request is in place; if anything fails, every object the request
 * stored is removed and no record is written. Records written into a folder
 * that a delete took meanwhile are taken back (404 FOLDER_NOT_FOUND).
 */
import { Errors } from '@shared/errors';
import { DataUrlError, parseDataUrl } from '@shared/media/data-url';
import type { MediaDeletion } from '@shared/media-deletion';
import type { Folder } from '@shared/repositories/folders.repository';
import type { MediaRecord, MediaRepository } from '@shared/repositories/media.repository';
import type { Booking, UsageRepository } from '@shared/repositories/usage.repository';
import type { Caller } from './caller';
import type { FolderSpec, FoldersService } from './folders.service';
import { lastField, type FormFields, type FormReader } from './form';
import type { IngestService, QuotaBudget, StoredObject } from './ingest.service';

/** A data URL upload's input, as the client sent it. */
export interface DataUrlUpload {
  file: string;
  mimetype?: string | undefined;
  name?: string | undefined;
  folder?: string | undefined;
  folderId?: string | number | undefined;
}

const FOLDER_FIELDS = ['folder', 'folderId'];

/**
 * A stored file's booking (shared/repositories/usage.repository.ts): its
 * bytes counted against the quota for the record id taken when its bytes
 * began, null when the quota refused it, rejected when MongoDB failed. For a
 * form's file it is made once the file's last byte has come in, while the
 * store still writes it, so its MongoDB round trip overlaps the storage write
 * instead of following it; it is given back if the upload fails, and expires
 * on its own if the process dies before the record is written.
 */
type FileBooking = PromiseSettledResult<Booking | null>;

export class UploadService {
  constructor(
    private readonly deps: {
      ingest: IngestService;
      folders: FoldersService;
      media: MediaRepository;
      usage: UsageRepository;
      /** Takes back records whose folder was deleted while they were written. */
      deletion: Pick<MediaDeletion, 'delete'>;
      /** Decoded bytes of a data URL upload. */
      maxBase64Size: number;
      maxFileSize: number;
    },
  ) {}

  /**
   * Stores the files of a multipart form: every file part named one of
   * `fileFields` streams to storage (straight to its final key when the
   * folder fields came first); once the form is read, the folder is resolved
   * and everything committed. Anything that fails removes every object the
   * request stored.
   */
  async uploadForm(
    caller: Caller,
    form: FormReader,
    options: { fileFields: string[]; maxFiles: number },
  ): Promise<MediaRecord[]> {
    const org = caller.organization;
    const [fileField] = options.fileFields as [string];
    const budget = await this.budgetOf(caller);
    const stored: StoredObject[] = [];
    const bookings: Promise<FileBooking>[] = [];
    let earlyFolder: { spec: string; folder: Promise<Folder | null> } | undefined;
    try {
      const { fields, files } = await form(
        { maxFileSize: this.deps.maxFileSize, maxFiles: options.maxFiles, maxFields: 20 },
        {
          acceptField: (name) => refuseUnknownField(name, fileField),
          onFile: async (part, fieldsSoFar) => {
            if (!options.fileFields.includes(part.field)) {
              throw Errors.validation([
                {
                  field: part.field,
                  message: `unexpected file field "${part.field}" (send files as "${fileField}")`,
                },
              ]);
            }
            // The folder is known now only if its fields came before this file.
            // Without them the file most likely goes in no folder (the common
            // form), so it streams to that key; if folder fields come after
            // all, commit moves it.
            let folder: Folder | null = null;
            if (FOLDER_FIELDS.some((f) => fieldsSoFar.has(f))) {
              const spec = folderSpecOf(fieldsSoFar);
              const specKey = JSON.stringify(spec);
              if (earlyFolder?.spec !== specKey) {
                earlyFolder = { spec: specKey, folder: this.deps.folders.resolve(org, spec) };
              }
              folder = await earlyFolder.folder;
            }
            // The record's id, taken while the bytes flow (the booking names it).
            const id = this.takeId();
            let booking: Promise<FileBooking> | undefined;
            const object = await this.deps.ingest.storeStream(
              org,
              part.stream,
              part.filename,
              folder,
              budget,
              (bytes) => bookings.push((booking = this.book(org, id, bytes))),
            );
            stored.push(object);
            return { object, booking: booking! };
          },
        },
      );
      if (files.length === 0) {
        throw Errors.validation([
          { field: fileField, message: `a file part named "${fileField}" is required` },
        ]);
      }
      const folder = await this.deps.folders.resolve(org, folderSpecOf(fields));
      return await this.commit(
        caller,
        files.map((f) => f.object),
        folder,
        await Promise.all(files.map((f) => f.booking)),
      );
    } catch (err) {
      await Promise.all([this.deps.ingest.discard(stored), this.unbook(bookings)]);
      throw err;
    }
  }

  /** Stores a file sent as a base64 data URL; the type detected from the bytes wins over the declared one. */
  async uploadDataUrl(caller: Caller, input: DataUrlUpload): Promise<MediaRecord> {
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
    const id = this.takeId();
    const object = await this.deps.ingest.storeBuffer(
      org,
      Buffer.from(dataUrl.base64, 'base64'),
      input.name ?? 'file',
      folder,
      input.mimetype ?? dataUrl.declaredType,
      await this.budgetOf(caller),
    );
    const booking = this.book(org, id, object.bytes);
    try {
      const [record] = await this.commit(caller, [object], folder, [await booking]);
      return record!;
    } catch (err) {
      await this.unbook([booking]);
      throw err;
    }
  }

  /**
   * Makes stored objects permanent: moves any whose key was built for another
   * folder (or staged), checks that their bookings (one per object, in order)
   * counted them within the quota, renews those past half their life (a long
   * upload's first files), then writes their records, with the bookings' ids,
   * in one all-or-nothing write, and settles the bookings. On failure every
   * object is removed and the error rethrown; the caller gives back what the
   * bookings counted.
   */
  private async commit(
    caller: Caller,
    objects: StoredObject[],
    folder: Folder | null,
    bookings: FileBooking[],
  ): Promise<MediaRecord[]> {
    const org = caller.organization;
    const placed: StoredObject[] = [];
    try {
      for (const object of objects) placed.push(await this.deps.ingest.place(org, object, folder));
      const booked = bookings.map((b) => {
        if (b.status === 'rejected') throw b.reason;
        return b.value;
      });
      if (booked.some((b) => b === null)) throw Errors.quotaExceeded(org.quotaBytes ?? 0);
      const held = booked as Booking[];
      if (!(await this.deps.usage.keep(held, org.quotaBytes))) {
        throw Errors.quotaExceeded(org.quotaBytes ?? 0);
      }
      const records = await this.deps.media.insertAll(
        placed.map((o) => ({
          organizationId: org.id,
          folderId: folder?.id ?? null,
          key: o.key,
          name: o.name,
          mimetype: o.type.mime,
          bytes: o.bytes,
          checksum: o.checksum,
          metaData: caller.origin,
          createdBy: caller.tokenId,
        })),
        held.map((b) => b.id),
      );
      // Off the answer's path: a settle that fails leaves bookings whose
      // records exist, which their expiry only settles.
      const settled = this.deps.usage.settle(held).catch(() => undefined);
      if (folder && !(await this.deps.folders.isLive(org, folder.id))) {
        // The folder was deleted (or is being) while these records were written:
        // they go as a delete takes them (one a recursive delete listed already
        // is its), counted as records first, so that the bookings are not given
        // back a second time.
        await settled;
        for (const record of records) await this.deps.deletion.delete(record);
        throw Errors.folderNotFound(folder.id);
      }
      return records;
    } catch (err) {
      await this.deps.ingest.discard([...objects, ...placed]);
      throw err;
    }
  }

  /**
   * A record's id, taken ahead (while the file's bytes flow). A refused or
   * failed upload leaves a gap in the ids, which promise only to grow.
   */
  private takeId(): Promise<number> {
    const id = this.deps.media.nextIds(1).then(([first]) => first!);
    id.catch(() => undefined); // awaited by the booking, or moot once the upload has failed
    return id;
  }

  /** Books a stored file under its record's id: counted against the quota, refused atomically past it. */
  private async book(
    org: Caller['organization'],
    id: Promise<number>,
    bytes: number,
  ): Promise<FileBooking> {
    try {
      const value = await this.deps.usage.book(
        org.id,
        await id,
        { bytes, files: 1 },
        org.quotaBytes,
      );
      return { status: 'fulfilled', value };
    } catch (reason) {
      return { status: 'rejected', reason };
    }
  }

  /** Gives back what bookings counted (an upload that failed after they began). */
  private async unbook(bookings: Promise<FileBooking>[]): Promise<void> {
    const held = (await Promise.all(bookings)).flatMap((b) =>
      b.status === 'fulfilled' && b.value ? [b.value] : [],
    );
    // One that cannot be given back now expires on its own.
    await this.deps.usage.cancel(held).catch(() => undefined);
  }

  /** What the request may store under the organization's quota (none without a quota). */
  private async budgetOf(caller: Caller): Promise<QuotaBudget | undefined> {
    const quota = caller.organization.quotaBytes;
    if (quota === null) return undefined;
    const { bytes } = await this.deps.usage.get(caller.organization.id);
    return { quota, remaining: quota - bytes };
  }
}

/** `folder` and `folderId` as the form gave them (their last values). */
function folderSpecOf(fields: FormFields): FolderSpec {
  return { folder: lastField(fields, 'folder'), folderId: lastField(fields, 'folderId') };
}

/** Upload forms take the folder fields only; the file field must be a file part. */
function refuseUnknownField(name: string, fileField: string): void {
  if (name === fileField) {
    throw Errors.validation([
      { field: name, message: `"${name}" must be a file part (with a filename)` },
    ]);
  }
  if (!FOLDER_FIELDS.includes(name)) {
    throw Errors.validation([
      { field: name, message: `unknown field "${name}" (accepted: ${FOLDER_FIELDS.join(', ')})` },
    ]);
  }
}
