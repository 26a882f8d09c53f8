/**
 * 15. Resumable uploads: one file through tus-js-client (PATCHes of 8 MiB,
 * then 4 parallel partial uploads concatenated) beside the same file through
 * `POST /media/upload`, alternating which goes first in each round; then the
 * API's peak RSS while 8 resumable uploads of 200 MiB run at once.
 */
import * as tus from 'tus-js-client';
import { jpegLikeBlock, MiB, type Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import { uploadStream } from '../lib/http';
import { peakRss, resetPeakRss, rss } from '../lib/proc';
import { target, type BenchmarkResult, type Table } from '../lib/report';
import { ratios, stat } from '../lib/stats';

/** Uploads `data` with tus-js-client; resolves once the record is written (the Media-Key header seen). */
function tusUpload(url: string, token: string, data: Buffer, parallel: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let recorded = false;
    const upload = new tus.Upload(data, {
      endpoint: `${url}/media/upload/resumable`,
      headers: { Authorization: `Bearer ${token}` },
      metadata: { filename: 'bench.jpg' },
      chunkSize: 8 * MiB,
      retryDelays: [],
      ...(parallel > 1 ? { parallelUploads: parallel } : {}),
      onAfterResponse: (_req, res) => {
        if (res.getHeader('Media-Key')) recorded = true;
      },
      onError: reject,
      onSuccess: () =>
        recorded ? resolve() : reject(new Error('the upload finished without a record')),
    });
    upload.start();
  });
}

export const resumable: Benchmark = {
  id: 'resumable',
  title: 'Resumable uploads (tus)',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const size = ctx.quick ? 16 : 100;
    const rounds = ctx.quick ? 1 : 3;
    const bytes = size * MiB;
    const block = jpegLikeBlock();
    const data = Buffer.concat(Array.from({ length: size }, () => block));

    const post = async () => {
      const t = performance.now();
      await uploadStream(stack.url, stack.token, bytes, block);
      return performance.now() - t;
    };
    const viaTus = async (parallel: number) => {
      const t = performance.now();
      await tusUpload(stack.url, stack.token, data, parallel);
      return performance.now() - t;
    };
    // Warm-up: connections, JIT.
    await post();
    await viaTus(1);

    const ms = { post: [] as number[], tus: [] as number[], parallel: [] as number[] };
    for (let r = 0; r < rounds; r++) {
      ctx.log(`resumable: ${size} MiB, round ${r + 1}/${rounds}`);
      const order =
        r % 2 === 0
          ? (['post', 'tus', 'parallel'] as const)
          : (['parallel', 'tus', 'post'] as const);
      for (const way of order) {
        ms[way].push(way === 'post' ? await post() : await viaTus(way === 'tus' ? 1 : 4));
      }
    }
    await stack.clear();

    // Memory: several uploads at once, each in 8 MiB PATCHes, the API's peak RSS per round.
    const memory = ctx.quick ? { files: 4, mib: 16 } : { files: 8, mib: 200 };
    const memoryRounds = ctx.quick ? 1 : 2;
    const memoryData =
      memory.mib === size ? data : Buffer.concat(Array.from({ length: memory.mib }, () => block));
    const pid = stack.api.pid;
    const peaks: number[] = [];
    const growth: number[] = [];
    const rates: number[] = [];
    for (let r = 0; r < memoryRounds; r++) {
      ctx.log(
        `resumable: ${memory.files} × ${memory.mib} MiB at once, round ${r + 1}/${memoryRounds}`,
      );
      const before = rss(pid) / MiB;
      resetPeakRss(pid);
      const t = performance.now();
      await Promise.all(
        Array.from({ length: memory.files }, () =>
          tusUpload(stack.url, stack.token, memoryData, 1),
        ),
      );
      rates.push((memory.files * memory.mib) / ((performance.now() - t) / 1000));
      const peak = peakRss(pid) / MiB;
      peaks.push(peak);
      growth.push(peak - before);
      await stack.clear();
    }
    const memoryName = `${memory.files} × ${memory.mib} MiB resumable uploads at once`;
    const memoryTable: Table = {
      title: 'API memory during resumable uploads',
      columns: [
        { key: 'scenario', label: 'uploads (tus, 8 MiB PATCHes)' },
        { key: 'peak', label: 'API peak RSS, MiB', digits: 0 },
        { key: 'growth', label: 'over RSS before, MiB', digits: 0 },
        { key: 'rate', label: 'MiB/s (all files)', digits: 0 },
      ],
      rows: [{ scenario: memoryName, peak: stat(peaks), growth: stat(growth), rate: stat(rates) }],
    };
    const { partSize } = stack.config.s3!;

    const mibps = (list: number[]) => list.map((m) => size / (m / 1000));
    const tusRatio = ratios(mibps(ms.tus), mibps(ms.post));
    const parallelRatio = ratios(mibps(ms.parallel), mibps(ms.post));
    const table: Table = {
      columns: [
        { key: 'way', label: `${size} MiB file` },
        { key: 'mibps', label: 'MiB/s' },
        { key: 'ratio', label: '÷ POST /media/upload (per round)', digits: 3 },
      ],
      rows: [
        { way: 'POST /media/upload', mibps: stat(mibps(ms.post)), ratio: '' },
        { way: 'tus, PATCHes of 8 MiB', mibps: stat(mibps(ms.tus)), ratio: stat(tusRatio) },
        {
          way: 'tus, 4 parallel parts (concatenation)',
          mibps: stat(mibps(ms.parallel)),
          ratio: stat(parallelRatio),
        },
      ],
    };
    const chart = [
      { group: 'POST /media/upload', series: 'MiB/s', ...stat(mibps(ms.post)) },
      { group: 'tus, 8 MiB PATCHes', series: 'MiB/s', ...stat(mibps(ms.tus)) },
      { group: 'tus, 4 parallel parts', series: 'MiB/s', ...stat(mibps(ms.parallel)) },
    ];
    const why = `Each PATCH's bytes go into the parts of one S3 multipart upload at the
file's final key, joined by the store at completion (no copy); parallel parts
are copied by the store (UploadPartCopy) and read once for the SHA-256
(docs/resumable-uploads.md, "Decisions"). A part is streamed to the store
while its PATCH brings it (docs/resumable-uploads.md, "A PATCH's parts
streamed"), but a PATCH is answered only once its bytes are stored, and
tus-js-client sends the next PATCH after the answer: with PATCHes of one
${partSize / MiB} MiB part each, one part is in flight at a time, where the parts of
one \`POST /media/upload\` go two at a time. The two sides' own throughput is
in the table above.`;
    return {
      id: this.id,
      title: this.title,
      method: `
One ${size} MiB file (a JPEG's head, then filler) per upload, ${rounds} round(s),
each round sending it through \`POST /media/upload\` (multipart form), through
tus-js-client with \`chunkSize\` 8 MiB, and through tus-js-client with
\`parallelUploads: 4\` (four partial uploads, then a final concatenation),
in alternating order. Timed from the first request to the record written
(the answer with \`Media-Key\`). Throughput is per upload; ratios are per
round; the table gives medians and min–max.

Memory: ${memory.files} uploads of ${memory.mib} MiB at once through tus-js-client
(8 MiB PATCHes, one after another per upload), ${memoryRounds} round(s); the
API's peak resident set (the kernel's high-water mark, reset before each
round) and its growth over the RSS before the round.`,
      tables: [table, memoryTable],
      charts: [
        {
          id: 'resumable',
          title: 'Resumable uploads beside POST /media/upload',
          spec: bars({
            title: `${size} MiB upload throughput (median, min–max over rounds)`,
            data: chart,
            yTitle: 'MiB/s',
          }),
        },
      ],
      targets: [
        target('tus (8 MiB PATCHes) ÷ POST /media/upload', stat(tusRatio), '>=', 0.85, '×', {
          digits: 2,
          why,
        }),
        target('tus, 4 parallel parts ÷ POST /media/upload', stat(parallelRatio), '>=', 1.0, '×', {
          digits: 2,
          why,
        }),
        target(`${memoryName}: API peak RSS`, stat(peaks), '<=', 400, 'MiB', {
          digits: 0,
          why: `A PATCH holds at most three parts of ${partSize / MiB} MiB (\`S3_PART_SIZE\`):
the one filling and two in flight to the store; the rest of its bytes stay in
the client until the socket takes them (backpressure).`,
        }),
      ],
    };
  },
};
