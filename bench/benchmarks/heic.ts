/**
 * 10. HEIC decoding and the worker's event loop: the
 * event loop's longest delay while an 8.5 MP HEIC converts to JPEG, with the
 * decode on the event loop (as before) and on the image adapter's decoding
 * threads (as the worker does now), side by side, round by round.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import sharp from 'sharp';
import { CORPUS, type Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import { target, type BenchmarkResult, type Table } from '../lib/report';
import { stat } from '../lib/stats';
import { decodeHeic } from '../../worker/image/heic';
import { ImageAdapter } from '../../worker/image/image.adapter';
import { configureSharp } from '../../worker/image/sharp';

const FILE = 'heic-IMG_5195.HEIC'; // 2,566 × 3,313 (8.5 MP), iPhone

/** The longest event-loop delay (ms) while `work` runs, and its wall time (ms). */
async function observe(work: () => Promise<unknown>): Promise<{ delay: number; ms: number }> {
  const h = monitorEventLoopDelay({ resolution: 5 });
  h.enable();
  // The monitor records the gap between two of its ticks: let it tick before the work
  // starts, or a block right away would only delay its first tick, which it does not record.
  await new Promise((resolve) => setTimeout(resolve, 25));
  const started = performance.now();
  await work();
  const ms = performance.now() - started;
  h.disable();
  return { delay: h.max / 1e6, ms };
}

export const heic: Benchmark = {
  id: 'heic',
  title: 'HEIC decoding and the event loop',
  async run(ctx): Promise<BenchmarkResult> {
    configureSharp();
    const rounds = ctx.quick ? 1 : 5;
    const input = readFileSync(join(CORPUS, 'images', FILE));
    const meta = await sharp(input).metadata();
    const adapter = new ImageAdapter({ maxInputPixels: 100_000_000 });
    // Before: decoded on the calling thread, then converted by sharp (what convert did).
    const onLoop = async () =>
      sharp(decodeHeic(input, meta.icc), { limitInputPixels: false }).jpeg().toBuffer();
    const onThreads = () => adapter.convert(input, 'jpeg');
    try {
      // Warm both (the decoder's first load, sharp's first JPEG).
      await onLoop();
      await onThreads();
      const loop = { delay: [] as number[], ms: [] as number[] };
      const threads = { delay: [] as number[], ms: [] as number[] };
      for (let r = 0; r < rounds; r++) {
        ctx.log(`heic: round ${r + 1}/${rounds}`);
        const a = await observe(onLoop);
        const b = await observe(onThreads);
        loop.delay.push(a.delay);
        loop.ms.push(a.ms);
        threads.delay.push(b.delay);
        threads.ms.push(b.ms);
      }
      const table: Table = {
        columns: [
          { key: 'where', label: 'HEIC decoded' },
          { key: 'delay', label: 'event loop, longest delay, ms', digits: 1 },
          { key: 'ms', label: 'convert to JPEG, ms', digits: 0 },
        ],
        rows: [
          { where: 'on the event loop (before)', delay: stat(loop.delay), ms: stat(loop.ms) },
          { where: 'on a decoding thread (now)', delay: stat(threads.delay), ms: stat(threads.ms) },
        ],
      };
      return {
        id: this.id,
        title: this.title,
        method: `
\`${FILE}\` (${meta.width} × ${meta.height}, ${(input.length / 1024 / 1024).toFixed(1)} MiB)
converted to JPEG ${rounds} time(s) each way, alternating, in the benchmark's
own process: decoded with libheif-js on the event loop and handed to sharp
(what the worker did before), and through the worker's image adapter, which
decodes on a thread of its own (worker/image/heic-pool.ts). The event loop's
delay is sampled every 5 ms (\`monitorEventLoopDelay\`); the table gives the
longest delay seen during each conversion. A decode costs about 0.1 s per
megapixel, so at the pixel limit (100 MP) a decode on the event loop would
hold it for about 10 s; on a thread the delay does not grow with the image.`,
        tables: [table],
        charts: [
          {
            id: 'heic',
            title: 'Event-loop delay during a HEIC conversion',
            spec: bars({
              title: 'Longest event-loop delay while an 8.5 MP HEIC converts (median, min–max)',
              data: [
                { group: 'on the event loop', series: 'delay', ...stat(loop.delay) },
                { group: 'on a decoding thread', series: 'delay', ...stat(threads.delay) },
              ],
              yTitle: 'ms',
            }),
          },
        ],
        targets: [
          target(
            'Event loop, longest delay during a HEIC decode',
            stat(threads.delay),
            '<=',
            50,
            'ms',
          ),
        ],
      };
    } finally {
      await adapter.close();
    }
  },
};
