/**
 * 3. Convert: JPEG → WebP and JPEG → PNG over the corpus camera photos
 * through `POST /media/convert` (API → queue → worker process), with 1 and 2
 * worker processes, beside an in-process pipeline doing the same storage read
 * + sharp + storage write at the same concurrency.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CORPUS, type BenchContext, type Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import { JobTimings } from '../lib/job-timing';
import { Peer } from '../lib/peer';
import { cpuSeconds, machineBusySeconds } from '../lib/proc';
import { target, type BenchmarkResult, type Table, type Target } from '../lib/report';
import { pool, ratios, stat } from '../lib/stats';

/** The decodable camera and phone JPEGs of the corpus, 640x480 and larger. */
export const CAMERA_PHOTOS = [
  'gps-DSCN0010.jpg', // 640x480, Nikon
  'exif-org-olympus-d320l.jpg', // 640x480, Olympus
  'Reconyx_HC500_Hyperfire.jpg', // 2048x1536, trail camera
  'hdr-iphone_hdr_YES.jpg', // 3264x2448, phone
  'tests-42_IndexError.jpg', // 4032x3024, phone
];
const QUICK_PHOTOS = ['gps-DSCN0010.jpg', 'exif-org-olympus-d320l.jpg'];
/** The photo of the per-phase breakdown: mid-size, 2048x1536. */
const BREAKDOWN_PHOTO = 'Reconyx_HC500_Hyperfire.jpg';

/** Worker processes in these benchmarks take one job at a time: N workers = N jobs at once. */
export const ONE_JOB_EACH = { WORKER_CONCURRENCY: '1' };

/** Uploads corpus photos through the API; resolves with their keys. */
export async function uploadPhotos(ctx: BenchContext, names: string[]): Promise<string[]> {
  const keys: string[] = [];
  for (const name of names) {
    const fd = new FormData();
    fd.append('file', new Blob([readFileSync(join(CORPUS, 'images', name))]), name);
    const res = await fetch(`${ctx.stack.url}/media/upload`, {
      method: 'POST',
      headers: ctx.stack.auth,
      body: fd,
    });
    if (res.status !== 201) throw new Error(`upload of ${name}: ${res.status} ${await res.text()}`);
    keys.push(((await res.json()) as { data: { key: string } }).data.key);
  }
  return keys;
}

/** `POST /media/convert`; throws unless it answers 201. */
export async function convertViaApi(ctx: BenchContext, key: string, format: string): Promise<void> {
  const res = await fetch(`${ctx.stack.url}/media/convert`, {
    method: 'POST',
    headers: { ...ctx.stack.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ mediaKey: key, format }),
  });
  if (res.status !== 201) throw new Error(`convert answered ${res.status}: ${await res.text()}`);
}

export const convert: Benchmark = {
  id: 'convert',
  title: 'Convert through the queue',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const photos = ctx.quick ? QUICK_PHOTOS : CAMERA_PHOTOS;
    const breakdownPhoto = ctx.quick ? QUICK_PHOTOS[0]! : BREAKDOWN_PHOTO;
    const reps = ctx.quick ? 1 : 2; // each photo this many times per pass
    const rounds = ctx.quick ? 1 : 3;
    const formats = ['webp', 'png'] as const;
    const workerCounts = [1, 2];
    const keys = await uploadPhotos(ctx, photos);
    const jobs = keys.length * reps;
    const keyOf = (i: number) => keys[i % keys.length]!;

    // The in-process pipeline, in a process of its own started like a worker.
    const peer = await Peer.start(stack.env);
    const inProcess = async (key: string, format: (typeof formats)[number]) => {
      await peer.call({ op: 'convert', key, format });
    };

    const table: Table = {
      columns: [
        { key: 'format', label: 'JPEG →' },
        { key: 'workers', label: 'workers (= jobs at once)' },
        { key: 'direct', label: 'in-process, images/s', digits: 2 },
        { key: 'api', label: 'API + queue, images/s', digits: 2 },
        { key: 'ratio', label: 'API ÷ in-process', digits: 3 },
        { key: 'perWorker', label: 'images/s per worker', digits: 2 },
        { key: 'perCore', label: 'images per worker CPU-second', digits: 2 },
        { key: 'cpuDirect', label: 'machine CPU-s per image, in-process', digits: 3 },
        { key: 'cpuApi', label: 'machine CPU-s per image, API', digits: 3 },
      ],
      rows: [],
    };
    const breakdown: Table = {
      title: `Where one conversion's time goes (one worker, one at a time, ${breakdownPhoto}), ms`,
      columns: [
        { key: 'format', label: 'JPEG →' },
        { key: 'total', label: 'POST /media/convert', digits: 0 },
        { key: 'apiBefore', label: 'API: auth, source lookup, queueing', digits: 0 },
        { key: 'queued', label: 'waiting for the worker', digits: 0 },
        { key: 'worker', label: 'worker', digits: 0 },
        { key: 'apiAfter', label: 'API: result record, answer', digits: 0 },
        { key: 'peer', label: 'in-process: read + convert + write', digits: 0 },
      ],
      rows: [],
    };
    const chart: { group: string; series: string; median: number; min: number; max: number }[] = [];
    const targets: Target[] = [];
    try {
      for (const workers of workerCounts) {
        const procs = await stack.setWorkers(workers, ONE_JOB_EACH);
        for (const format of formats) {
          // Warm-up both paths (JIT, connections, libvips' first use).
          await pool(workers, workers, (i) => inProcess(keyOf(i), format));
          await pool(workers, workers, (i) => convertViaApi(ctx, keyOf(i), format));
          const d: number[] = [];
          const a: number[] = [];
          const perCore: number[] = [];
          const cpuDirect: number[] = [];
          const cpuApi: number[] = [];
          for (let r = 0; r < rounds; r++) {
            ctx.log(`convert → ${format}, ${workers} worker(s), round ${r + 1}/${rounds}`);
            const apiPass = async () => {
              const cpu0 = procs.reduce((n, p) => n + cpuSeconds(p.pid), 0);
              const busy0 = machineBusySeconds();
              const ms = await pool(jobs, workers, (i) => convertViaApi(ctx, keyOf(i), format));
              cpuApi.push((machineBusySeconds() - busy0) / jobs);
              const cpu = procs.reduce((n, p) => n + cpuSeconds(p.pid), 0) - cpu0;
              a.push(jobs / (ms / 1000));
              perCore.push(jobs / cpu);
            };
            const directPass = async () => {
              const busy0 = machineBusySeconds();
              const ms = await pool(jobs, workers, (i) => inProcess(keyOf(i), format));
              cpuDirect.push((machineBusySeconds() - busy0) / jobs);
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
          const ratio = stat(ratios(a, d));
          const api = stat(a);
          const direct = stat(d);
          table.rows.push({
            format,
            workers: String(workers),
            direct,
            api,
            ratio,
            perWorker: stat(a.map((x) => x / workers)),
            perCore: stat(perCore),
            cpuDirect: stat(cpuDirect),
            cpuApi: stat(cpuApi),
          });
          const group = `→ ${format}, ${workers} worker${workers > 1 ? 's' : ''}`;
          chart.push({ group, series: 'in-process pipeline', ...direct });
          chart.push({ group, series: 'POST /media/convert', ...api });
          const cpuA = stat(cpuApi).median;
          const cpuD = stat(cpuDirect).median;
          targets.push(
            target(`→ ${format}, ${workers} worker(s): API ÷ in-process`, ratio, '>=', 0.9, '', {
              digits: 3,
              why: `Every conversion through the API pays a fixed cost the in-process pipeline
does not: the API authenticates, looks the source up, queues the job and waits
for it, then reads the result's record to answer; the worker looks up the job,
the organization and the source, and writes the result's record (see the
breakdown table below: the API's phases and the worker's time beyond the
in-process time). That cost does not shrink with the image, so it weighs most on
quick conversions: the small photos, and here PNG encodes, which are quicker
than WebP ones (compare the two rows of the breakdown). With
${workers} worker(s) on ${ctx.machine.cores} cores it also takes CPU from the conversions: the
machine spent ${cpuA.toFixed(3)} CPU-s per image through the API against
${cpuD.toFixed(3)} in-process.`,
            }),
          );
        }
      }
      // One conversion at a time, timed by phase (the job's own timestamps) beside the peer.
      await stack.setWorkers(1, ONE_JOB_EACH);
      const timings = new JobTimings(stack);
      try {
        const [key] = await uploadPhotos(ctx, [breakdownPhoto]);
        for (const format of formats) {
          await convertViaApi(ctx, key!, format);
          await inProcess(key!, format);
          const runs: Record<string, number[]> = {
            total: [],
            apiBefore: [],
            queued: [],
            worker: [],
            apiAfter: [],
            peer: [],
          };
          for (let i = 0; i < (ctx.quick ? 2 : 7); i++) {
            const m = await timings.measure('image', () => convertViaApi(ctx, key!, format));
            runs.total!.push(m.ms);
            runs.apiBefore!.push(m.phases.apiBefore);
            runs.queued!.push(m.phases.queued);
            runs.worker!.push(m.phases.worker);
            runs.apiAfter!.push(m.phases.apiAfter);
            runs.peer!.push((await peer.call({ op: 'convert', key: key!, format })).ms);
          }
          breakdown.rows.push({
            format,
            ...Object.fromEntries(Object.entries(runs).map(([k, v]) => [k, stat(v)])),
          });
        }
      } finally {
        await timings.close();
      }
    } finally {
      await peer.stop();
    }
    await stack.clear();

    return {
      id: this.id,
      title: this.title,
      method: `
Photos: ${photos.map((p) => `\`${p}\``).join(', ')} (uploaded once through
the API); a pass converts each of them ${reps} time(s) (${jobs} conversions)
with as many in flight as there are workers. Each worker process runs with
\`WORKER_CONCURRENCY=1\`, so 2 workers means 2 conversions at once on this
machine's ${ctx.machine.cores} cores. Through the API a conversion is
\`POST /media/convert\` answered 201: the API looks the source up, adds the job
and waits for it; the worker reads the source from S3, converts with sharp,
writes the result object and its MongoDB record. The in-process pipeline does the same S3 read + convert
+ S3 write with the worker's own storage and image adapters (sharp tuned the
same way), at the same concurrency, in one process started like a worker
(same Node flags) but with no queue, API or database. The two alternate pass by pass, ${rounds} round(s); the ratio is
taken per round. "Images per worker CPU-second" divides the conversions by
the CPU time the worker processes used during the pass: what one busy core
converts per second. "Machine CPU-s per image" is all the CPU the machine
spent during a pass (every process: the benchmark's clients, API, Redis, S3,
MongoDB, workers or the in-process peer), divided by the conversions: the
difference between the two columns is what the API and the queue add.`,
      tables: [table, breakdown],
      charts: [
        {
          id: 'convert',
          title: 'Conversions per second, in-process vs through the API and the queue',
          spec: bars({
            title: 'Conversions per second (median, min–max)',
            data: chart,
            yTitle: 'images/s',
            format: '.2f',
          }),
        },
      ],
      targets,
    };
  },
};
