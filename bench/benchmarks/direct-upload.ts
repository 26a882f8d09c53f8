/**
 * Direct-to-storage uploads: the API process's CPU time per upload of one
 * file sent straight to the store (presigned multipart parts, then the
 * completion: the multipart upload completed and its size checked by the
 * API, then a worker's upload.complete-direct job reads the type and SHA-256
 * back, copies the object and writes the record) beside the same file
 * through `POST /media/upload`, alternating which goes first in each round.
 */
import { jpegLikeBlock, MiB, type Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import { uploadStream } from '../lib/http';
import { threadCpuSeconds } from '../lib/proc';
import { target, type BenchmarkResult, type Table } from '../lib/report';
import { ratios, stat } from '../lib/stats';

export interface Ticket {
  id: string;
  method: string;
  partSize: number;
  parts: { partNumber: number; url: string }[];
  completeUrl: string;
}

/** A direct upload's parts PUT to their presigned URLs, all at once, as a client sends them. */
export async function putParts(ticket: Ticket, data: Buffer): Promise<void> {
  await Promise.all(
    ticket.parts.map(async (part) => {
      const start = (part.partNumber - 1) * ticket.partSize;
      const res = await fetch(part.url, {
        method: 'PUT',
        body: data.subarray(start, start + ticket.partSize),
      });
      if (!res.ok) throw new Error(`part ${part.partNumber}: ${res.status}`);
      await res.arrayBuffer();
    }),
  );
}

export const directUpload: Benchmark = {
  id: 'direct-upload',
  title: 'Direct-to-storage uploads: API CPU',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    // The completion's read-back is a worker's job (the import queue).
    await stack.setWorkers(1);
    // Larger than one part (DIRECT_UPLOAD_PART_SIZE, 16 MiB): multipart parts, which every S3
    // store takes (the harness's Swift takes no POST policy, the single request's default).
    const size = ctx.quick ? 17 : 100;
    const rounds = ctx.quick ? 1 : 5;
    const bytes = size * MiB;
    const block = jpegLikeBlock();
    const data = Buffer.concat(Array.from({ length: size }, () => block));
    const auth = { Authorization: `Bearer ${stack.token}` };

    // To the nanosecond (the direct side is tens of milliseconds: 10 ms clock ticks are too coarse).
    const apiCpu = async (work: () => Promise<void>) => {
      const before = threadCpuSeconds(stack.api.pid);
      await work();
      return threadCpuSeconds(stack.api.pid) - before;
    };
    const streamed = () =>
      apiCpu(async () => {
        await uploadStream(stack.url, stack.token, bytes, block);
      });
    const direct = () =>
      apiCpu(async () => {
        const asked = await fetch(`${stack.url}/media/upload/direct`, {
          method: 'POST',
          headers: { ...auth, 'Content-Type': 'application/json' },
          body: JSON.stringify({ name: 'bench.jpg', size: bytes, type: 'image/jpeg' }),
        });
        if (asked.status !== 201) throw new Error(`direct upload request: ${asked.status}`);
        const ticket = ((await asked.json()) as { data: Ticket }).data;
        await putParts(ticket, data);
        const done = await fetch(ticket.completeUrl, { method: 'POST', headers: auth });
        if (done.status !== 201) throw new Error(`completion: ${done.status} ${await done.text()}`);
      });
    // Warm-up: connections, and the code of both paths compiled as in a service that has
    // taken a few of each (a first direct upload costs the API several times a later one's
    // CPU: its code runs cold). Not in quick mode, which only proves the benchmark runs.
    if (!ctx.quick) {
      await streamed();
      for (let i = 0; i < 3; i++) await direct();
    }

    const cpu = { post: [] as number[], direct: [] as number[] };
    for (let r = 0; r < rounds; r++) {
      ctx.log(`direct-upload: ${size} MiB, round ${r + 1}/${rounds}`);
      const order = r % 2 === 0 ? (['post', 'direct'] as const) : (['direct', 'post'] as const);
      for (const way of order) cpu[way].push(way === 'post' ? await streamed() : await direct());
    }
    await stack.clear();

    // Per 100 MiB, in CPU milliseconds.
    const per100 = (list: number[]) => list.map((s) => (s * 1000 * 100) / size);
    const ratio = ratios(cpu.direct, cpu.post);
    const table: Table = {
      columns: [
        { key: 'way', label: `${size} MiB file` },
        { key: 'cpu', label: 'API CPU ms per 100 MiB' },
        { key: 'ratio', label: '÷ POST /media/upload (per round)', digits: 3 },
      ],
      rows: [
        { way: 'POST /media/upload', cpu: stat(per100(cpu.post)), ratio: '' },
        {
          way: 'direct to storage (multipart parts + completion)',
          cpu: stat(per100(cpu.direct)),
          ratio: stat(ratio),
        },
      ],
    };
    return {
      id: this.id,
      title: this.title,
      method: `
One ${size} MiB file (a JPEG's head, then filler) per upload, ${rounds} round(s),
each round sending it through \`POST /media/upload\` (multipart form) and
direct to storage (\`POST /media/upload/direct\`, its presigned part URLs PUT
in parallel by the benchmark, then the completion), in alternating order.
Measured: the API process's CPU time (its threads' run time, /proc schedstat,
to the nanosecond) from the first request to the record. The completion has a worker (one, taking every queue)
read the object back once for its SHA-256 and type, copy it to its final key
and write its record (the upload.complete-direct job), so no byte of the file
passes through the API process; the worker's CPU is not counted here.`,
      tables: [table],
      charts: [
        {
          id: 'direct-upload',
          title: 'API CPU per 100 MiB: direct to storage beside POST /media/upload',
          spec: bars({
            title: `API CPU ms per 100 MiB (median, min–max over rounds)`,
            data: [
              { group: 'POST /media/upload', series: 'CPU ms', ...stat(per100(cpu.post)) },
              { group: 'direct to storage', series: 'CPU ms', ...stat(per100(cpu.direct)) },
            ],
            yTitle: 'CPU ms',
            format: '.0f',
          }),
        },
      ],
      targets: [
        target('direct API CPU ÷ POST /media/upload API CPU', stat(ratio), '<=', 0.05, '×', {
          digits: 3,
          why: `What is left in the API process, split by phase with
\`bench/direct-upload-probe.ts\` (medians of 20 uploads on this machine): the
request, about 6 ms (the folder, the booking, starting the multipart upload,
signing the part URLs), the completion, about 11 ms (listing the parts and
completing the multipart upload, queueing the worker's job and waiting for
it, reading the record it wrote), and what the idle process spends while the
client sends the parts and the worker reads them back (about 1 ms of CPU a
second since the MongoDB driver's pool upkeep runs every 10 s: its event-loop
sampler and heartbeats), beside a streamed upload's receive, multipart parse,
hash and send to the store. Each of the completion's dozen round trips to
Redis, MongoDB and the store costs this virtual machine about 0.5 ms of CPU
(its system calls and wake-ups), and the request's five as much: fewer round
trips is what is left to win.`,
        }),
      ],
    };
  },
};
