/**
 * A request's uploaded job inputs in one temporary object (a merge's
 * uploaded PDFs): the form's file parts stream one after another into a
 * single upload under the organization's temporary prefix, and each input's
 * place in it (offset and length) is recorded; the job reads the object once
 * and slices it. One upload, one size check, one read and one removal,
 * however many parts the form has (each part was a PUT, a HEAD, a GET and a
 * removal of its own before: docs/performance.md, "Merges with uploaded
 * parts").
 *
 * Each part's type is decided from its first bytes before any of it joins
 * the bundle, and its size is metered as it flows. A part that fails fails
 * the bundle: the caller discards it (the store aborts the open upload, or
 * the object is removed once written).
 */
import { randomUUID } from 'node:crypto';
import { PassThrough, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Errors } from '@shared/errors';
import { DETECTION_BYTES, headThenRest, readHead, type MediaType } from '@shared/media/media-types';
import { safeDisplayName, temporaryPrefix } from '@shared/media/naming';
import type { ObjectStore } from '@shared/storage/object-store';

/** One input's place in the bundle. */
export interface BundledInput {
  name: string;
  type: MediaType;
  offset: number;
  length: number;
}

export class InputBundle {
  /** The temporary object's key: `<org>/.tmp/<uuid>.bundle`. */
  readonly key: string;
  private body: PassThrough | undefined;
  private upload: Promise<unknown> | undefined;
  private failure: unknown;
  private length = 0;
  private ended = false;
  /** Parts join one after another: the next one's offset is known once the last has ended. */
  private tail: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly deps: {
      store: Pick<ObjectStore, 'put' | 'remove'>;
      /** The part's type from its first bytes, if accepted (else it throws: 415, 400 when empty). */
      accept(
        head: Buffer,
        filename: string | undefined,
        types: readonly string[],
      ): Promise<MediaType>;
      maxFileSize: number;
    },
    orgSlug: string,
  ) {
    this.key = `${temporaryPrefix(orgSlug)}${randomUUID()}.bundle`;
  }

  /** Whether any input went in (else there is no object). */
  get used(): boolean {
    return this.body !== undefined;
  }

  /**
   * Appends a part, once its type is accepted and the parts before it are in;
   * `onBytes` sees every chunk's length as it flows, and what it throws stops
   * the part (and the bundle).
   */
  add(
    source: Readable,
    filename: string | undefined,
    acceptedTypes: readonly string[],
    onBytes?: (n: number) => void,
  ): Promise<BundledInput> {
    const added = this.tail.then(() => this.append(source, filename, acceptedTypes, onBytes));
    this.tail = added.catch(() => undefined);
    return added;
  }

  private async append(
    source: Readable,
    filename: string | undefined,
    acceptedTypes: readonly string[],
    onBytes?: (n: number) => void,
  ): Promise<BundledInput> {
    const iterator = source[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
    const head = await readHead(iterator, DETECTION_BYTES);
    const type = await this.deps.accept(head.bytes, filename, acceptedTypes);
    const name = safeDisplayName(filename);
    const { maxFileSize } = this.deps;
    let length = 0;
    const meter = (chunk: Buffer) => {
      length += chunk.length;
      if (length > maxFileSize) throw Errors.fileTooLarge(maxFileSize, name);
      onBytes?.(chunk.length);
      return chunk;
    };
    async function* chunks(): AsyncGenerator<Buffer> {
      for await (const chunk of headThenRest(head, iterator)) yield meter(chunk);
    }
    const offset = this.length;
    try {
      await pipeline(chunks(), this.open(), { end: false });
    } catch (err) {
      // The store's own failure says more than the destroyed stream it left.
      throw this.failure ?? err;
    }
    this.length += length;
    return { name, type, offset, length };
  }

  /** Completes the upload (the object exists once this resolves). */
  async finish(): Promise<void> {
    if (!this.body) return;
    this.ended = true;
    this.body.end();
    await this.upload;
  }

  /** Aborts the upload, or removes the object once written; never throws. */
  async discard(): Promise<void> {
    if (!this.body) return;
    if (!this.ended) this.body.destroy(new Error('the request failed'));
    const written = await this.upload!.then(
      () => true,
      () => false,
    );
    if (written) await this.deps.store.remove(this.key).catch(() => undefined);
  }

  private open(): PassThrough {
    if (!this.body) {
      this.body = new PassThrough();
      this.upload = this.deps.store.put(this.key, this.body, {
        contentType: 'application/octet-stream',
      });
      this.upload.catch((err: unknown) => (this.failure = err));
    }
    return this.body;
  }
}
