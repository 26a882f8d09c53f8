/**
 * 1. Upload throughput: files of 1, 10 and 100 MiB through `POST
 * /media/upload` beside a direct `minio` putObject of the same bytes into the
 * same bucket, alternating which goes first in each round.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CORPUS, MiB, type Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import { repeated, uploadStream } from '../lib/http';
import { cpuSeconds, machineBusySeconds } from '../lib/proc';
import { target, type BenchmarkResult, type Table, type Target } from '../lib/report';
import { ratios, stat } from '../lib/stats';

/** The way in through the API, per MiB, and the record's insert: docs/performance.md's 1 MiB timeline. */
const RECEIVE_MS_PER_MIB = 1.6;
const INSERT_MS = 1.7;

/**
 * Why the API misses the store's own streaming put at `size`, from this run's
 * figures (see the method for the terms) and the measured limit that applies.
 */
function uploadWhy(
  size: number,
  singleMiB: number,
  streamedVsDirect: number,
  run: { streamedMs: number; machineStreamed: number; machineApi: number },
): string {
  const store = `The store's own streaming put, from this process without the API, reached
${streamedVsDirect.toFixed(2)} of a direct putObject with the size known.`;
  if (size <= singleMiB) {
    const floor = RECEIVE_MS_PER_MIB * size + INSERT_MS;
    return `${store} A file up to ${singleMiB} MiB (\`S3_SINGLE_PUT_MAX\`) goes as one PUT, which
can leave only once its last byte is in (S3 wants the length, and the \`minio\`
client the payload's SHA-256, before the body): the body's way in through the
API (HTTP, busboy, the type check and the SHA-256, about ${RECEIVE_MS_PER_MIB} ms per MiB in the
1 MiB timeline of docs/performance.md) comes before the PUT instead of beside
it, and the record's insert (${INSERT_MS} ms) after it. That floor, ${floor.toFixed(0)} ms here
beside the store's own ${run.streamedMs.toFixed(0)} ms, caps the ratio near
${(run.streamedMs / (run.streamedMs + floor)).toFixed(2)}. With \`S3_SINGLE_PUT_MAX=0\` the parts leave while the rest
arrives and the ratio rises, but the upload itself is slower: a 10 MiB upload
took 87-98 ms as two parts against 56 as one PUT (docs/performance.md, "The
single-PUT bound"); the service keeps the faster upload.`;
  }
  return `${store} A file over ${singleMiB} MiB goes as a multipart upload whose parts leave
while the rest arrives. On 2 cores shared with the S3 stand-in (Swift, Python,
a core of its own at these rates) the bound is the machine's CPU: an upload
through the API cost it ${run.machineApi.toFixed(0)} ms of CPU against ${run.machineStreamed.toFixed(0)} ms for the store's own
put of the same bytes (the body's way in through HTTP and busboy, and the
upload's SHA-256, on the API's side), a ceiling near
${(run.machineStreamed / run.machineApi).toFixed(2)} when the cores are saturated.`;
}

/** Why a small upload's fixed cost misses its bound, from this run's figures. */
function smallUploadWhy(overheadMs: number, apiCpuMs: number): string {
  return `The API's time per upload was ${overheadMs.toFixed(1)} ms over the store's own put of the
same bytes; the API process's CPU was about ${apiCpuMs.toFixed(0)} ms per upload. Where it goes
(timestamps inside the API, 100 uploads of 1 MiB, medians; docs/performance.md):
the request's arrival to its last byte taken in, 2.0 ms (HTTP, busboy, the
type check, the SHA-256); to the PUT on its way, 0.9 ms; the PUT, 11 ms
(the store's own put of the same bytes takes about as long); the record's
insert after it, 1.7 ms (one round trip to this machine's MongoDB stand-in;
the quota count and the record's id went beside the PUT); the answer, 0.2 ms.
Receiving the body and inserting the record are the floor of an upload through
an API that stores the object before its record: about 4 ms here.`;
}

export const upload: Benchmark = {
  id: 'upload',
  title: 'Upload throughput',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const sizes = ctx.quick ? [1, 10] : [1, 10, 100];
    const rounds = ctx.quick ? 1 : 7;
    const bucket = stack.config.s3!.bucket;
    // One random MiB repeated, starting with a real JPEG's head so the API accepts it.
    const block = randomBytes(MiB);
    block.set(readFileSync(join(CORPUS, 'images', 'Canon_40D.jpg')).subarray(0, 4096));

    // Each side of a round is `reps` uploads one after another (its mean is the round's figure):
    // a single 1 MiB upload takes ~15 ms, about what the machine's noise moves it by (--quick:
    // 4 MiB a side, figures only shown to be measured).
    const sideBytes = (ctx.quick ? 4 : 16) * MiB;
    const repsOf = (bytes: number) => Math.max(1, Math.round(sideBytes / bytes));
    const direct = async (bytes: number) => {
      const keys = Array.from({ length: repsOf(bytes) }, () => `bench-direct/${randomUUID()}`);
      const t = performance.now();
      for (const key of keys)
        await stack.client.putObject(bucket, key, repeated(bytes, block), bytes);
      const ms = (performance.now() - t) / keys.length;
      await stack.store.removeMany(keys);
      return ms;
    };
    // The service's own streaming upload (size unknown until the end: one PUT when the body
    // fits in a part, else a multipart upload), from this process, without the API.
    /** The machine's CPU seconds (every process) since `before`, per upload. */
    const machineCpu = (before: number, reps: number) => (machineBusySeconds() - before) / reps;
    const streamed = async (bytes: number) => {
      const keys = Array.from({ length: repsOf(bytes) }, () => `bench-direct/${randomUUID()}`);
      const busy = machineBusySeconds();
      const t = performance.now();
      for (const key of keys) {
        await stack.store.put(key, repeated(bytes, block), { contentType: 'image/jpeg' });
      }
      const ms = (performance.now() - t) / keys.length;
      const machine = machineCpu(busy, keys.length);
      await stack.store.removeMany(keys);
      return { ms, machine };
    };
    const viaApi = async (bytes: number) => {
      const reps = repsOf(bytes);
      const cpu = cpuSeconds(stack.api.pid);
      const busy = machineBusySeconds();
      const t = performance.now();
      for (let i = 0; i < reps; i++) await uploadStream(stack.url, stack.token, bytes, block);
      return {
        ms: (performance.now() - t) / reps,
        cpu: (cpuSeconds(stack.api.pid) - cpu) / reps,
        machine: machineCpu(busy, reps),
      };
    };
    // Warm-up: connections, JIT, the API's part buffer pool.
    await direct(8 * MiB);
    await streamed(MiB);
    await viaApi(8 * MiB);

    const table: Table = {
      columns: [
        { key: 'size', label: 'file' },
        { key: 'direct', label: 'direct putObject, MiB/s' },
        { key: 'streamed', label: 'streamed by the store, MiB/s' },
        { key: 'api', label: 'through the API, MiB/s' },
        { key: 'ratio', label: 'API ÷ direct (per round)', digits: 3 },
        { key: 'ratioStreamed', label: 'API ÷ streamed by the store (per round)', digits: 3 },
        { key: 'overhead', label: 'API − streamed by the store, ms (per round)', digits: 1 },
        { key: 'cpu', label: 'API CPU ms per upload', digits: 0 },
        {
          key: 'machineStreamed',
          label: 'machine CPU ms per upload, streamed by the store',
          digits: 0,
        },
        { key: 'machineApi', label: 'machine CPU ms per upload, through the API', digits: 0 },
      ],
      rows: [],
    };
    const chart: { group: string; series: string; median: number; min: number; max: number }[] = [];
    const targets: Target[] = [];
    for (const size of sizes) {
      const bytes = size * MiB;
      const d: number[] = [];
      const st: number[] = [];
      const a: number[] = [];
      const cpu: number[] = [];
      const machineApi: number[] = [];
      const machineStreamed: number[] = [];
      const api = async () => {
        const x = await viaApi(bytes);
        a.push(x.ms);
        cpu.push(x.cpu * 1000);
        machineApi.push(x.machine * 1000);
      };
      for (let r = 0; r < rounds; r++) {
        ctx.log(`upload ${size} MiB, round ${r + 1}/${rounds}`);
        const apiFirst = r % 2 === 1;
        if (apiFirst) await api();
        d.push(await direct(bytes));
        const s = await streamed(bytes);
        st.push(s.ms);
        machineStreamed.push(s.machine * 1000);
        if (!apiFirst) await api();
      }
      await stack.clear();
      const rate = (ms: number) => size / (ms / 1000);
      const dRate = stat(d.map(rate));
      const aRate = stat(a.map(rate));
      const ratio = stat(ratios(a.map(rate), d.map(rate)));
      const sRate = stat(st.map(rate));
      const ratioStreamed = stat(ratios(a.map(rate), st.map(rate)));
      const overhead = stat(a.map((ms, i) => ms - st[i]!));
      table.rows.push({
        size: `${size} MiB`,
        direct: dRate,
        streamed: sRate,
        api: aRate,
        ratio,
        ratioStreamed,
        overhead,
        cpu: stat(cpu),
        machineStreamed: stat(machineStreamed),
        machineApi: stat(machineApi),
      });
      chart.push({ group: `${size} MiB`, series: 'direct putObject', ...dRate });
      chart.push({ group: `${size} MiB`, series: 'streamed by the store (no API)', ...sRate });
      chart.push({ group: `${size} MiB`, series: 'POST /media/upload', ...aRate });
      const singleMiB = Math.max(stack.config.s3!.singlePutMax, stack.config.s3!.partSize) / MiB;
      // Small uploads: what the API adds over the store's own streaming upload of the same bytes.
      if (size === 1) {
        targets.push(
          target(`${size} MiB: API time − the store's streaming put`, overhead, '<=', 5, 'ms', {
            digits: 1,
            why: smallUploadWhy(overhead.median, stat(cpu).median),
          }),
        );
      } else {
        targets.push(
          target(`${size} MiB: API ÷ the store's streaming put`, ratioStreamed, '>=', 0.9, '', {
            digits: 3,
            why: uploadWhy(size, singleMiB, sRate.median / dRate.median, {
              streamedMs: stat(st).median,
              machineStreamed: stat(machineStreamed).median,
              machineApi: stat(machineApi).median,
            }),
          }),
        );
      }
      // Large uploads as fast as a direct putObject with the size known.
      if (size >= 100) {
        targets.push(
          target(`${size} MiB: API ÷ direct throughput`, ratio, '>=', 0.9, '', {
            digits: 3,
            why: uploadWhy(size, singleMiB, sRate.median / dRate.median, {
              streamedMs: stat(st).median,
              machineStreamed: stat(machineStreamed).median,
              machineApi: stat(machineApi).median,
            }),
          }),
        );
      }
    }

    return {
      id: this.id,
      title: this.title,
      method: `
Each round sends the same bytes (one random MiB repeated, behind a JPEG
header) three ways: through \`POST /media/upload\` as a multipart body to the
API process (busboy → SHA-256 → streaming multipart upload to S3 → MongoDB
record); with the \`minio\` client's \`putObject\` straight into the same
bucket with the size known (a single PUT up to 64 MiB, 64 MiB parts above);
and streamed from the benchmark's process through the service's own object
store (\`S3ObjectStore.put\` of a stream, as the API
does it: the size is unknown until the end, so a body of up to
${Math.max(stack.config.s3!.singlePutMax, stack.config.s3!.partSize) / MiB} MiB is one PUT
once it has all been read, and a larger one a multipart upload of
${stack.config.s3!.partSize / MiB} MiB parts): the S3 side of an upload without the HTTP hop, the
multipart parsing and the records. Each side of a round is as many uploads of
the size, one after another, as make 16 MiB (16 of 1 MiB, 2 of 10 MiB, one of
100 MiB), and the round's figure is their mean. Which of API and direct goes
first alternates between rounds; ${rounds} rounds per size. The
ratios are taken round by round (API ÷ direct, API ÷ streamed by the store,
throughput of the same round), then their median and min–max are reported, so
drift in the machine's speed hits both sides alike. MiB/s counts file bytes
only.

The targets compare the API with the store's own streaming put: an
upload's size is not known before its last byte (a multipart body's length
covers the whole form), so the API cannot send one PUT with the length
up front as a direct putObject does; what the API adds over streaming the same
bytes into the same store is what it can be held to: at most 5 ms for a 1 MiB
file, at least 0.9 of the throughput at 10 and 100 MiB. A 100 MiB upload is
also held to 0.9 of the direct putObject, which its parts in flight
make reachable. The 10 MiB ratio to direct is shown as context.`,
      tables: [table],
      charts: [
        {
          id: 'upload',
          title: 'Upload throughput, direct putObject vs POST /media/upload',
          spec: bars({
            title: 'Upload throughput (median, min–max)',
            data: chart,
            yTitle: 'MiB/s',
          }),
        },
      ],
      targets,
    };
  },
};
