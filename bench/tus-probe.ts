/**
 * A probe of a resumable upload's PATCHes, for docs/resumable-uploads.md
 * ("Throughput"): the API from `dist/` (run `npm run build` first) on the
 * benchmark's services; one file of `--mib` MiB through tus-js-client in
 * PATCHes of `--chunk` MiB, beside `POST /media/upload`, alternating, and
 * per upload: the PATCHes' wall time, and how many parts went to the store
 * as they came (`streamPart`) or after (`putPart`), from the API's metrics.
 *
 *   npx tsx bench/tus-probe.ts [--mib 100] [--chunk 8] [--rounds 3] [--parallel 1]
 *       [--env NAME=VALUE ...]
 */
import { parseArgs } from 'node:util';
import * as tus from 'tus-js-client';
import { jpegLikeBlock, MiB } from './lib/benchmark';
import { uploadStream } from './lib/http';
import { Stack } from './lib/stack';
import { stat } from './lib/stats';
import { runBenchmark, startServices } from './services';

const print = (line: string) => process.stdout.write(`${line}\n`);
const { values } = parseArgs({
  options: {
    mib: { type: 'string', default: '100' },
    chunk: { type: 'string', default: '8' },
    rounds: { type: 'string', default: '3' },
    parallel: { type: 'string', default: '1' },
    env: { type: 'string', multiple: true, default: [] },
  },
});

runBenchmark(async () => {
  const size = Number(values.mib) * MiB;
  const apiEnv = Object.fromEntries(
    values.env.map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
  );
  const services = await startServices();
  const stack = await Stack.start(services, 'dist', { LOG_LEVEL: 'warn', ...apiEnv });
  try {
    const block = jpegLikeBlock();
    const data = Buffer.concat(Array.from({ length: size / MiB }, () => block));
    const count = async (operation: string) => {
      const text = await (await fetch(`${stack.url}/metrics`)).text();
      const m = new RegExp(
        `^media_dependency_duration_seconds_(count|sum)\\{dependency="storage",operation="${operation}"\\} (\\S+)`,
        'gm',
      );
      const out = { count: 0, sum: 0 };
      for (const hit of text.matchAll(m)) out[hit[1] as 'count' | 'sum'] = Number(hit[2]);
      return out;
    };
    /** Each request's wall time, by method, in the last tus upload. */
    let requests: { method: string; ms: number }[] = [];
    const viaTus = () =>
      new Promise<void>((resolve, reject) => {
        requests = [];
        const started = new Map<unknown, number>();
        const upload = new tus.Upload(data, {
          onBeforeRequest: (req) => void started.set(req, performance.now()),
          onAfterResponse: (req) =>
            void requests.push({
              method: req.getMethod(),
              ms: performance.now() - started.get(req)!,
            }),
          endpoint: `${stack.url}/media/upload/resumable`,
          headers: { Authorization: `Bearer ${stack.token}` },
          metadata: { filename: 'probe.jpg', filetype: 'image/jpeg' },
          chunkSize: Number(values.chunk) * MiB,
          ...(Number(values.parallel) > 1 ? { parallelUploads: Number(values.parallel) } : {}),
          retryDelays: [],
          onError: reject,
          onSuccess: () => resolve(),
        });
        upload.start();
      });
    const times = { post: [] as number[], tus: [] as number[] };
    for (let r = 0; r < Number(values.rounds) + 1; r++) {
      const before = { stream: await count('streamPart'), put: await count('putPart') };
      let t = performance.now();
      await viaTus();
      const tusMs = performance.now() - t;
      const after = { stream: await count('streamPart'), put: await count('putPart') };
      t = performance.now();
      await uploadStream(stack.url, stack.token, size, block);
      const postMs = performance.now() - t;
      if (r === 0) continue; // warm-up
      times.tus.push(tusMs);
      times.post.push(postMs);
      const per = (a: { count: number; sum: number }, b: { count: number; sum: number }) =>
        `${b.count - a.count} parts, ${(((b.sum - a.sum) / Math.max(1, b.count - a.count)) * 1000).toFixed(1)} ms each`;
      const patches = requests.filter((q) => q.method === 'PATCH').map((q) => q.ms);
      const others = requests.filter((q) => q.method !== 'PATCH');
      print(
        `  PATCH ms: ${patches.map((m) => m.toFixed(0)).join(' ')}; ` +
          others.map((q) => `${q.method} ${q.ms.toFixed(0)} ms`).join(', '),
      );
      print(
        `round ${r}: tus ${tusMs.toFixed(0)} ms, POST ${postMs.toFixed(0)} ms, ratio ${(postMs / tusMs).toFixed(3)}; ` +
          `streamed ${per(before.stream, after.stream)}; put ${per(before.put, after.put)}`,
      );
    }
    const ratio = stat(times.post.map((p, i) => p / times.tus[i]!));
    print(
      `tus ÷ POST: ${ratio.median.toFixed(3)} (${ratio.min.toFixed(3)}–${ratio.max.toFixed(3)})`,
    );
  } finally {
    await stack.stop();
    await services.stop();
  }
});
