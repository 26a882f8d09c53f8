/**
 * The operator's backfill of image placeholders (`thumbhash:backfill`): every
 * live image record without a `thumbhash` (made before the listener existed,
 * or whose delivery failed for good) gets one, computed as the listener does
 * (worker/listeners/thumbhash.listener.ts, the image adapter's `thumbhash`).
 * Records are taken by id, a page at a time; an image that cannot be read is
 * reported and skipped, the others go on.
 */
import type { Readable } from 'node:stream';
import { Errors } from '@shared/errors';
import type { MediaRepository } from '@shared/repositories/media.repository';
import type { ObjectStore } from '@shared/storage/object-store';

export interface ThumbhashBackfillReport {
  /** Records that got their placeholder. */
  filled: number;
  /** Records left without one, with why. */
  failed: { id: number; key: string; message: string }[];
}

const PAGE = 100;

export class ThumbhashBackfillService {
  constructor(
    private readonly deps: {
      media: Pick<MediaRepository, 'imagesWithoutThumbhash' | 'setThumbhash'>;
      store: Pick<ObjectStore, 'get'>;
      /** The image adapter's placeholder of an image's bytes (base64). */
      thumbhash(input: Buffer): Promise<string>;
      /** The largest object read (MAX_FILE_SIZE). */
      maxBytes: number;
    },
  ) {}

  async run(options: {
    organizationId: number | null;
    /** At most this many records looked at (default all). */
    limit?: number;
  }): Promise<ThumbhashBackfillReport> {
    const report: ThumbhashBackfillReport = { filled: 0, failed: [] };
    const limit = options.limit ?? Infinity;
    let afterId = 0;
    let seen = 0;
    while (seen < limit) {
      const page = await this.deps.media.imagesWithoutThumbhash(
        afterId,
        Math.min(PAGE, limit - seen),
        options.organizationId,
      );
      if (page.length === 0) break;
      for (const record of page) {
        seen++;
        afterId = record.id;
        try {
          const input = await this.read(record.key);
          await this.deps.media.setThumbhash(record.id, await this.deps.thumbhash(input));
          report.filled++;
        } catch (err) {
          const message = err instanceof Error ? err.message : String(err);
          report.failed.push({ id: record.id, key: record.key, message });
        }
      }
    }
    return report;
  }

  private async read(key: string): Promise<Buffer> {
    const stream: Readable = await this.deps.store.get(key);
    const chunks: Buffer[] = [];
    let length = 0;
    for await (const chunk of stream) {
      length += (chunk as Buffer).length;
      if (length > this.deps.maxBytes) {
        stream.destroy();
        throw Errors.fileTooLarge(this.deps.maxBytes, key);
      }
      chunks.push(chunk as Buffer);
    }
    return Buffer.concat(chunks);
  }
}
