/**
 * The domain's events: what happened, typed by name. Each is recorded
 * durably with the change that causes it (shared/events/outbox.ts) and
 * dispatched at least once to every listener that subscribes to it
 * (worker/listeners/). Its id is stable (the same event always has the same
 * id, however often it is recorded or dispatched), so a consumer drops
 * duplicates by id.
 */

/** A media record as events carry it: the record's fields (as `GET /media/record` answers). */
export interface MediaEventData {
  id: number;
  organizationId: number;
  folderId: number | null;
  key: string;
  name: string;
  mimetype: string;
  bytes: number;
  checksum: string;
  /** The job that made it (convert, merge), if one did. */
  jobId: string | null;
  createdAt: string;
  /** `media.infected`: the signature the scanner named. */
  signature?: string;
}

/** What each event type carries. */
export interface EventMap {
  /** A file became a record (an upload of any kind, a conversion, a merge). */
  'media.created': { media: MediaEventData };
  /**
   * A record was deleted for good (its delete began: from then on it is gone
   * for the API): a permanent delete, a delete without a trash, or the purge
   * of a file from the trash.
   */
  'media.deleted': { media: MediaEventData };
  /** A file went to the trash (a delete while its organization keeps one): restorable until purged. */
  'media.trashed': { media: MediaEventData };
  /** A file came back from the trash (`POST /media/trash/{id}/restore`), into `folderId`. */
  'media.restored': { media: MediaEventData };
  /** A scan found malware in a file: its object was moved to quarantine (shared/scan/). */
  'media.infected': { media: MediaEventData };
  /** A folder was deleted (its files, if any, were deleted before it: each has its event). */
  'folder.deleted': { folder: { id: number; name: string } };
  /** A job ended well (convert, merge, metadata, a recursive folder delete). */
  'job.completed': { job: JobEventData };
  /** A job failed for good. */
  'job.failed': {
    job: JobEventData & { error: { code: string; status: number; message: string } };
  };
}

export interface JobEventData {
  id: string;
  name: string;
  status: 'completed' | 'failed';
  /** The record a creating job made (convert, merge), once completed. */
  mediaId?: number;
  /** Its key, when it made a record. */
  resultKey?: string;
}

export type EventType = keyof EventMap;

export const EVENT_TYPES = [
  'media.created',
  'media.deleted',
  'media.trashed',
  'media.restored',
  'media.infected',
  'folder.deleted',
  'job.completed',
  'job.failed',
] as const satisfies readonly EventType[];

/** An event as recorded and dispatched. */
export interface DomainEvent<T extends EventType = EventType> {
  /** Stable: `<type>:<subject>` (`media.created:42`, `job.failed:image-…`). */
  id: string;
  type: T;
  organizationId: number;
  /** When the change happened. */
  occurredAt: Date;
  data: EventMap[T];
}

/**
 * An event waiting in the document whose change caused it (written in the
 * same update as the change: nothing can split them), until the outbox
 * promotes it to the events collection. Its data is taken from the document
 * then.
 */
export interface PendingEvent {
  id: string;
  type: EventType;
  at: Date;
}

/** The stable id of an event: its type and its subject. */
export function eventId(type: EventType, subject: string | number): string {
  return `${type}:${subject}`;
}

export function pendingEvent(
  type: EventType,
  subject: string | number,
  at = new Date(),
): PendingEvent {
  return { id: eventId(type, subject), type, at };
}
