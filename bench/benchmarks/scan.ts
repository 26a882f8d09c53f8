/**
 * Malware scanning: how fast clamd scans the corpus through the service's
 * INSTREAM client (shared/scan/clamd-scanner.ts), and how much later a file
 * is served once scanning is on (upload answered → record `clean`: the
 * outbox, the dispatcher's tick, the scan listener, the `scan` queue and the
 * scan itself).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { ClamdScanner } from '../../shared/scan/clamd-scanner';
import { startClamd } from '../../test/support/services/clamd';
import { CORPUS, MiB, type Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import type { BenchmarkResult, Table } from '../lib/report';
import { percentile, pool, stat } from '../lib/stats';

/** The corpus's readable files (images and PDFs), as bytes. */
function corpus(): { name: string; data: Buffer }[] {
  return ['images', 'pdfs'].flatMap((dir) =>
    readdirSync(join(CORPUS, dir)).map((f) => ({
      name: f,
      data: readFileSync(join(CORPUS, dir, f)),
    })),
  );
}

export const scan: Benchmark = {
  id: 'scan',
  title: 'Malware scanning',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const files = corpus();
    const corpusBytes = files.reduce((n, f) => n + f.data.length, 0);
    // ~100 MiB of mixed corpus files (the corpus repeated), in a fixed order.
    const targetBytes = (ctx.quick ? 10 : 100) * MiB;
    const batch: Buffer[] = [];
    for (let n = 0, i = 0; n < targetBytes; i++) {
      const f = files[i % files.length]!;
      batch.push(f.data);
      n += f.data.length;
    }
    const batchBytes = batch.reduce((n, b) => n + b.length, 0);
    const rounds = ctx.quick ? 1 : 3;
    const clamd = await startClamd({ streamMaxLength: '200M', maxScanSize: '200M' });
    try {
      const scanner = new ClamdScanner({ url: clamd.url, timeoutMs: 60_000 });
      const throughput: Table = {
        columns: [
          { key: 'scans', label: 'scans at once' },
          { key: 'mibs', label: 'MiB/s', digits: 1 },
          { key: 'files', label: 'files/s', digits: 0 },
        ],
        rows: [],
      };
      const chart: { group: string; series: string; median: number; min: number; max: number }[] =
        [];
      // Warm-up, not measured: clamd's first scan of each kind of file costs more.
      for (const f of files) await scanner.scan(Readable.from([f.data]));
      for (const c of [1, 2]) {
        const mibs: number[] = [];
        const perFile: number[] = [];
        for (let r = 0; r < rounds; r++) {
          ctx.log(`scan: ${(batchBytes / MiB).toFixed(0)} MiB, ${c} at once, round ${r + 1}`);
          const ms = await pool(batch.length, c, async (i) => {
            const verdict = await scanner.scan(Readable.from([batch[i]!]));
            if (verdict.result !== 'clean') throw new Error(`corpus file ${i}: ${verdict.result}`);
          });
          mibs.push(batchBytes / MiB / (ms / 1000));
          perFile.push(batch.length / (ms / 1000));
        }
        throughput.rows.push({ scans: String(c), mibs: stat(mibs), files: stat(perFile) });
        chart.push({ group: `${c} at once`, series: 'MiB/s', ...stat(mibs) });
      }

      // Upload → served: the API and a worker with CLAMD_URL, one upload at a time.
      const env = { CLAMD_URL: clamd.url };
      // The API and the workers restart side by side.
      await Promise.all([stack.setApiEnv(env), stack.setWorkers(1, env)]);
      const photos = files.filter((f) => /\.(jpe?g|tiff)$/i.test(f.name)).slice(0, 6);
      const samples = ctx.quick ? 4 : 30;
      const latencies: number[] = [];
      for (let i = 0; i < samples; i++) {
        const f = photos[i % photos.length]!;
        const fd = new FormData();
        fd.append('file', new Blob([f.data]), f.name);
        const res = await fetch(`${stack.url}/media/upload`, {
          method: 'POST',
          headers: stack.auth,
          body: fd,
        });
        if (res.status !== 201) throw new Error(`upload: ${res.status} ${await res.text()}`);
        const answered = performance.now();
        const { key } = ((await res.json()) as { data: { key: string } }).data;
        const url = `${stack.url}/media/download?media=${encodeURIComponent(key)}`;
        for (;;) {
          const got = await fetch(url, { headers: stack.auth });
          await got.arrayBuffer();
          if (got.status === 200) break;
          if (got.status !== 409) throw new Error(`download answered ${got.status}`);
          if (performance.now() - answered > 30_000) throw new Error(`${key} still pending`);
          await sleep(10);
        }
        latencies.push(performance.now() - answered);
      }
      // The API and the workers restart side by side.
      await Promise.all([stack.setApiEnv({}), stack.setWorkers(1)]);
      const latency: Table = {
        columns: [
          { key: 'what', label: '' },
          { key: 'p50', label: 'p50, ms', digits: 0 },
          { key: 'p95', label: 'p95, ms', digits: 0 },
          { key: 'max', label: 'max, ms', digits: 0 },
        ],
        rows: [
          {
            what: 'upload answered → first 200 of its download',
            p50: percentile(latencies, 50),
            p95: percentile(latencies, 95),
            max: Math.max(...latencies),
          },
        ],
      };
      return {
        id: this.id,
        title: this.title,
        method: `
Throughput: ${batch.length} corpus files (${(batchBytes / MiB).toFixed(0)} MiB: the
${files.length} images and PDFs of \`test/fixtures/corpus\`, ${(corpusBytes / MiB).toFixed(1)} MiB,
repeated) sent to clamd through the service's INSTREAM client, one file per
connection, 1 or 2 scans at once; ${rounds} round(s), after one unmeasured
pass over the corpus (clamd's first scan of a kind of file costs more). clamd is the Debian
package's (\`clamav-daemon\`), started by the test harness with **one custom
signature**, not the official database (nothing is downloaded in tests or
benchmarks): with the full database (millions of signatures) clamd spends
more time per byte, so read these figures as the client's and clamd's
parsing cost, an upper bound on throughput. Latency: ${samples} photos uploaded one
at a time with scanning on (API and one worker with \`CLAMD_URL\`); the time
from the upload's answer to the first \`200\` of its download, polled every
10 ms (a \`409 SCAN_PENDING\` until then). It is mostly the outbox and the
dispatcher's tick (every 250 ms) before the scan is queued.`,
        tables: [throughput, latency],
        charts: [
          {
            id: 'scan-throughput',
            title: 'Scan throughput',
            spec: bars({
              title: 'clamd INSTREAM throughput (corpus files)',
              data: chart,
              yTitle: 'MiB/s',
            }),
          },
        ],
        targets: [],
      };
    } finally {
      await stack.setApiEnv({}).catch(() => undefined);
      await clamd.close();
    }
  },
};
