/**
 * 2. Upload memory: the API process's peak RSS while it streams one 1 GiB
 * file, and while it streams 8 files of 200 MiB at once.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CORPUS, MiB, type Benchmark } from '../lib/benchmark';
import { lines } from '../lib/charts';
import { uploadStream } from '../lib/http';
import { peakRss, resetPeakRss, rss, sampleRss } from '../lib/proc';
import { target, type BenchmarkResult, type Table, type Target } from '../lib/report';
import { stat } from '../lib/stats';

interface Scenario {
  name: string;
  files: number;
  mib: number;
  limit: number;
}

export const uploadMemory: Benchmark = {
  id: 'upload-memory',
  title: 'Upload memory',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const pid = stack.api.pid;
    const rounds = ctx.quick ? 1 : 3;
    const scenarios: Scenario[] = ctx.quick
      ? [
          { name: 'one 64 MiB file', files: 1, mib: 64, limit: 160 },
          { name: '4 × 16 MiB at once', files: 4, mib: 16, limit: 400 },
        ]
      : [
          { name: 'one 1 GiB file', files: 1, mib: 1024, limit: 160 },
          { name: '8 × 200 MiB at once', files: 8, mib: 200, limit: 400 },
        ];
    const block = randomBytes(MiB);
    block.set(readFileSync(join(CORPUS, 'images', 'Canon_40D.jpg')).subarray(0, 4096));
    const { partSize, uploadConcurrency } = stack.config.s3!;
    const partMiB = partSize / MiB;
    const partBuffers = uploadConcurrency + 1;

    const idle = rss(pid) / MiB;
    const table: Table = {
      columns: [
        { key: 'scenario', label: 'uploads' },
        { key: 'peak', label: 'API peak RSS, MiB', digits: 0 },
        { key: 'growth', label: 'over RSS before, MiB', digits: 0 },
        { key: 'rate', label: 'MiB/s (all files)', digits: 0 },
      ],
      rows: [],
    };
    const targets: Target[] = [];
    const traces: { x: number; y: number; series: string }[] = [];
    for (const s of scenarios) {
      const peaks: number[] = [];
      const growth: number[] = [];
      const rates: number[] = [];
      for (let r = 0; r < rounds; r++) {
        ctx.log(`upload memory: ${s.name}, round ${r + 1}/${rounds}`);
        const before = rss(pid) / MiB;
        resetPeakRss(pid);
        const stop = sampleRss(pid, 100);
        const t = performance.now();
        await Promise.all(
          Array.from({ length: s.files }, () =>
            uploadStream(stack.url, stack.token, s.mib * MiB, block),
          ),
        );
        const seconds = (performance.now() - t) / 1000;
        const samples = stop();
        const peak = peakRss(pid) / MiB;
        peaks.push(peak);
        growth.push(peak - before);
        rates.push((s.files * s.mib) / seconds);
        if (r === 0)
          for (const p of samples) traces.push({ x: p.ms / 1000, y: p.mib, series: s.name });
        await stack.clear();
      }
      const peak = stat(peaks);
      table.rows.push({ scenario: s.name, peak, growth: stat(growth), rate: stat(rates) });
      const grew = stat(growth).median;
      targets.push(
        target(`${s.name}: API peak RSS`, peak, '<=', s.limit, 'MiB', {
          digits: 0,
          why: `The peak is the API's resident set before a round plus what the uploads added:
${idle.toFixed(0)} MiB before the benchmark's first upload (V8's heap, the modules, and whatever ran
before in the same process left with it: the part buffer pool, what glibc keeps),
and a median of ${grew.toFixed(0)} MiB over the RSS before each round, where the uploads' part
buffers are at most ${(s.files * partBuffers * partMiB).toFixed(0)} MiB (${s.files} upload(s) × ${partBuffers} buffers of ${partMiB} MiB). Memory per
upload stays bounded whatever the file's size; what the bound leaves for the
process itself is what it misses by.`,
        }),
      );
    }

    return {
      id: this.id,
      title: this.title,
      method: `
The API process's resident set is read from \`/proc/<pid>/status\`: its
high-water mark (VmHWM) is reset before each round (\`echo 5 >
/proc/<pid>/clear_refs\`) and read after the last upload of the round
finished; RSS is also sampled every 100 ms for the chart (first round).
${rounds} round(s) per scenario; idle RSS before the first upload:
${idle.toFixed(0)} MiB. The API streams each file in parts of
${partSize / MiB} MiB (\`S3_PART_SIZE\`) with ${uploadConcurrency}
(\`S3_UPLOAD_CONCURRENCY\`) uploading while the next fills, so one upload holds
at most ${uploadConcurrency + 1} part buffers
(${((uploadConcurrency + 1) * partSize) / MiB} MiB) whatever the file's size.`,
      tables: [table],
      charts: [
        {
          id: 'upload-memory',
          title: 'API RSS while uploading',
          spec: lines({
            title: 'API RSS during the upload (first round)',
            data: traces,
            xTitle: 'seconds',
            yTitle: 'RSS, MiB',
            rules: scenarios.map((s) => ({ y: s.limit, label: `target for ${s.name}` })),
          }),
        },
      ],
      targets,
    };
  },
};
