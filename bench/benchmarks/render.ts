/**
 * Renders: a stored variant served beside a plain download of the
 * same bytes; first renders (12 MP JPEG → 400 px WebP) through the API, the
 * queue and 1 or 2 worker processes beside the same resizes in-process; and
 * what that makes in requests per second on this machine, beside imgproxy's
 * published figure for its own resize benchmark.
 */
import { Agent, request } from 'undici';
import type { RenderOptions } from '../../shared/media/render-options';
import type { Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import { closedLoop } from '../lib/http';
import { JobTimings } from '../lib/job-timing';
import { Peer } from '../lib/peer';
import { cpuByGroup, cpuSince, type ProcessGroup } from '../lib/proc';
import { target, type BenchmarkResult, type Table, type Target } from '../lib/report';
import { pool, ratios, stat } from '../lib/stats';
import { ONE_JOB_EACH, uploadPhotos } from './convert';

/** 4032 × 3024 (12.2 MP), a phone JPEG of the corpus. */
const PHOTO = 'tests-42_IndexError.jpg';
const QUICK_PHOTO = 'gps-DSCN0010.jpg';
const OPTIONS: RenderOptions = {
  width: 400,
  height: null,
  fit: 'cover',
  format: 'webp',
  quality: null,
  keepMetadata: false,
};
const QUERY = 'w=400&format=webp';
/** The processes whose CPU a first render's table shows (bench/lib/proc.ts groups). */
const CPU_GROUPS: ProcessGroup[] = [
  'api',
  'workers',
  'in-process peer',
  's3 (swift)',
  'mongodb',
  'redis',
  'benchmark client',
  'other',
];
/** imgproxy's published figure for its own resize benchmark, 2 vCPU (context only: another image and setup). */
const IMGPROXY_RPS = 79.6;

/**
 * The renders' HTTP client: undici's own request API on keep-alive connections, about
 * half the CPU of `fetch` per request (0.09-0.12 ms against 0.18-0.31 ms for a 22 KB
 * answer from a local server, client and server together): the client shares the 2
 * cores with what it measures, where the in-process side talks over IPC.
 */
const client = new Agent({ connections: 8 });

async function renderViaApi(url: string, auth: Record<string, string>, key: string) {
  const res = await request(`${url}/media/render?media=${encodeURIComponent(key)}&${QUERY}`, {
    headers: auth,
    dispatcher: client,
  });
  const body = Buffer.from(await res.body.arrayBuffer());
  if (res.statusCode !== 200) {
    throw new Error(`render answered ${res.statusCode}: ${body.toString()}`);
  }
  return body;
}

export const render: Benchmark = {
  id: 'render',
  title: 'Renders',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const photo = ctx.quick ? QUICK_PHOTO : PHOTO;
    const rounds = ctx.quick ? 1 : 3;
    const durationMs = ctx.quick ? 500 : 4000;
    const clients = ctx.quick ? 2 : 8;
    const jobsPerWorker = ctx.quick ? 1 : 6;
    const workerCounts = [1, 2];
    const targets: Target[] = [];
    const chart: { group: string; series: string; median: number; min: number; max: number }[] = [];

    // 1. A stored variant beside a download of the same bytes.
    await stack.setWorkers(1, ONE_JOB_EACH);
    const [source] = await uploadPhotos(ctx, [photo]);
    const variant = await renderViaApi(stack.url, stack.auth, source!);
    const fd = new FormData();
    fd.append('file', new Blob([variant]), 'variant.webp');
    const up = await fetch(`${stack.url}/media/upload`, {
      method: 'POST',
      headers: stack.auth,
      body: fd,
    });
    if (up.status !== 201) throw new Error(`upload answered ${up.status}`);
    const plainKey = ((await up.json()) as { data: { key: string } }).data.key;
    const renderPath = `/media/render?media=${encodeURIComponent(source!)}&${QUERY}`;
    const downloadPath = `/media/download?media=${encodeURIComponent(plainKey)}`;
    const loop = (path: string) =>
      closedLoop({
        connections: clients,
        durationMs,
        expectStatus: 200,
        send: (dispatcher: Agent) =>
          request(`${stack.url}${path}`, { headers: stack.auth, dispatcher }),
      });
    await loop(renderPath);
    await loop(downloadPath);
    const cached: number[] = [];
    const plain: number[] = [];
    for (let r = 0; r < rounds; r++) {
      ctx.log(`render: stored variant vs download, round ${r + 1}/${rounds}`);
      const pass = async (path: string, into: number[]) => {
        const run = await loop(path);
        into.push(run.requests / run.seconds);
      };
      if (r % 2) {
        await pass(renderPath, cached);
        await pass(downloadPath, plain);
      } else {
        await pass(downloadPath, plain);
        await pass(renderPath, cached);
      }
    }
    const servedRatio = stat(ratios(cached, plain));
    const served: Table = {
      title: `A stored variant (${variant.length.toLocaleString('en-US')} bytes) beside a download of the same bytes, ${clients} clients`,
      columns: [
        { key: 'download', label: 'GET /media/download, requests/s', digits: 0 },
        { key: 'render', label: 'GET /media/render (stored), requests/s', digits: 0 },
        { key: 'ratio', label: 'render ÷ download', digits: 3 },
      ],
      rows: [{ download: stat(plain), render: stat(cached), ratio: servedRatio }],
    };
    chart.push({ group: 'stored variant', series: 'download of the same bytes', ...stat(plain) });
    chart.push({ group: 'stored variant', series: 'GET /media/render', ...stat(cached) });
    targets.push(
      target('stored variant ÷ plain download, requests/s', servedRatio, '>=', 0.9, '', {
        digits: 3,
        why: `A stored variant costs what a download costs (one MongoDB lookup of the
source record, which carries its variants, and one storage read); what is left
is the parsing and hashing of the render options.`,
      }),
    );

    // 2. First renders: each request a new variant (a fresh upload of the photo each).
    const peer = await Peer.start(stack.env);
    const first: Table = {
      title: `First renders, ${photo} → 400 px WebP`,
      columns: [
        { key: 'workers', label: 'workers (= jobs at once)' },
        { key: 'direct', label: 'in-process, renders/s', digits: 2 },
        { key: 'api', label: 'API + queue, renders/s', digits: 2 },
        { key: 'ratio', label: 'API ÷ in-process', digits: 3 },
      ],
      rows: [],
    };
    const breakdown: Table = {
      title: `Where one first render's time goes (one worker, one at a time, ${photo} → 400 px WebP), ms`,
      columns: [
        { key: 'total', label: 'GET /media/render', digits: 0 },
        { key: 'apiBefore', label: 'API: auth, source lookup, queueing', digits: 0 },
        { key: 'queued', label: 'waiting for the worker', digits: 0 },
        { key: 'worker', label: 'worker', digits: 0 },
        { key: 'apiAfter', label: 'API: waking up, the handed-over variant, answer', digits: 0 },
        { key: 'peer', label: 'in-process: read + render + write', digits: 0 },
        {
          key: 'ceiling',
          label:
            'API ÷ in-process with a worker as fast as in-process: in-process ÷ (in-process + API + waiting)',
          digits: 2,
        },
      ],
      rows: [],
    };
    const cpu: Table = {
      title: `Machine CPU per first render, by process, ms (median of the passes)`,
      columns: [
        { key: 'count', label: 'workers' },
        { key: 'side', label: 'side' },
        ...CPU_GROUPS.map((g) => ({ key: g, label: g, digits: 1 })),
        { key: 'total', label: 'all', digits: 1 },
      ],
      rows: [],
    };
    let twoWorkerRps = stat([0]);
    try {
      for (const workers of workerCounts) {
        await stack.setWorkers(workers, ONE_JOB_EACH);
        const jobs = jobsPerWorker * workers;
        const sources = await uploadPhotos(
          ctx,
          Array.from({ length: 2 * (workers + jobs * rounds) }, () => photo),
        );
        let next = 0;
        const fresh = () => sources[next++]!;
        // Warm-up both paths. Both read fresh uploads (the API path needs them: a new variant
        // each; the in-process side reads objects in the same state).
        await pool(workers, workers, () =>
          peer.call({ op: 'render', key: fresh(), options: OPTIONS }).then(() => undefined),
        );
        await pool(workers, workers, () =>
          renderViaApi(stack.url, stack.auth, fresh()).then(() => undefined),
        );
        const d: number[] = [];
        const a: number[] = [];
        const cpuApi: Map<ProcessGroup, number>[] = [];
        const cpuDirect: Map<ProcessGroup, number>[] = [];
        for (let r = 0; r < rounds; r++) {
          ctx.log(`render: first renders, ${workers} worker(s), round ${r + 1}/${rounds}`);
          const apiPass = async () => {
            const keys = Array.from({ length: jobs }, fresh);
            const cpu0 = cpuByGroup();
            const ms = await pool(jobs, workers, (i) =>
              renderViaApi(stack.url, stack.auth, keys[i]!).then(() => undefined),
            );
            cpuApi.push(cpuSince(cpu0));
            a.push(jobs / (ms / 1000));
          };
          const directPass = async () => {
            const keys = Array.from({ length: jobs }, fresh);
            const cpu0 = cpuByGroup();
            const ms = await pool(jobs, workers, (i) =>
              peer.call({ op: 'render', key: keys[i]!, options: OPTIONS }).then(() => undefined),
            );
            cpuDirect.push(cpuSince(cpu0));
            d.push(jobs / (ms / 1000));
          };
          if (r % 2) {
            await apiPass();
            await directPass();
          } else {
            await directPass();
            await apiPass();
          }
        }
        const cpuTotal: Record<string, number> = {};
        for (const [side, passes] of [
          ['in-process', cpuDirect],
          ['API + queue', cpuApi],
        ] as const) {
          const perRender = (g: ProcessGroup | 'total') =>
            stat(
              passes.map(
                (p) =>
                  ((g === 'total' ? [...p.values()].reduce((x, y) => x + y, 0) : (p.get(g) ?? 0)) *
                    1000) /
                  jobs,
              ),
            );
          const total = perRender('total');
          cpuTotal[side] = total.median;
          cpu.rows.push({
            count: String(workers),
            side,
            ...Object.fromEntries(CPU_GROUPS.map((g) => [g, perRender(g)])),
            total,
          });
        }
        const ratio = stat(ratios(a, d));
        first.rows.push({ workers: String(workers), direct: stat(d), api: stat(a), ratio });
        if (workers === 2) twoWorkerRps = stat(a);
        const group = `first renders, ${workers} worker${workers > 1 ? 's' : ''}`;
        chart.push({ group, series: 'in-process', ...stat(d) });
        chart.push({ group, series: 'GET /media/render', ...stat(a) });
        targets.push(
          target(`first renders, ${workers} worker(s): API ÷ in-process`, ratio, '>=', 0.9, '', {
            digits: 3,
            why: `The resize itself is short: libvips shrinks the 12 MP JPEG on load, so the
in-process side spends most of its time reading the 2.9 MB source from S3 and
writing the variant. A first render through the API adds a fixed cost that
does not shrink with it (see the breakdown table): the API authenticates,
looks the source up and queues the job; the worker's job bookkeeping in
Redis and its update of the source's record (a few ms, logged per job as
\`phases\`); and after the job the API wakes up and answers (with the bytes
the worker handed over through Redis, or read back from S3). The breakdown
table's last column is the ratio a worker exactly as fast as the in-process
render would reach with the API's steps as they are. Where the cores are
saturated, CPU is the bound: with ${workers} worker(s) on ${ctx.machine.cores} cores the
machine spent ${cpuTotal['API + queue']!.toFixed(1)} ms of CPU per render through the API against
${cpuTotal['in-process']!.toFixed(1)} in-process (the CPU table: the worker's bookkeeping beyond the
render, the API, Redis, the MongoDB stand-in and the benchmark's HTTP client),
which puts the ratio's ceiling near ${(cpuTotal['in-process']! / cpuTotal['API + queue']!).toFixed(2)} there.`,
          }),
        );
      }
      // One first render at a time, timed by phase (the job's own timestamps) beside the peer.
      await stack.setWorkers(1, ONE_JOB_EACH);
      const timings = new JobTimings(stack);
      try {
        const runs = ctx.quick ? 2 : 7;
        const sources = await uploadPhotos(
          ctx,
          Array.from({ length: runs }, () => photo),
        );
        const phases: Record<string, number[]> = {
          total: [],
          apiBefore: [],
          queued: [],
          worker: [],
          apiAfter: [],
          peer: [],
        };
        for (const key of sources) {
          const m = await timings.measure('image', () => renderViaApi(stack.url, stack.auth, key));
          phases.total!.push(m.ms);
          phases.apiBefore!.push(m.phases.apiBefore);
          phases.queued!.push(m.phases.queued);
          phases.worker!.push(m.phases.worker);
          phases.apiAfter!.push(m.phases.apiAfter);
          // The same source, just read by the worker.
          const direct = (await peer.call({ op: 'render', key, options: OPTIONS })).ms;
          phases.peer!.push(direct);
          // The most the ratio can be while the API's own steps cost what they cost: the
          // worker's part as fast as the in-process render, the rest unchanged.
          const fixed = m.phases.apiBefore + m.phases.queued + m.phases.apiAfter;
          (phases.ceiling ??= []).push(direct / (direct + fixed));
        }
        breakdown.rows.push(
          Object.fromEntries(Object.entries(phases).map(([k, v]) => [k, stat(v)])),
        );
      } finally {
        await timings.close();
      }
    } finally {
      await peer.stop();
    }
    const context: Table = {
      title:
        'Render requests per second on this machine, beside a published figure (context, not a target)',
      columns: [
        { key: 'what', label: 'what' },
        { key: 'rps', label: 'requests/s', digits: 1 },
      ],
      rows: [
        {
          what: `this service, first renders (${photo} → 400 px WebP), 2 workers, ${ctx.machine.cores} cores`,
          rps: twoWorkerRps,
        },
        { what: 'this service, stored variant', rps: stat(cached) },
        {
          what: "imgproxy's published resize benchmark, 2 vCPU (its own image and setup)",
          rps: stat([IMGPROXY_RPS]),
        },
      ],
    };
    await stack.clear();

    return {
      id: this.id,
      title: this.title,
      method: `
**Stored variant vs download.** \`${photo}\` is uploaded and rendered once
(\`w=400&format=webp\`); the variant's bytes are then uploaded as a file of
their own. ${clients} clients, each on its own keep-alive connection, ask for
one or the other for ${durationMs / 1000} s (a closed loop), alternating
round by round, ${rounds} round(s); the ratio is taken per round.

**First renders.** Each request through the API names a source never
rendered before (the photo uploaded again for each), so each is a job:
\`GET /media/render\` waits while a worker reads the 12 MP JPEG from S3,
resizes it to 400 px wide (libvips shrinks the JPEG on load), encodes WebP,
books the variant on the source's record and hands its bytes to the API
through Redis (the answer needs no read back from S3), then writes it to S3
and settles its record after the answer. Workers run
\`WORKER_CONCURRENCY=1\`, as many requests in flight as workers. The
in-process side does the same S3 read + resize + encode + S3 write with the
worker's own storage and image adapters in a process started like a worker,
at the same concurrency. The two alternate pass by pass, ${rounds} round(s),
${jobsPerWorker} renders per worker per pass.

Both sides read freshly uploaded copies of the photo, so the sources are in
the same state for both. The CPU table sums, per render, the CPU time every
process of the machine used during the passes (\`/proc/<pid>/stat\`, grouped
by command line), so it shows what each side costs the machine and where.

**Context.** imgproxy publishes ${IMGPROXY_RPS} requests/s for its own resize
benchmark on 2 vCPU; it is another image, another resize and another setup
(no storage write, no queue), so it is a landmark, not a target.`,
      tables: [served, first, breakdown, cpu, context],
      charts: [
        {
          id: 'render',
          title: 'Renders: stored variants and first renders, requests per second',
          spec: bars({
            title: 'Requests per second (median, min–max)',
            data: chart,
            yTitle: 'requests/s',
            format: '.1f',
          }),
        },
      ],
      targets,
    };
  },
};
