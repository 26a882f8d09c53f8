/**
 * A stored file becoming a record, the one way every process does it (the
 * API's uploads, the worker's conversion and merge results; a resumable
 * upload or a URL import the same): the counterpart of media-deletion.ts.
 *
 * 1. `start`: the record's id is taken at once, beside whatever comes next
 *    (the bytes still stream); `book(bytes)` counts the file against the
 *    organization's quota under that id (refused atomically past it) as
 *    soon as its size is known, while the store still writes it. A booking
 *    whose writer dies expires on its own (usage.repository.ts).
 * 2. `commit`: once every object is at its final key, the bookings are
 *    checked (413 past the quota) and renewed if old, the records are
 *    inserted in one all-or-nothing write, each carrying its
 *    `media.created` event (shared/events/outbox.ts: written with the
 *    record, so nothing can split them), the bookings settled, and the
 *    folder checked: a record written into a folder a delete took meanwhile
 *    is taken back as a delete takes it (404 FOLDER_NOT_FOUND). A job's
 *    record carries the job id (unique): a retry finds the record an earlier
 *    attempt wrote instead of writing another.
 * 3. On any failure the bookings are given back and the objects removed
 *    (`abandon` before a commit, `commit` itself after); no record without
 *    its object, no object without its record.
 *
 * Duplicates (an upload's `onDuplicate`): the checksum is known only once the
 * bytes are stored, so `commit` looks for the organization's live records
 * with the same SHA-256 first. `reject` throws 409 DUPLICATE and `reuse`
 * answers the existing record in the file's place; either way the file's
 * object is removed and its booking given back, so usage and objects stay
 * as they were. Only the caller's organization is searched.
 */
import { isDuplicateKey } from './db/errors';
import { Errors } from './errors';
import { pendingEvent } from './events/events';
import type { EventOutbox } from './events/outbox';
import type { Logger } from './logger';
import type { MediaDeletion } from './media-deletion';
import type { FoldersRepository } from './repositories/folders.repository';
import type { MediaRecord, MediaRepository, RequestOrigin } from './repositories/media.repository';
import type { Booking, UsageRepository } from './repositories/usage.repository';
import type { ObjectStore } from './storage/object-store';

/** Who a record is for: the organization and its quota. */
export interface Owner {
  id: number;
  quotaBytes: number | null;
}

/** A file on its way to a record: its id (taken at once) and, once its size is known, its booking. */
export interface NewFile {
  readonly id: Promise<number>;
  /** Counts the file against the quota under its id; call once, when its size is known. */
  book(bytes: number): void;
  /** The booking (null: the quota refused it); rejected when MongoDB failed. */
  readonly booking: Promise<Booking | null> | undefined;
}

/** What a record says of its file, besides what the booking knows. */
export interface FileRecord {
  key: string;
  name: string;
  mimetype: string;
  bytes: number;
  checksum: string;
}

/** What an upload does when the organization already stores the same bytes. */
export type OnDuplicate = 'allow' | 'reject' | 'reuse';

export interface CommitOptions {
  /** Default `allow` (a job's result is always recorded). */
  onDuplicate?: OnDuplicate;
  folderId: number | null;
  origin: RequestOrigin;
  /** The API token of the request that made it (null for jobs queued before tokens were kept). */
  createdBy: string | null;
  /** The job that made it: a retry finds the record an earlier attempt wrote. */
  jobId?: string;
  /** The job's time limit: a record inserted as it ran out is taken back. */
  signal?: AbortSignal;
  /**
   * Made only of files found clean (a conversion or merge of clean inputs):
   * recorded `clean` without a scan of its own. Otherwise a new record is
   * `pending` until scanned (while scanning is on).
   */
  fromCleanInputs?: boolean;
  /** A URL import's source (kept on the record as `sourceUrl`). */
  sourceUrl?: string;
}

export class MediaCreation {
  constructor(
    private readonly deps: {
      media: MediaRepository;
      usage: UsageRepository;
      folders: Pick<FoldersRepository, 'isLive'>;
      deletion: Pick<MediaDeletion, 'delete'>;
      store: Pick<ObjectStore, 'removeMany'>;
      outbox: Pick<EventOutbox, 'promoteMedia'>;
      logger: Logger;
      /** Work off the answer's path (settling bookings, promoting events). */
      background: (what: string, task: () => Promise<unknown>) => void;
      /** Scanning is on (CLAMD_URL): new records carry a `scanStatus`. */
      scanning?: boolean;
    },
  ) {}

  /** A new file of `owner`: its record's id taken now, its booking when `book` is called. */
  start(owner: Owner): NewFile {
    const id = this.deps.media.nextIds(1).then(([first]) => first!);
    id.catch(() => undefined); // awaited by the booking or the commit, or moot after a failure
    let booking: Promise<Booking | null> | undefined;
    return {
      id,
      book: (bytes) => {
        booking = id.then((taken) =>
          this.deps.usage.book(owner.id, taken, { bytes, files: 1 }, owner.quotaBytes),
        );
        booking.catch(() => undefined); // awaited by the commit or `abandon`
      },
      get booking() {
        return booking;
      },
    };
  }

  /**
   * Records stored files (at their final keys), all or none: the records in
   * the order given. On failure the bookings are given back and the objects
   * removed before the error is thrown.
   */
  async commit(
    owner: Owner,
    files: { file: NewFile; record: FileRecord }[],
    options: CommitOptions,
  ): Promise<MediaRecord[]> {
    const bookings: Booking[] = [];
    let records: MediaRecord[] | undefined;
    // The organization's records these files duplicate (by index), when the upload asked.
    let existing = new Map<number, MediaRecord>();
    let fresh = files;
    try {
      existing = await this.duplicatesOf(owner, files, options.onDuplicate ?? 'allow');
      if (existing.size > 0) {
        const [index, record] = [...existing][0]!;
        if (options.onDuplicate === 'reject') {
          throw Errors.duplicate(files[index]!.record.name, record.key);
        }
        // reuse: the duplicates' objects and bookings go; the others are recorded as usual.
        const reused = files.filter((_, i) => existing.has(i));
        fresh = files.filter((_, i) => !existing.has(i));
        await Promise.all([this.abandon(reused.map((f) => f.file)), this.removeObjects(reused)]);
        if (fresh.length === 0) return files.map((_, i) => existing.get(i)!);
      }
      for (const { file, record } of fresh) {
        if (!file.booking) file.book(record.bytes);
        const booked = await file.booking!;
        if (booked === null) throw Errors.quotaExceeded(owner.quotaBytes ?? 0);
        bookings.push(booked);
      }
      if (!(await this.deps.usage.keep(bookings, owner.quotaBytes))) {
        throw Errors.quotaExceeded(owner.quotaBytes ?? 0);
      }
      // A job whose time ran out while its object was written records nothing.
      options.signal?.throwIfAborted();
      const at = new Date();
      records = await this.deps.media.insertAll(
        fresh.map(({ record }, i) => ({
          organizationId: owner.id,
          folderId: options.folderId,
          key: record.key,
          name: record.name,
          mimetype: record.mimetype,
          bytes: record.bytes,
          checksum: record.checksum,
          metaData: options.origin,
          createdBy: options.createdBy,
          ...(options.jobId ? { jobId: options.jobId } : {}),
          ...(options.sourceUrl ? { sourceUrl: options.sourceUrl } : {}),
          ...(this.deps.scanning
            ? { scanStatus: options.fromCleanInputs ? ('clean' as const) : ('pending' as const) }
            : {}),
          pendingEvents: [pendingEvent('media.created', bookings[i]!.id, at)],
        })),
        bookings.map((b) => b.id),
      );
    } catch (err) {
      const earlier = options.jobId ? await this.earlierAttempt(options.jobId) : undefined;
      if (earlier) {
        // Another attempt's record (ours refused as a duplicate) counted itself; after a
        // lost reply the record is ours and so is the count.
        if (isDuplicateKey(err)) await this.giveBack(bookings);
        else this.settle(bookings);
        return [earlier];
      }
      // Every booking, those not awaited yet included (a duplicate refused before them).
      await this.abandon(fresh.map((f) => f.file));
      // A record certainly not written (MongoDB answered): its object goes. If MongoDB could
      // not even be asked, a job's retry settles it, and reconcile finds it after the last.
      if (earlier === null || !options.jobId) await this.removeObjects(fresh);
      throw err;
    }
    if (options.signal?.aborted) {
      // The job failed while its records were inserted: records, bookings and objects taken back.
      await this.deps.media.removeByIds(records.map((r) => r.id));
      await this.giveBack(bookings);
      await this.removeObjects(fresh);
      options.signal.throwIfAborted();
    }
    this.settle(bookings);
    if (
      options.folderId !== null &&
      !(await this.deps.folders.isLive(owner.id, options.folderId))
    ) {
      // The folder was deleted (or is being) while these records were written: they go as a
      // delete takes them (one a recursive delete listed already is its), counted as records
      // (settled) first, so that their bookings are not given back a second time.
      for (const record of records) await this.deps.deletion.delete(record);
      throw Errors.folderNotFound(options.folderId);
    }
    const ids = records.map((r) => r.id);
    this.deps.background('record the new files’ events', () =>
      this.deps.outbox.promoteMedia({ ids }),
    );
    if (existing.size === 0) return records;
    // In the order given: the existing records in the duplicates' places.
    const inserted = records.values();
    return files.map((_, i) => existing.get(i) ?? inserted.next().value!);
  }

  /** The organization's live records with the same bytes as these files, by index (none for `allow`). */
  private async duplicatesOf(
    owner: Owner,
    files: { record: FileRecord }[],
    onDuplicate: OnDuplicate,
  ): Promise<Map<number, MediaRecord>> {
    const found = new Map<number, MediaRecord>();
    if (onDuplicate === 'allow') return found;
    const byChecksum = await this.deps.media.findByChecksums(
      owner.id,
      files.map((f) => f.record.checksum),
    );
    files.forEach(({ record }, i) => {
      const same = byChecksum.get(record.checksum);
      if (same) found.set(i, same);
    });
    return found;
  }

  /** Gives back the bookings of files that will not be recorded (an upload that failed before its commit). */
  async abandon(files: NewFile[]): Promise<void> {
    const held = await Promise.all(
      files.map((f) => (f.booking ?? Promise.resolve(null)).catch(() => null)),
    );
    await this.giveBack(held.filter((b): b is Booking => b !== null));
  }

  /**
   * The record an earlier attempt of the job wrote (a lost reply, or a
   * concurrent attempt that won): the record, null when there is certainly
   * none, undefined when MongoDB cannot be asked.
   */
  private earlierAttempt(jobId: string): Promise<MediaRecord | null | undefined> {
    return this.deps.media.findByJobId(jobId).catch(() => undefined);
  }

  private settle(bookings: Booking[]): void {
    // Off the answer's path: a settle that fails leaves bookings whose records exist,
    // which their expiry only settles.
    this.deps.background('settle the new files’ bookings', () => this.deps.usage.settle(bookings));
  }

  private async giveBack(bookings: Booking[]): Promise<void> {
    // One that cannot be given back now expires on its own.
    await this.deps.usage.cancel(bookings).catch((err: unknown) => {
      this.deps.logger.warn({ err }, 'could not give back bookings; they expire on their own');
    });
  }

  private async removeObjects(files: { record: FileRecord }[]): Promise<void> {
    await this.deps.store
      .removeMany(files.map((f) => f.record.key))
      .catch((err: unknown) =>
        this.deps.logger.error(
          { err, keys: files.map((f) => f.record.key) },
          'could not remove objects left without a record (reconcile finds them)',
        ),
      );
  }
}
