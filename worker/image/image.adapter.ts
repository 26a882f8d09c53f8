/**
 * The image adapter as the worker uses it: reads metadata and converts images
 * with sharp, HEIC decoded with libheif-js. It knows nothing of HTTP or queues
 * and reports every failure as an `AppError`:
 *
 *  - 415 UNSUPPORTED_MEDIA_TYPE: the bytes are not an image type the service
 *    accepts (a PDF, text, SVG, an empty buffer).
 *  - 422 UNREADABLE_MEDIA: an accepted type that cannot be read: damaged header,
 *    corrupt or truncated pixel data, undecodable HEIC, or more pixels than
 *    `maxInputPixels` (refused from the header, before any pixel is decoded).
 *  - 400 VALIDATION_FAILED: an unknown target format or a quality outside 1-100.
 *
 * Its parts: metadata (metadata.ts), conversion and the encoders (convert.ts),
 * renders: resized variants (render.ts),
 * HEIC decoding (heic.ts, on threads: heic-pool.ts) and the TIFF it hands sharp (tiff.ts), and sharp's
 * tuning and error mapping (sharp.ts).
 */
import type { ConvertFormat } from '@shared/media/formats';
import type { RenderOptions } from '@shared/media/render-options';
import { convertImage, type ConvertResult } from './convert';
import { HeicThreadPool } from './heic-pool';
import { readMetadata, type ImageMetadata } from './metadata';
import { renderImage, type RenderResult } from './render';
import { ensureSharpConfigured } from './sharp';

export { FORMAT_EXT, FORMAT_MIME, type ConvertResult } from './convert';
export type { ImageMetadata } from './metadata';
export type { RenderResult } from './render';
export { configureSharp } from './sharp';

export interface ImageAdapterOptions {
  /** Largest width × height decoded (sharp `limitInputPixels`); config `limits.maxInputPixels`. */
  maxInputPixels: number;
  /** HEICs decoded at once, each on its own thread (the image queue's concurrency); default 1. */
  heicThreads?: number;
}

export class ImageAdapter {
  private readonly maxInputPixels: number;
  private readonly heic: HeicThreadPool;

  constructor(options: ImageAdapterOptions) {
    if (!Number.isInteger(options.maxInputPixels) || options.maxInputPixels < 1) {
      throw new TypeError('maxInputPixels must be a positive integer');
    }
    this.maxInputPixels = options.maxInputPixels;
    this.heic = new HeicThreadPool(options.heicThreads ?? 1);
    ensureSharpConfigured();
  }

  /** HEIC decoding threads running (started on the first HEIC decoded, not for metadata). */
  get heicThreads(): number {
    return this.heic.threadCount;
  }

  /** Ends the HEIC decoding threads (a decode after this fails). */
  close(): Promise<void> {
    return this.heic.close();
  }

  /** What sharp reads from the image's header (no pixels are decoded). */
  readMetadata(input: Buffer): Promise<ImageMetadata> {
    return readMetadata(input, this.maxInputPixels);
  }

  /** Converts to `target`, auto-oriented; see `ENCODERS` in convert.ts for what `quality` does. */
  convert(
    input: Buffer,
    target: ConvertFormat,
    options: { quality?: number; timeoutMs?: number } = {},
  ): Promise<ConvertResult> {
    return convertImage(input, target, options, this.maxInputPixels, this.heic);
  }

  /** Resizes and encodes a variant (GET /media/render); see render.ts. */
  render(input: Buffer, options: RenderOptions): Promise<RenderResult> {
    return renderImage(input, options, this.maxInputPixels, this.heic);
  }
}
