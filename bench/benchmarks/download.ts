/**
 * 15. Downloads and revalidations: `GET /media/download` of files of 1, 10
 * and 100 MiB beside the store's own streaming get of the same object (the
 * `minio` client's getObject streamed to a sink, from this process), 1 and 4
 * clients, alternating which goes first in each round; then revalidations
 * (`If-None-Match` → 304) of a download, answered from the API's memory and
 * with that cache off (a MongoDB read each, as before it existed).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Agent, get } from 'node:http';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { CORPUS, MiB, type Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import { uploadStream } from '../lib/http';
import { cpuSeconds } from '../lib/proc';
import { target, type BenchmarkResult, type Table, type Target } from '../lib/report';
import { pool, ratios, stat } from '../lib/stats';

/** Reads a stream to its end, counting its bytes (the sink both sides pour into). */
async function drain(stream: Readable): Promise<number> {
  let n = 0;
  for await (const chunk of stream) n += (chunk as Buffer).length;
  return n;
}

/** A GET on a kept-alive connection; resolves with the status and the bytes read. */
function fetchBytes(
  agent: Agent,
  url: string,
  headers: Record<string, string>,
): Promise<{ status: number; bytes: number }> {
  return new Promise((resolve, reject) => {
    get(url, { agent, headers }, (res) => {
      drain(res).then((bytes) => resolve({ status: res.statusCode ?? 0, bytes }), reject);
    }).on('error', reject);
  });
}

export const download: Benchmark = {
  id: 'download',
  title: 'Downloads and revalidations',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const sizes = ctx.quick ? [1] : [1, 10, 100];
    const clientCounts = [1, 4];
    const rounds = ctx.quick ? 2 : 5;
    const bucket = stack.config.s3!.bucket;
    const agent = new Agent({ keepAlive: true, maxSockets: 16 });
    const block = randomBytes(MiB);
    block.set(readFileSync(join(CORPUS, 'images', 'Canon_40D.jpg')).subarray(0, 4096));

    // Each client of a side downloads as many times as make 32 MiB (8 in quick mode; at least once); the
    // side's figure is the bytes all clients read over the wall time.
    const repsOf = (bytes: number) => Math.max(1, Math.round(((ctx.quick ? 8 : 32) * MiB) / bytes));
    const side = async (clients: number, bytes: number, one: () => Promise<number>) => {
      const reps = repsOf(bytes);
      const cpu0 = cpuSeconds(stack.api.pid);
      // This process's CPU and the API's: the service's own share (Swift serves both sides alike).
      const own0 = cpuSeconds(process.pid) + cpuSeconds(stack.api.pid);
      const t = performance.now();
      await pool(clients * reps, clients, async () => {
        const n = await one();
        if (n !== bytes) throw new Error(`read ${n} bytes of ${bytes}`);
      });
      const s = (performance.now() - t) / 1000;
      const mib = (clients * reps * bytes) / MiB;
      return {
        rate: mib / s,
        apiCpuMs: ((cpuSeconds(stack.api.pid) - cpu0) * 1000) / (clients * reps),
        ownMsPerMiB: ((cpuSeconds(process.pid) + cpuSeconds(stack.api.pid) - own0) * 1000) / mib,
      };
    };

    const table: Table = {
      columns: [
        { key: 'size', label: 'file' },
        { key: 'clients', label: 'clients' },
        { key: 'store', label: 'store getObject, MiB/s' },
        { key: 'api', label: 'GET /media/download, MiB/s' },
        { key: 'ratio', label: 'API ÷ store (per round)', digits: 3 },
        { key: 'cpu', label: 'API CPU ms per download', digits: 1 },
        { key: 'machineStore', label: 'client + API CPU ms per MiB, store getObject', digits: 1 },
        { key: 'machineApi', label: 'client + API CPU ms per MiB, through the API', digits: 1 },
      ],
      rows: [],
    };
    const chart: { group: string; series: string; median: number; min: number; max: number }[] = [];
    const targets: Target[] = [];
    for (const size of sizes) {
      const bytes = size * MiB;
      const { key } = await uploadStream(stack.url, stack.token, bytes, block);
      const url = `${stack.url}/media/download?media=${encodeURIComponent(key)}`;
      const viaApi = async () => {
        const res = await fetchBytes(agent, url, stack.auth);
        if (res.status !== 200) throw new Error(`download answered ${res.status}`);
        return res.bytes;
      };
      const fromStore = async () => drain(await stack.client.getObject(bucket, key));
      // Warm-up: connections, JIT.
      await viaApi();
      await fromStore();
      for (const clients of clientCounts) {
        const a: number[] = [];
        const s: number[] = [];
        const cpu: number[] = [];
        const machineApi: number[] = [];
        const machineStore: number[] = [];
        for (let r = 0; r < rounds; r++) {
          ctx.log(`download ${size} MiB, ${clients} client(s), round ${r + 1}/${rounds}`);
          const api = async () => {
            const x = await side(clients, bytes, viaApi);
            a.push(x.rate);
            cpu.push(x.apiCpuMs);
            machineApi.push(x.ownMsPerMiB);
          };
          if (r % 2 === 1) await api();
          const x = await side(clients, bytes, fromStore);
          s.push(x.rate);
          machineStore.push(x.ownMsPerMiB);
          if (r % 2 === 0) await api();
        }
        const mApi = stat(machineApi).median;
        const mStore = stat(machineStore).median;
        const ratio = stat(ratios(a, s));
        table.rows.push({
          size: `${size} MiB`,
          clients: String(clients),
          store: stat(s),
          api: stat(a),
          ratio,
          cpu: stat(cpu),
          machineStore: stat(machineStore),
          machineApi: stat(machineApi),
        });
        const group = `${size} MiB, ${clients} client${clients > 1 ? 's' : ''}`;
        chart.push({ group, series: 'store getObject (no API)', ...stat(s) });
        chart.push({ group, series: 'GET /media/download', ...stat(a) });
        targets.push(
          target(`${size} MiB, ${clients} client(s): API ÷ the store's get`, ratio, '>=', 0.9, '', {
            digits: 3,
            why: `The API reads the object from the same store with the same \`minio\` client
and writes it again to its own client: every byte crosses one more HTTP hop on
this machine (read from Swift's socket and parsed, written to the client's).
The benchmark's client and the API together spent ${mApi.toFixed(1)} ms of CPU per MiB
through the API against ${mStore.toFixed(1)} ms for the store's own get (the API process
${stat(cpu).median.toFixed(1)} ms per download); Swift serves both alike. On 2 cores shared by
Swift (Python), MongoDB and the benchmark, that CPU is the bound: what the API
spends is taken from Swift's share. ${
              size === 1
                ? `At 1 MiB the request's own work weighs most: the
bearer token, the record's read from MongoDB and the signed request to the
store come before the first byte, and the store's get pays none of them.`
                : `The API's CPU per MiB fell by about two thirds
when it began to collect its socket chunks while they are young (a scavenge
every 4 MiB streamed, shared/gc-pacer.ts; docs/performance.md, "API: streamed
bytes and the garbage collector"); what is left is copying into sockets and
parsing the store's answer.`
            } The body is not buffered (it streams with backpressure) and not compressed.`,
          }),
        );
      }
    }

    // Revalidations: a 1 client loop of `If-None-Match` on one 1 MiB file, with the
    // validators kept in the API's memory (now) and without (REVALIDATION_CACHE_ENTRIES=0).
    const { key, checksum } = await uploadStream(stack.url, stack.token, MiB, block);
    const url = `${stack.url}/media/download?media=${encodeURIComponent(key)}`;
    const conditional = { ...stack.auth, 'If-None-Match': `"${checksum.replace(/^sha256:/, '')}"` };
    const count = ctx.quick ? 50 : 1_000;
    const revalidations = async (clients: number) => {
      const cpu0 = cpuSeconds(stack.api.pid);
      const t = performance.now();
      await pool(count, clients, async () => {
        const res = await fetchBytes(agent, url, conditional);
        if (res.status !== 304) throw new Error(`revalidation answered ${res.status}`);
      });
      const ms = performance.now() - t;
      return {
        perSecond: count / (ms / 1000),
        latencyMs: (ms * clients) / count,
        cpuMs: ((cpuSeconds(stack.api.pid) - cpu0) * 1000) / count,
      };
    };
    const revalidationTable: Table = {
      title: `Revalidations of a download (If-None-Match → 304), ${count} per run`,
      columns: [
        { key: 'how', label: 'validators' },
        { key: 'clients', label: 'clients' },
        { key: 'perSecond', label: '304s per second', digits: 0 },
        { key: 'latency', label: 'ms per 304', digits: 2 },
        { key: 'cpu', label: 'API CPU ms per 304', digits: 3 },
      ],
      rows: [],
    };
    const revalidationChart: typeof chart = [];
    const settings: { how: string; env: Record<string, string> }[] = [
      { how: 'read from MongoDB (cache off)', env: { REVALIDATION_CACHE_ENTRIES: '0' } },
      { how: "kept in the API's memory", env: {} },
    ];
    // The rate limiter on (its per-process stage ahead of Redis), with a budget no run reaches;
    // not in quick mode (one more API start).
    if (!ctx.quick) {
      settings.push({
        how: "kept in the API's memory, rate limiter on",
        env: { RATE_LIMIT_MAX: '100000000' },
      });
    }
    const kept: Record<number, number[]> = { 1: [], 4: [] };
    for (const { how, env } of settings) {
      await stack.setApiEnv(env);
      await fetchBytes(agent, url, stack.auth); // served once: its validators are known from now on
      await revalidations(1); // warm-up
      for (const clients of clientCounts) {
        const runs = { perSecond: [] as number[], latency: [] as number[], cpu: [] as number[] };
        for (let r = 0; r < rounds; r++) {
          ctx.log(`revalidations, ${how}, ${clients} client(s), round ${r + 1}/${rounds}`);
          const x = await revalidations(clients);
          runs.perSecond.push(x.perSecond);
          runs.latency.push(x.latencyMs);
          runs.cpu.push(x.cpuMs);
        }
        if (Object.keys(env).length === 0) kept[clients] = runs.cpu;
        revalidationTable.rows.push({
          how,
          clients: String(clients),
          perSecond: stat(runs.perSecond),
          latency: stat(runs.latency),
          cpu: stat(runs.cpu),
        });
        revalidationChart.push({
          group: `${clients} client${clients > 1 ? 's' : ''}`,
          series: how,
          ...stat(runs.perSecond),
        });
      }
    }
    await stack.setApiEnv({});
    agent.destroy();
    await stack.clear();

    return {
      id: this.id,
      title: this.title,
      method: `
One file per size (one random MiB repeated, behind a JPEG header) is uploaded
through the API, then read back two ways in each round: through \`GET
/media/download\` (bearer token, a kept-alive connection per client, the body
read to its end and counted), and with the \`minio\` client's \`getObject\` of
the same object from the benchmark's process, streamed to the same sink: the
store's own streaming get, without the API's hop. With 4 clients, 4 downloads
run at once. Each client of a side reads the file as many times as make
${ctx.quick ? 8 : 32} MiB (at least once); the side's figure is the bytes read over its wall
time. Which side goes first alternates; ${rounds} rounds; the ratio is taken round
by round, then its median and min–max. API CPU is the API process's CPU time
over the side, per download.

Revalidations: a 1 MiB file, served once, then asked for ${count} times with
\`If-None-Match\` of its ETag (each answer a 304), by 1 client and by 4 at once,
${rounds} runs each; first with the validator cache off
(\`REVALIDATION_CACHE_ENTRIES=0\`: the record read from MongoDB for each 304,
as before the cache), then with it on (the default). The benchmark's stack
turns the rate limiter off (\`RATE_LIMIT_MAX=0\`); the last rows turn it on
with a budget no run reaches (\`RATE_LIMIT_MAX=100000000\`): each API process
then takes a token's units from Redis in batches and spends them in memory
(docs/api.md, "Rate limits"). Measured on a machine shared with other work
(see the machine line above).`,
      tables: [table, revalidationTable],
      charts: [
        {
          id: 'download',
          title: 'Download throughput, the store getObject vs GET /media/download',
          spec: bars({
            title: 'Download throughput (median, min–max)',
            data: chart,
            yTitle: 'MiB/s',
          }),
        },
        {
          id: 'revalidate',
          title: 'Revalidations (304) per second, validators from MongoDB vs kept in memory',
          spec: bars({
            title: 'Revalidations per second (median, min–max)',
            data: revalidationChart,
            yTitle: '304/s',
          }),
        },
      ],
      targets: [
        ...targets,
        target(
          'API CPU per 304, validators kept in memory, 1 client',
          stat(kept[1]!),
          '<=',
          0.5,
          'ms',
          {
            digits: 3,
          },
        ),
      ],
    };
  },
};
