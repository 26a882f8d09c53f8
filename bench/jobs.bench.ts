/**
 * Job benchmark (issue: worker jobs). Prints, measured in one run:
 *  - convert throughput through the API and the queue (an API process and a
 *    worker process from dist/, as production runs them) as a fraction of a
 *    direct in-process pipeline doing the same storage read + sharp + storage
 *    write at the same concurrency, alternating rounds;
 *  - the round trip of a no-op job through Redis (add, process, result seen
 *    through QueueEvents), p50/p99;
 * The merge figures come from bench/merge.bench.ts.
 *
 * Run: npm run bench:jobs [-- --rounds 3 --jobs 12 --concurrency 2 --noop 1000]
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Worker } from 'bullmq';
import { createDataContext } from '../api/context';
import { loadConfig } from '../shared/config';
import { createLogger } from '../shared/logger';
import { configureSharp, ImageAdapter } from '../shared/media/image.adapter';
import { BullJobQueue } from '../shared/queue/job-queue';
import { createRedis } from '../shared/queue/redis';
import { createS3Client } from '../shared/storage/s3-client';
import { S3ObjectStore } from '../shared/storage/s3-object-store';
import { freePort, waitFor } from '../test/support/services/process';
import { runBenchmark, startServices } from './services';

const root = join(__dirname, '..');
const out = (line: string) => process.stdout.write(`${line}\n`);
const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    jobs: { type: 'string', default: '12' },
    concurrency: { type: 'string', default: '2' },
    noop: { type: 'string', default: '1000' },
    image: { type: 'string', default: 'hdr-iphone_hdr_YES.jpg' },
    format: { type: 'string', default: 'webp' },
  },
});
const ROUNDS = Number(values.rounds);
const JOBS = Number(values.jobs);
const CONCURRENCY = Number(values.concurrency);
const FORMAT = values.format as 'webp';

const percentile = (xs: number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const median = (xs: number[]) => percentile(xs, 50);

/** Runs `task` `n` times with at most `c` at once; resolves with the elapsed ms. */
async function pool(n: number, c: number, task: (i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const t = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      while (next < n) await task(next++);
    }),
  );
  return performance.now() - t;
}

function spawnNode(args: string[], env: NodeJS.ProcessEnv): ChildProcess {
  return spawn(process.execPath, args, {
    cwd: root,
    env: { ...env, MALLOC_ARENA_MAX: '2' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

async function main() {
  out('building dist/ …');
  execFileSync('npm', ['run', '--silent', 'build'], { cwd: root, stdio: 'inherit' });
  const services = await startServices();
  out(services.describe());
  const children: ChildProcess[] = [];
  try {
    const port = await freePort();
    const env: NodeJS.ProcessEnv = {
      ...services.envFor('bench', port),
      WORKER_CONCURRENCY: String(CONCURRENCY),
      JOB_WAIT_MS: '120000',
    };
    const config = loadConfig(env);
    const logger = createLogger({ level: 'warn' });
    const data = await createDataContext(config, logger);
    const { token, organization } = await data.organizations.create('bench', 'Bench');
    const store = new S3ObjectStore({
      client: createS3Client(config.s3!),
      bucket: config.s3!.bucket,
      region: config.s3!.region,
      logger,
    });
    await store.init();

    children.push(
      spawnNode(['--enable-source-maps', '--max-semi-space-size=2', 'dist/api/main.js'], env),
    );
    children.push(spawnNode(['--enable-source-maps', 'dist/worker/main.js'], env));
    const url = `http://127.0.0.1:${port}`;
    await waitFor('API', async () => (await fetch(`${url}/healthz`)).ok, 60_000, 200);
    const auth = { Authorization: `Bearer ${token.token}` };

    // The source image, uploaded once through the API (so it has a record).
    const bytes = readFileSync(join(root, '..', 'shared', 'corpus', 'images', values.image));
    const fd = new FormData();
    fd.append('file', new Blob([bytes]), values.image);
    const up = await fetch(`${url}/media/upload`, { method: 'POST', headers: auth, body: fd });
    const source = ((await up.json()) as { data: { key: string } }).data;

    configureSharp();
    const images = new ImageAdapter({ maxInputPixels: config.limits.maxInputPixels });
    const direct = async (i: number) => {
      const stream = await store.get(source.key);
      const chunks: Buffer[] = [];
      for await (const c of stream) chunks.push(c as Buffer);
      const result = await images.convert(Buffer.concat(chunks), FORMAT);
      await store.put(`bench/direct-${i}-${randomUUID()}.${result.ext}`, result.data, {
        contentType: result.mime,
      });
    };
    const viaApi = async () => {
      const res = await fetch(`${url}/media/convert`, {
        method: 'POST',
        headers: { ...auth, 'Content-Type': 'application/json' },
        body: JSON.stringify({ mediaKey: source.key, format: FORMAT }),
      });
      if (res.status !== 201)
        throw new Error(`convert answered ${res.status}: ${await res.text()}`);
    };
    // Warm-up both paths.
    await pool(CONCURRENCY, CONCURRENCY, direct);
    await pool(CONCURRENCY, CONCURRENCY, viaApi);
    const d: number[] = [];
    const a: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      d.push(await pool(JOBS, CONCURRENCY, direct));
      a.push(await pool(JOBS, CONCURRENCY, viaApi));
    }
    const rate = (ms: number) => JOBS / (ms / 1000);
    out('');
    out(
      `## convert ${values.image} → ${FORMAT}: ${JOBS} conversions at concurrency ${CONCURRENCY}, ${ROUNDS} rounds (median)`,
    );
    out(
      `direct pipeline (read + sharp + write, in-process): ${rate(median(d)).toFixed(2)} /s  [${d.map((x) => rate(x).toFixed(2)).join(', ')}]`,
    );
    out(
      `through the API and the queue (worker process):    ${rate(median(a)).toFixed(2)} /s  [${a.map((x) => rate(x).toFixed(2)).join(', ')}]`,
    );
    out(`ratio queue / direct: ${(rate(median(a)) / rate(median(d))).toFixed(3)}`);

    // No-op round trip, through the same producer adapter the API uses.
    const noopQueue = new BullJobQueue(
      { redisUrl: services.redisUrl, queuePrefix: `noop-${config.queuePrefix}` },
      logger,
    );
    await noopQueue.init();
    const workerConn = createRedis(services.redisUrl, 'worker', logger);
    const noopWorker = new Worker('image', () => Promise.resolve({ metadata: {} }), {
      connection: workerConn,
      prefix: `noop-${config.queuePrefix}`,
      concurrency: 1,
    });
    await noopWorker.waitUntilReady();
    const samples: number[] = [];
    const N = Number(values.noop);
    for (let i = 0; i < N + 50; i++) {
      const t = performance.now();
      const id = await noopQueue.add(
        'image.metadata',
        { organizationId: organization.id, requestId: 'bench', key: 'x' },
        randomUUID(),
      );
      const outcome = await noopQueue.wait('image.metadata', id, 10_000);
      if (outcome.state !== 'completed') throw new Error(`no-op job ${outcome.state}`);
      if (i >= 50) samples.push(performance.now() - t);
    }
    out('');
    out(
      `## no-op job round trip (add → worker → result through QueueEvents), ${N} jobs after 50 warm-up`,
    );
    out(
      `p50 ${percentile(samples, 50).toFixed(2)} ms, p99 ${percentile(samples, 99).toFixed(2)} ms, max ${Math.max(...samples).toFixed(2)} ms`,
    );
    await noopWorker.close();
    workerConn.disconnect();
    await noopQueue.close();

    const keys: string[] = [];
    for await (const o of store.list('')) keys.push(o.key);
    await store.removeMany(keys);
    await createS3Client(config.s3!)
      .removeBucket(config.s3!.bucket)
      .catch(() => undefined);
    await data.connection.dropDatabase();
    await data.close();
  } finally {
    for (const c of children) c.kill('SIGTERM');
    await services.stop();
  }
}

runBenchmark(main);
