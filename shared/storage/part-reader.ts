/**
 * The part reader of a streaming multipart upload: cuts a body stream into
 * parts of exactly the part size. A small body costs only its own bytes; the
 * parts of a large one are filled into pooled buffers (buffer-pool.ts).
 */
import type { Readable } from 'node:stream';
import { streamed } from '../gc-pacer';
import type { BufferPool } from './buffer-pool';

export interface Part {
  data: Buffer;
  /** Nothing follows this part. */
  done: boolean;
  /** Hands the part's buffer back (once its upload is over). */
  release(): void;
}

/** Bodies up to this size are kept as their own chunks (no pooled part buffer). */
const SMALL_BODY = 1024 * 1024;

/**
 * Cuts a stream into parts of exactly `size` bytes (the last one shorter).
 * The first part is collected as the stream's own chunks, so a small file
 * costs only its own bytes; once a body is known to need several parts, each
 * part is copied into a pooled buffer as its chunks arrive.
 */
export class PartReader {
  private readonly iterator: AsyncIterator<unknown>;
  private carry: Buffer | undefined;
  private ended = false;
  private first = true;
  private readonly held = new Set<Buffer>();

  constructor(
    body: Readable,
    private readonly size: number,
    private readonly pool: BufferPool,
  ) {
    this.iterator = body[Symbol.asyncIterator]();
  }

  private async read(): Promise<Buffer | undefined> {
    if (this.carry) {
      const carry = this.carry;
      this.carry = undefined;
      return carry;
    }
    if (this.ended) return undefined;
    const result = await this.iterator.next();
    if (result.done) {
      this.ended = true;
      return undefined;
    }
    const chunk = Buffer.isBuffer(result.value)
      ? result.value
      : Buffer.from(result.value as Uint8Array);
    streamed(chunk.length);
    return chunk;
  }

  /** The next part; `done` when nothing follows it. */
  async next(): Promise<Part> {
    return this.first ? this.firstPart() : this.pooledPart();
  }

  private async firstPart(): Promise<Part> {
    this.first = false;
    // Small files are collected as their own chunks (they cost only their size);
    // past SMALL_BODY bytes the body moves into a pooled part buffer.
    const chunks: Buffer[] = [];
    let length = 0;
    const threshold = Math.min(SMALL_BODY, this.size);
    while (length < threshold) {
      const chunk = await this.read();
      if (!chunk) {
        return { data: Buffer.concat(chunks, length), done: true, release: () => undefined };
      }
      chunks.push(chunk);
      length += chunk.length;
    }
    const buffer = this.acquire();
    let offset = 0;
    for (const chunk of chunks) offset = this.copyInto(buffer, offset, chunk);
    return this.fill(buffer, offset);
  }

  private pooledPart(): Promise<Part> {
    return this.fill(this.acquire(), 0);
  }

  /** Reads into `buffer` from `offset` until it is full or the body ends. */
  private async fill(buffer: Buffer, start: number): Promise<Part> {
    let offset = start;
    while (offset < this.size) {
      const chunk = await this.read();
      if (!chunk) break;
      offset = this.copyInto(buffer, offset, chunk);
    }
    return this.part(buffer, offset);
  }

  /** Copies what fits of `chunk`; the rest is carried to the next part. */
  private copyInto(buffer: Buffer, offset: number, chunk: Buffer): number {
    const n = Math.min(chunk.length, this.size - offset);
    chunk.copy(buffer, offset, 0, n);
    if (n < chunk.length) this.carry = chunk.subarray(n);
    return offset + n;
  }

  private part(buffer: Buffer, length: number): Part {
    let released = false;
    return {
      data: buffer.subarray(0, length),
      done: this.ended && !this.carry,
      release: () => {
        if (released) return;
        released = true;
        this.held.delete(buffer);
        this.pool.release(buffer);
      },
    };
  }

  private acquire(): Buffer {
    const buffer = this.pool.acquire();
    this.held.add(buffer);
    return buffer;
  }

  /** After a failure: buffers still held go back to the pool. */
  dispose(): void {
    for (const buffer of this.held) this.pool.release(buffer);
    this.held.clear();
  }
}
