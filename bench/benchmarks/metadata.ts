/**
 * 5. Metadata: requests per second and latency of `GET /media/metadata` on a
 * mid-size photo, at several client concurrencies.
 */
import { request, type Agent } from 'undici';
import type { Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import { closedLoop } from '../lib/http';
import type { BenchmarkResult, Table } from '../lib/report';
import { percentile, stat } from '../lib/stats';
import { uploadPhotos } from './convert';

const PHOTO = 'Reconyx_HC500_Hyperfire.jpg'; // 2048x1536, 416 KiB, EXIF

export const metadata: Benchmark = {
  id: 'metadata',
  title: 'Metadata endpoint',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const concurrencies = ctx.quick ? [1, 4] : [1, 4, 16];
    const durationMs = ctx.quick ? 1500 : 5000;
    const rounds = ctx.quick ? 1 : 3;
    // As docker-compose runs them: two workers at the default concurrency (2 jobs each).
    await stack.setWorkers(2);
    const [key] = await uploadPhotos(ctx, [PHOTO]);
    const path = `/media/metadata?mediaKey=${encodeURIComponent(key!)}`;
    const send = (dispatcher: Agent) =>
      request(`${stack.url}${path}`, { headers: stack.auth, dispatcher });

    // Check the answer once: the documented envelope with the image's metadata.
    const first = await fetch(`${stack.url}${path}`, { headers: stack.auth });
    const body = (await first.json()) as { data?: { width?: number; exif?: unknown } };
    if (first.status !== 200 || body.data?.width !== 2048 || !body.data.exif) {
      throw new Error(`metadata answered ${first.status}: ${JSON.stringify(body).slice(0, 300)}`);
    }
    await closedLoop({ connections: 4, durationMs: 500, send, expectStatus: 200 });

    const table: Table = {
      columns: [
        { key: 'clients', label: 'clients' },
        { key: 'rps', label: 'requests/s', digits: 0 },
        { key: 'p50', label: 'p50, ms', digits: 1 },
        { key: 'p99', label: 'p99, ms', digits: 1 },
      ],
      rows: [],
    };
    const chart: { group: string; series: string; median: number; min: number; max: number }[] = [];
    for (const c of concurrencies) {
      const rps: number[] = [];
      const p50: number[] = [];
      const p99: number[] = [];
      for (let r = 0; r < rounds; r++) {
        ctx.log(`metadata: ${c} client(s), round ${r + 1}/${rounds}`);
        const run = await closedLoop({
          connections: c,
          durationMs,
          send,
          expectStatus: 200,
        });
        rps.push(run.requests / run.seconds);
        p50.push(percentile(run.latencies, 50));
        p99.push(percentile(run.latencies, 99));
      }
      table.rows.push({ clients: String(c), rps: stat(rps), p50: stat(p50), p99: stat(p99) });
      chart.push({ group: `${c} client${c > 1 ? 's' : ''}`, series: 'p50', ...stat(p50) });
      chart.push({ group: `${c} client${c > 1 ? 's' : ''}`, series: 'p99', ...stat(p99) });
    }
    await stack.clear();

    return {
      id: this.id,
      title: this.title,
      method: `
\`GET /media/metadata?mediaKey=…\` of \`${PHOTO}\` (2048x1536 JPEG, 416 KiB,
with EXIF), answered 200 with the image's metadata. Each client holds one
keep-alive connection and sends one request at a time for
${durationMs / 1000} s; ${rounds} round(s) per client count. Every request
goes API → queue → worker (S3 read of the whole file, sharp reads its
header) → API. Two worker processes at the default \`WORKER_CONCURRENCY\`
(2), as \`docker compose\` runs them. Throughput and percentiles are per
round; the table gives their median and min–max.`,
      tables: [table],
      charts: [
        {
          id: 'metadata',
          title: 'Metadata latency by clients',
          spec: bars({
            title: 'GET /media/metadata latency (median, min–max over rounds)',
            data: chart,
            yTitle: 'ms',
          }),
        },
      ],
      targets: [],
    };
  },
};
