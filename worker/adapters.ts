/** The worker's image and PDF adapters, tuned once from the configuration. */
import type { Config } from '@shared/config';
import type { Logger } from '@shared/logger';
import { configureSharp, ImageAdapter } from './image/image.adapter';
import { mergePdfs } from './pdf/pdf.adapter';
import type { ImageOps, PdfOps } from './context';

export function createAdapters(
  config: Config,
  logger: Logger,
): {
  images: ImageOps;
  pdfs: PdfOps;
  /** HEIC decoding threads alive (one ends when its job's time runs out). */
  heicThreads(): number;
  /** HEIC decodes that ran to their end (the ones a job's time limit stopped are not counted). */
  heicDecodesAnswered(): number;
  close(): Promise<void>;
} {
  configureSharp();
  const images = new ImageAdapter({
    maxInputPixels: config.limits.maxInputPixels,
    maxOutputPixels: config.limits.maxOutputPixels,
    // One decoding thread per image job that can run at once.
    heicThreads: config.worker.concurrency.image,
    maxPagePixels: config.render.maxWidth * config.render.maxHeight,
  });
  return {
    close: () => images.close(),
    heicThreads: () => images.heicThreads,
    heicDecodesAnswered: () => images.heicDecodesAnswered,
    images: {
      readMetadata: async (input) => ({ ...(await images.readMetadata(input)) }),
      readPdfInfo: (input, time) => images.readPdfInfo(input, time),
      convert: async (input, format, options) => {
        const out = await images.convert(input, format, options);
        return { data: out.data, mime: out.mime, ext: out.ext };
      },
      render: (input, options, time) => images.render(input, options, time),
      thumbhash: (input, time) => images.thumbhash(input, time),
    },
    pdfs: {
      merge: (inputs) =>
        mergePdfs(
          inputs,
          { maxInputBytes: config.limits.maxMergeBytes },
          { logger: logger.child({ component: 'pdf' }) },
        ),
    },
  };
}
