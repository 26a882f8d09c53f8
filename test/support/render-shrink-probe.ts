/**
 * Run by test/unit/render-shrink.test.ts in a process of its own (so no other
 * test's leftover work counts in its CPU time): prints the rendered size and
 * the CPU time of a 400 px render of a 12 MP JPEG against a full decode of it,
 * each the median of three runs, as one JSON line.
 */
import sharp from 'sharp';
import { HeicThreadPool } from '../../worker/image/heic-pool';
import { renderImage } from '../../worker/image/render';
import { configureSharp } from '../../worker/image/sharp';
import { corpusFile } from './files';

const PHOTO = corpusFile('images/tests-42_IndexError.jpg'); // 4032 × 3024, 12.2 MP
const BOUNDS = { maxInputPixels: 100_000_000, maxOutputPixels: { gif: Infinity, avif: Infinity } };

async function cpuMs(work: () => Promise<unknown>): Promise<number> {
  const runs: number[] = [];
  for (let i = 0; i < 3; i++) {
    const before = process.cpuUsage();
    await work();
    const used = process.cpuUsage(before);
    runs.push((used.user + used.system) / 1000);
  }
  return runs.sort((a, b) => a - b)[1]!;
}

async function main(): Promise<void> {
  configureSharp();
  const options = {
    width: 400,
    height: null,
    fit: 'cover',
    format: 'webp',
    quality: null,
    keepMetadata: false,
  } as const;
  const heic = new HeicThreadPool(1); // a JPEG: no thread is started
  const out = await renderImage(PHOTO, options, BOUNDS, heic);
  const decode = await cpuMs(() => sharp(PHOTO).raw().toBuffer());
  const render = await cpuMs(() => renderImage(PHOTO, options, BOUNDS, heic));
  process.stdout.write(
    `${JSON.stringify({ width: out.width, height: out.height, decode, render })}\n`,
  );
}

void main();
