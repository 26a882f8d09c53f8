/**
 * The peer of the round-trip benchmark (bench/round-trips.ts): runs the real
 * worker and the HTTP client, outside the API's process so the API's CPU time
 * is its own, and counts the worker's MongoDB and Redis commands.
 */
import { loadConfig } from '../shared/config';
import { createLogger } from '../shared/logger';
import { createWorkerMetrics } from '../shared/metrics';
import { createAdapters } from '../worker/adapters';
import { createWorkerContext } from '../worker/context';
import { PROCESSORS } from '../worker/processors';
import { buildRegistry } from '../worker/registry';
import { createWorker } from '../worker/worker';
import { RoundTripCounter, type Counts } from './lib/round-trip-counter';

export interface PeerRun {
  url: string;
  token: string;
  op: 'download' | 'convert';
  key: string;
  n: number;
}

const counter = new RoundTripCounter();

async function request(run: PeerRun): Promise<void> {
  const auth = { Authorization: `Bearer ${run.token}` };
  const res =
    run.op === 'download'
      ? await fetch(`${run.url}/media/download?media=${encodeURIComponent(run.key)}`, {
          headers: auth,
        })
      : await fetch(`${run.url}/media/convert`, {
          method: 'POST',
          headers: { ...auth, 'Content-Type': 'application/json' },
          body: JSON.stringify({ mediaKey: run.key, format: 'webp' }),
        });
  await res.arrayBuffer();
  const expected = run.op === 'download' ? 200 : 201;
  if (res.status !== expected) throw new Error(`${run.op}: ${res.status}`);
}

async function main(): Promise<void> {
  const config = loadConfig(process.env);
  const logger = createLogger({ level: 'warn' });
  const metrics = createWorkerMetrics();
  const ctx = await createWorkerContext(config, logger, createAdapters(config, logger), {
    metrics,
  });
  counter.watch(ctx.connection);
  const worker = createWorker(ctx, buildRegistry(PROCESSORS), metrics);
  await Promise.all(worker.workers.map((w) => w.waitUntilReady()));
  process.on('message', (message: { id: number; run?: PeerRun; stop?: true }) => {
    void (async () => {
      if (message.stop) {
        await worker.close();
        await ctx.close();
        process.send!({ id: message.id, ok: true });
        process.exit(0);
      }
      const run = message.run!;
      counter.take();
      const ms: number[] = [];
      for (let i = 0; i < run.n; i++) {
        const t = performance.now();
        await request(run);
        ms.push(performance.now() - t);
      }
      const counts: Counts = counter.take();
      ms.sort((x, y) => x - y);
      const medianMs = ms[Math.floor(ms.length / 2)] ?? 0;
      process.send!({ id: message.id, ok: true, counts, medianMs });
    })().catch((err: unknown) => process.send!({ id: message.id, ok: false, error: String(err) }));
  });
  process.send!({ ready: true });
}

void main().catch((err: unknown) => {
  process.stderr.write(`${String(err)}\n`);
  process.exit(1);
});
