/**
 * URL imports: a 10 MiB file fetched by `POST /media/upload/url` (API →
 * `import` queue → worker → the guarded fetch → S3 → record) from an HTTP
 * server on loopback (opened through EGRESS_ALLOWLIST), beside uploading the
 * same bytes with `POST /media/upload`, alternating which goes first in each
 * round.
 */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { MiB, type BenchContext, type Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import { target, type BenchmarkResult, type Table } from '../lib/report';
import { ratios, stat } from '../lib/stats';

const SOURCE_IP = '127.0.0.3';

/** `size` bytes a JPEG by its first bytes (types are detected from the head), random after. */
function jpegLike(size: number): Buffer {
  const bytes = randomBytes(size);
  Buffer.from('ffd8ffe000104a46494600010100000100010000', 'hex').copy(bytes);
  return bytes;
}

async function uploadOnce(ctx: BenchContext, bytes: Buffer): Promise<void> {
  const fd = new FormData();
  fd.append('file', new Blob([bytes]), 'bench.jpg');
  const res = await fetch(`${ctx.stack.url}/media/upload`, {
    method: 'POST',
    headers: ctx.stack.auth,
    body: fd,
  });
  if (res.status !== 201) throw new Error(`upload answered ${res.status}: ${await res.text()}`);
}

async function importOnce(ctx: BenchContext, url: string): Promise<void> {
  const res = await fetch(`${ctx.stack.url}/media/upload/url`, {
    method: 'POST',
    headers: { ...ctx.stack.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ url }),
  });
  if (res.status !== 201) throw new Error(`import answered ${res.status}: ${await res.text()}`);
}

export const importUrl: Benchmark = {
  id: 'import',
  title: 'Import from a URL',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const size = ctx.quick ? 1 * MiB : 10 * MiB;
    const perPass = ctx.quick ? 2 : 4;
    const rounds = ctx.quick ? 1 : 3;
    const bytes = jpegLike(size);
    const source = http.createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'image/jpeg', 'content-length': bytes.length });
      res.end(bytes);
    });
    source.listen(0, SOURCE_IP);
    await once(source, 'listening');
    const port = (source.address() as AddressInfo).port;
    const url = `http://${SOURCE_IP}:${port}/bench.jpg`;
    const env = { EGRESS_ALLOWLIST: `${SOURCE_IP}/32`, EGRESS_ALLOWED_PORTS: String(port) };
    const uploads: number[] = [];
    const imports: number[] = [];
    try {
      // The API and the workers restart side by side.
      await Promise.all([stack.setApiEnv(env), stack.setWorkers(1, env)]);
      // Warm-up both paths (JIT, connections).
      await uploadOnce(ctx, bytes);
      await importOnce(ctx, url);
      const pass = async (one: () => Promise<void>, into: number[]) => {
        const t = performance.now();
        for (let i = 0; i < perPass; i++) await one();
        into.push((perPass * size) / MiB / ((performance.now() - t) / 1000));
      };
      for (let r = 0; r < rounds; r++) {
        ctx.log(`import: round ${r + 1}/${rounds}`);
        const up = () => pass(() => uploadOnce(ctx, bytes), uploads);
        const im = () => pass(() => importOnce(ctx, url), imports);
        if (r % 2) {
          await im();
          await up();
        } else {
          await up();
          await im();
        }
        await stack.clear();
      }
    } finally {
      source.closeAllConnections();
      source.close();
      // The API and the workers restart side by side.
      await Promise.all([stack.setWorkers(0), stack.setApiEnv({})]);
    }
    const ratio = stat(ratios(imports, uploads));
    const upload = stat(uploads);
    const imported = stat(imports);
    const table: Table = {
      columns: [
        { key: 'size', label: 'file' },
        { key: 'upload', label: 'POST /media/upload, MiB/s', digits: 1 },
        { key: 'import', label: 'POST /media/upload/url, MiB/s', digits: 1 },
        { key: 'ratio', label: 'import ÷ upload', digits: 2 },
      ],
      rows: [{ size: `${size / MiB} MiB`, upload, import: imported, ratio }],
    };
    const group = `${size / MiB} MiB`;
    return {
      id: this.id,
      title: this.title,
      method: `
One file of ${size / MiB} MiB (a JPEG by its first bytes, random after), ${perPass}
times one after another per pass: uploaded with \`POST /media/upload\`
(multipart, from this process), and imported with \`POST /media/upload/url\` from
an HTTP server in this process on ${SOURCE_IP} (opened with \`EGRESS_ALLOWLIST\`;
\`Content-Length\` set). An import goes API → \`import\` queue → one worker
(\`IMPORT_CONCURRENCY\` default) → the guarded fetch streamed to S3 → the record,
and the API answers 201 once the job is done. The two alternate pass by pass,
${rounds} round(s); the ratio is taken per round. Throughput is file bytes over
wall time. The machine is shared (2 cores; other engineers' work ran beside it).`,
      tables: [table],
      charts: [
        {
          id: 'import',
          title: 'Import from a URL vs upload of the same bytes',
          spec: bars({
            title: `MiB/s (median, min–max), ${size / MiB} MiB files`,
            data: [
              { group, series: 'POST /media/upload', ...upload },
              { group, series: 'POST /media/upload/url', ...imported },
            ],
            yTitle: 'MiB/s',
            format: '.1f',
          }),
        },
      ],
      targets: [
        target(`${size / MiB} MiB: import ÷ upload`, ratio, '>=', 0.8, '', {
          digits: 2,
          why: `An import pays what an upload does not: queueing the job and waiting for
it (the API and the worker each a Redis round trip or two), the worker's
lookups of the job, the organization and the folder, and its connection to
the source; and the worker's process does the SHA-256 and the S3 upload
where the API does them for an upload.`,
        }),
      ],
    };
  },
};
