// Server-side cursors: a find or aggregate materialises its result, answers the
// first batch and keeps the rest here for getMore, under a random 64-bit id.
// An exhausted cursor answers id 0 and is forgotten; idle cursors are reaped
// after 10 minutes, as MongoDB does (checked whenever cursors are touched, so
// no timer keeps the process alive).

import { randomBytes } from 'node:crypto';

import { BSON, Long } from 'bson';

import type { Doc } from './bson-values';
import { MongoCommandError } from './command-errors';

/** MongoDB's default size of a find's first batch. */
export const DEFAULT_FIRST_BATCH_SIZE = 101;
/** A batch stops growing at this many bytes (MongoDB caps replies at 16 MB). */
const MAX_BATCH_BYTES = 16 * 1024 * 1024 - 16 * 1024;
const DEFAULT_IDLE_TIMEOUT_MS = 10 * 60 * 1000;

interface OpenCursor {
  id: bigint;
  ns: string;
  docs: Doc[];
  position: number;
  lastUsed: number;
}

export interface CursorBatch {
  /** Long(0) when the cursor is exhausted or closed. */
  id: Long;
  ns: string;
  batch: Doc[];
}

function takeBatch(docs: readonly Doc[], start: number, maxCount: number): Doc[] {
  const batch: Doc[] = [];
  let bytes = 0;
  for (let i = start; i < docs.length && batch.length < maxCount; i++) {
    const doc = docs[i]!;
    bytes += BSON.calculateObjectSize(doc);
    if (batch.length > 0 && bytes > MAX_BATCH_BYTES) break;
    batch.push(doc);
  }
  return batch;
}

export class CursorRegistry {
  private readonly cursors = new Map<bigint, OpenCursor>();

  constructor(private readonly idleTimeoutMs = DEFAULT_IDLE_TIMEOUT_MS) {}

  get openCount(): number {
    return this.cursors.size;
  }

  /**
   * Answers the first batch of a result. `batchSize` undefined means MongoDB's
   * default (101); 0 answers an empty first batch. `singleBatch` closes the
   * cursor after the first batch.
   */
  open(ns: string, docs: Doc[], batchSize: number | undefined, singleBatch: boolean): CursorBatch {
    this.reap();
    const size = batchSize === undefined ? DEFAULT_FIRST_BATCH_SIZE : batchSize;
    const batch = size === 0 ? [] : takeBatch(docs, 0, size);
    if (singleBatch || batch.length >= docs.length) {
      return { id: Long.ZERO, ns, batch };
    }
    const id = this.newId();
    this.cursors.set(id, { id, ns, docs, position: batch.length, lastUsed: Date.now() });
    return { id: Long.fromBigInt(id), ns, batch };
  }

  /** The next batch of an open cursor (`batchSize` undefined: as much as fits). */
  getMore(id: Long, ns: string, batchSize: number | undefined): CursorBatch {
    this.reap();
    const key = id.toBigInt();
    const cursor = this.cursors.get(key);
    if (!cursor)
      throw new MongoCommandError('CursorNotFound', `cursor id ${id.toString()} not found`);
    if (cursor.ns !== ns) {
      throw new MongoCommandError(
        'Unauthorized',
        `Requested getMore on namespace '${ns}', but cursor belongs to a different namespace ${cursor.ns}`,
      );
    }
    const max = batchSize && batchSize > 0 ? batchSize : Infinity;
    const batch = takeBatch(cursor.docs, cursor.position, max);
    cursor.position += batch.length;
    cursor.lastUsed = Date.now();
    if (cursor.position >= cursor.docs.length) {
      this.cursors.delete(key);
      return { id: Long.ZERO, ns, batch };
    }
    return { id, ns, batch };
  }

  /** Kills cursors; answers which ids were killed and which were unknown. */
  kill(ids: readonly Long[]): { killed: Long[]; notFound: Long[] } {
    const killed: Long[] = [];
    const notFound: Long[] = [];
    for (const id of ids) {
      if (this.cursors.delete(id.toBigInt())) killed.push(id);
      else notFound.push(id);
    }
    return { killed, notFound };
  }

  clear(): void {
    this.cursors.clear();
  }

  private newId(): bigint {
    for (;;) {
      const id = randomBytes(8).readBigUInt64LE() & 0x7fff_ffff_ffff_ffffn;
      if (id !== 0n && !this.cursors.has(id)) return id;
    }
  }

  private reap(): void {
    const cutoff = Date.now() - this.idleTimeoutMs;
    for (const [id, cursor] of this.cursors) if (cursor.lastUsed < cutoff) this.cursors.delete(id);
  }
}
