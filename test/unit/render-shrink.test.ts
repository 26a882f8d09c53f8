/**
 * The render pipeline (worker/image/render.ts) lets libvips shrink a JPEG on
 * load: a 400 px render of a 12 MP photo takes far less CPU than decoding
 * the photo whole. Measured in CPU time of this process (libvips' thread
 * included), not wall time, and as a ratio in the same run, so a loaded
 * machine does not change the outcome. A `rotate()` or an `extract()` put
 * before the resize forces a full decode and fails it.
 */
import sharp from 'sharp';
import { renderImage } from '../../worker/image/render';
import { configureSharp } from '../../worker/image/sharp';
import { corpusFile } from '../support/files';

const PHOTO = corpusFile('images/tests-42_IndexError.jpg'); // 4032 × 3024, 12.2 MP

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

it('renders a 12 MP JPEG to 400 px with a fraction of the CPU a full decode takes', async () => {
  configureSharp();
  const options = {
    width: 400,
    height: null,
    fit: 'cover',
    format: 'webp',
    quality: null,
    keepMetadata: false,
  } as const;
  const out = await renderImage(PHOTO, options, 100_000_000);
  expect([out.width, out.height]).toEqual([400, 300]);

  const decode = await cpuMs(() => sharp(PHOTO).raw().toBuffer());
  const render = await cpuMs(() => renderImage(PHOTO, options, 100_000_000));
  // Shrunk on load: about a quarter here (55 ms against 200 ms); a full decode plus resize would be more than 1.
  expect(render / decode).toBeLessThan(0.6);
}, 60_000);
