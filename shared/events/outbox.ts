/**
 * The outbox: where domain events are recorded durably, and where a
 * dispatcher takes them from. No dual write can split an event from its
 * change:
 *
 * - an event of a change to a record or a folder is written in the same
 *   update as the change (`pendingEvents` of the document: a record's insert
 *   carries its `media.created`, a delete's mark its `media.deleted`, a
 *   folder's removal its `folder.deleted`), then *promoted* here to the
 *   events collection (upserted by its stable id, then pulled from the
 *   document); a process that dies before promoting leaves it in the
 *   document, where the dispatcher's sweep finds it;
 * - a job's event (`job.completed`, `job.failed`) is derived from BullMQ's
 *   own record of the job's end (worker/events/job-events.ts), idempotently.
 *
 * Recorded events wait with `dispatchedAt: null` until a dispatcher has
 * queued a delivery for each listener (`claim`, a batch at a time, then
 * `dispatched`); a
 * dispatcher that dies mid-way lets its claim lapse, and the next one queues
 * again (deliveries are BullMQ jobs whose ids derive from the event and the
 * listener, so none is queued twice while it exists).
 */
import { randomUUID } from 'node:crypto';
import type { EventDoc, FolderDoc, MediaDoc, Models } from '../db/models';
import { db, isDuplicateKey } from '../db/errors';
import type { DomainEvent, EventMap, EventType, MediaEventData, PendingEvent } from './events';

/** The separator between a removed folder's name and its id (names hold no control characters). */
export const REMOVED_NAME_SEPARATOR = '\u0000';

export function mediaEventData(doc: MediaDoc): MediaEventData {
  return {
    id: doc.id,
    organizationId: doc.organizationId,
    folderId: doc.folderId ?? null,
    key: doc.key,
    name: doc.name,
    mimetype: doc.mimetype,
    bytes: doc.bytes,
    checksum: doc.checksum,
    jobId: doc.jobId ?? null,
    createdAt: doc.createdAt.toISOString(),
    ...(doc.scanSignature ? { signature: doc.scanSignature } : {}),
  };
}

/** Which documents' pending events to promote: these ids, or any pending since before a time. */
type Which = { ids: number[] } | { before: Date };

/** Documents with pending events, of `which`. */
function withPending(which: Which) {
  return {
    'pendingEvents.0': { $exists: true },
    ...('ids' in which
      ? { id: { $in: which.ids } }
      : { 'pendingEvents.at': { $lte: which.before } }),
  };
}

/** The update that takes promoted events out of their document. */
function pull(pending: PendingEvent[]) {
  return { $pull: { pendingEvents: { id: { $in: pending.map((e) => e.id) } } } };
}

/** Events recorded and not dispatched, and the oldest one's age (metrics). */
export interface OutboxStats {
  pending: number;
  oldestSeconds: number;
}

export class EventOutbox {
  constructor(
    private readonly models: Pick<Models, 'Media' | 'Folder' | 'Event'>,
    private readonly options: { now?: () => Date } = {},
  ) {}

  private now(): Date {
    return this.options.now?.() ?? new Date();
  }

  /**
   * Promotes the events pending in these media records (by id), or in any
   * record whose oldest pending event is older than `before`: recorded here,
   * then pulled from the record. Answers how many were recorded.
   */
  async promoteMedia(which: Which, limit = 200): Promise<number> {
    const docs = await db(() =>
      this.models.Media.find(withPending(which)).limit(limit).lean().exec(),
    );
    let recorded = 0;
    for (const doc of docs) {
      const pending = doc.pendingEvents ?? [];
      recorded += await this.promote(pending, doc.organizationId, { media: mediaEventData(doc) });
      await db(() =>
        this.models.Media.updateOne({ id: doc.id }, pull(pending), { timestamps: false }).exec(),
      );
    }
    return recorded;
  }

  /**
   * The same for folders; a removed folder's document (kept only for its
   * event) goes once its events are recorded.
   */
  async promoteFolders(which: Which, limit = 200): Promise<number> {
    const docs = await db(() =>
      this.models.Folder.find(withPending(which)).limit(limit).lean().exec(),
    );
    let recorded = 0;
    for (const doc of docs) {
      const pending = doc.pendingEvents ?? [];
      const data = { folder: { id: doc.id, name: folderName(doc) } };
      recorded += await this.promote(pending, doc.organizationId, data);
      if (doc.removedAt) {
        await db(() =>
          this.models.Folder.deleteOne({ id: doc.id, removedAt: { $ne: null } }).exec(),
        );
      } else {
        await db(() =>
          this.models.Folder.updateOne({ id: doc.id }, pull(pending), { timestamps: false }).exec(),
        );
      }
    }
    return recorded;
  }

  /** Records events (each once: one already recorded is left as it is). */
  async record(events: DomainEvent[]): Promise<number> {
    return this.insertNew(events.map((e) => this.docOf(e)));
  }

  private async promote<T extends EventType>(
    pending: PendingEvent[],
    organizationId: number,
    data: EventMap[T],
  ): Promise<number> {
    return this.insertNew(
      pending.map((e) =>
        this.docOf({ id: e.id, type: e.type, organizationId, occurredAt: e.at, data }),
      ),
    );
  }

  private docOf(e: DomainEvent): Omit<EventDoc, 'createdAt'> {
    return {
      _id: e.id,
      type: e.type,
      organizationId: e.organizationId,
      occurredAt: e.occurredAt,
      data: e.data,
      dispatchedAt: null,
      lockedUntil: null,
      claim: null,
    };
  }

  /** Inserts what is not recorded yet; answers how many were new. */
  private async insertNew(docs: Omit<EventDoc, 'createdAt'>[]): Promise<number> {
    if (docs.length === 0) return 0;
    try {
      const written = await db(() => this.models.Event.insertMany(docs, { ordered: false }));
      return written.length;
    } catch (err) {
      // Recorded before (a promotion repeated after a crash): those stay as they are.
      const writeErrors = (err as { writeErrors?: unknown[] }).writeErrors;
      const inserted = (err as { insertedDocs?: unknown[] }).insertedDocs;
      if (isDuplicateKey(err) || (writeErrors?.length && writeErrors.every(isDuplicateKey))) {
        return inserted?.length ?? 0;
      }
      throw err;
    }
  }

  /**
   * Takes up to `limit` undispatched events, oldest first, for `lockMs`
   * (another dispatcher skips them meanwhile; a claim that lapses is taken
   * again). Three statements whatever the batch: the oldest free ids read,
   * those still free marked with this claim's token and lock (each one's
   * update checks it is still free, so two dispatchers never both take one),
   * then the ones marked with the token read back.
   */
  async claim(limit: number, lockMs: number): Promise<DomainEvent[]> {
    const now = this.now();
    const free = {
      dispatchedAt: null,
      $or: [{ lockedUntil: null }, { lockedUntil: { $lte: now } }],
    };
    const candidates = await db(() =>
      this.models.Event.find(free, { _id: 1 }).sort({ occurredAt: 1 }).limit(limit).lean().exec(),
    );
    if (candidates.length === 0) return [];
    const ids = candidates.map((d) => d._id);
    const token = randomUUID();
    await db(() =>
      this.models.Event.updateMany(
        { _id: { $in: ids }, ...free },
        { $set: { lockedUntil: new Date(now.getTime() + lockMs), claim: token } },
      ).exec(),
    );
    const docs = await db(() =>
      this.models.Event.find({ _id: { $in: ids }, claim: token })
        .sort({ occurredAt: 1 })
        .lean()
        .exec(),
    );
    return docs.map(eventOf);
  }

  /** Every listener of these events has its delivery queued (or made: a fan-out). */
  async dispatched(ids: string[]): Promise<void> {
    if (ids.length === 0) return;
    await db(() =>
      this.models.Event.updateMany(
        { _id: { $in: ids } },
        { $set: { dispatchedAt: this.now(), lockedUntil: null, claim: null } },
      ).exec(),
    );
  }

  /** Gives claimed events back (their dispatch failed: another try takes them). */
  async unclaim(ids: string[]): Promise<void> {
    if (ids.length === 0) return;
    await db(() =>
      this.models.Event.updateMany(
        { _id: { $in: ids } },
        { $set: { lockedUntil: null, claim: null } },
      ).exec(),
    );
  }

  async get(id: string): Promise<DomainEvent | null> {
    const doc = await db(() => this.models.Event.findById(id).lean().exec());
    return doc ? eventOf(doc) : null;
  }

  /** Which of these event ids are recorded. */
  async recordedIds(ids: string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const docs = await db(() =>
      this.models.Event.find({ _id: { $in: ids } }, { _id: 1 })
        .lean()
        .exec(),
    );
    return new Set(docs.map((d) => d._id));
  }

  /**
   * Events not dispatched yet (recorded, or pending in a document), and the
   * oldest one's age: three aggregations, one per collection.
   */
  async stats(): Promise<OutboxStats> {
    type Summary = { n: number; oldest: Date | null }[];
    const summarise = (field: string, unwind: boolean) => [
      ...(unwind ? [{ $unwind: '$pendingEvents' }] : []),
      { $group: { _id: null, n: { $sum: 1 }, oldest: { $min: field } } },
    ];
    const pendingInDocs = { 'pendingEvents.0': { $exists: true } };
    const [recorded, media, folders] = await Promise.all([
      db(() =>
        this.models.Event.aggregate<Summary[number]>([
          { $match: { dispatchedAt: null } },
          ...summarise('$occurredAt', false),
        ]).exec(),
      ),
      db(() =>
        this.models.Media.aggregate<Summary[number]>([
          { $match: pendingInDocs },
          ...summarise('$pendingEvents.at', true),
        ]).exec(),
      ),
      db(() =>
        this.models.Folder.aggregate<Summary[number]>([
          { $match: pendingInDocs },
          ...summarise('$pendingEvents.at', true),
        ]).exec(),
      ),
    ]);
    const all = [...recorded, ...media, ...folders];
    const oldest = all.flatMap((s) => (s.oldest ? [new Date(s.oldest).getTime()] : []));
    return {
      pending: all.reduce((n, s) => n + s.n, 0),
      oldestSeconds: oldest.length
        ? Math.max(0, (this.now().getTime() - Math.min(...oldest)) / 1000)
        : 0,
    };
  }
}

function eventOf(doc: EventDoc): DomainEvent {
  return {
    id: doc._id,
    type: doc.type,
    organizationId: doc.organizationId,
    occurredAt: doc.occurredAt,
    data: doc.data as unknown as DomainEvent['data'],
  };
}

/** A folder's name (a removed folder's document carries it before the separator). */
export function folderName(doc: Pick<FolderDoc, 'name'>): string {
  const at = doc.name.indexOf(REMOVED_NAME_SEPARATOR);
  return at < 0 ? doc.name : doc.name.slice(0, at);
}
