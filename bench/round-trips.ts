/**
 * Per-request cost of an authenticated request: MongoDB and Redis
 * commands and API CPU milliseconds for `GET /media/download` of a small file
 * and for `POST /media/convert` of a small image (API, queue, worker).
 *
 *   npx tsx bench/round-trips.ts [--n 200] [--convert-n 50]
 *
 * The API runs in this process (its CPU time is `process.cpuUsage()` around
 * the measured requests); the worker and the HTTP client run in a peer process
 * (bench/round-trips-peer.ts), so neither is counted as the API's. Each
 * operation is warmed up first (caches filled, connections open), then run N
 * times one after another; the figures are per request. Prints a Markdown table.
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import sharp from 'sharp';
import { createApp } from '../api/app';
import { createApiContext } from '../api/context';
import { createHttpServer } from '../api/http-server';
import { loadConfig } from '../shared/config';
import { createLogger } from '../shared/logger';
import { createS3Client } from '../shared/storage/s3-client';
import { RoundTripCounter, type Counts } from './lib/round-trip-counter';
import type { PeerRun } from './round-trips-peer';
import { startServices } from './services';

const { values } = parseArgs({
  options: { n: { type: 'string' }, 'convert-n': { type: 'string' } },
});
const N = { download: Number(values.n ?? 200), convert: Number(values['convert-n'] ?? 50) };
const WARM_UP = 10;
const print = (line: string) => process.stdout.write(`${line}\n`);

async function main(): Promise<void> {
  const counter = new RoundTripCounter();
  const services = await startServices();
  // The rate limiter still counts (its Redis commands are part of the cost) but never refuses.
  const env = { ...services.envFor('round-trips', 0), RATE_LIMIT_MAX: '1000000000' };
  const logger = createLogger({ level: 'warn' });
  const config = loadConfig(env);
  const ctx = await createApiContext(config, logger);
  counter.watch(ctx.connection);
  const server = createHttpServer(createApp(ctx), logger);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const { token } = await ctx.organizations.create('bench', 'Bench');
  const png = await sharp({
    create: { width: 32, height: 32, channels: 3, background: '#3a7' },
  })
    .png()
    .toBuffer();
  const body = new FormData();
  body.append('file', new Blob([png], { type: 'image/png' }), 'small.png');
  const uploaded = await fetch(`${url}/media/upload`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token.token}` },
    body,
  });
  if (uploaded.status !== 201) throw new Error(`upload: ${uploaded.status}`);
  const { key } = ((await uploaded.json()) as { data: { key: string } }).data;

  const peer = fork(join(__dirname, 'round-trips-peer.ts'), [], {
    env,
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 2, 2, 'ipc'],
  });
  await once(peer, 'message');
  let nextId = 0;
  const call = (message: { run?: PeerRun; stop?: true }) =>
    new Promise<{ counts: Counts; medianMs: number }>((resolve, reject) => {
      const id = ++nextId;
      type Reply = { id: number; ok: boolean; counts: Counts; medianMs: number; error?: string };
      const onMessage = (m: Reply) => {
        if (m.id !== id) return;
        peer.off('message', onMessage);
        if (m.ok) resolve(m);
        else reject(new Error(m.error));
      };
      peer.on('message', onMessage);
      peer.send({ id, ...message });
    });

  const rows: string[] = [];
  const details: string[] = [];
  for (const op of ['download', 'convert'] as const) {
    const run = { url, token: token.token, op, key, n: WARM_UP };
    await call({ run });
    counter.take();
    const cpu0 = process.cpuUsage();
    const { counts: worker, medianMs } = await call({ run: { ...run, n: N[op] } });
    const cpu = process.cpuUsage(cpu0);
    const api = counter.take();
    const per = (x: number) => (x / N[op]).toFixed(2);
    const label = op === 'download' ? 'GET /media/download' : 'POST /media/convert';
    rows.push(
      `| ${label} | ${N[op]} | ${per(api.mongodb)} | ${per(api.redis)} | ${per((cpu.user + cpu.system) / 1000)} | ${per(worker.mongodb)} | ${per(worker.redis)} | ${medianMs.toFixed(2)} |`,
    );
    const named = (c: Counts) =>
      Object.entries(c.byName)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([name, count]) => `${name} ${per(count)}`)
        .join(', ');
    details.push(`${label}: API ${named(api)}`);
    if (op === 'convert') details.push(`${label}: worker ${named(worker)}`);
  }
  print(
    '| request | N | API MongoDB commands | API Redis commands | API CPU ms | worker MongoDB commands | worker Redis commands | median ms (client) |',
  );
  print('| --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const row of rows) print(row);
  print('');
  for (const d of details) print(`- ${d}`);

  await call({ stop: true }).catch(() => undefined);
  server.closeAllConnections();
  server.close();
  await ctx.connection.dropDatabase();
  const keys: string[] = [];
  for await (const o of ctx.store.list('')) keys.push(o.key);
  await ctx.store.removeMany(keys);
  await createS3Client(config.s3!)
    .removeBucket(config.bucket)
    .catch(() => undefined);
  await ctx.close();
  await services.stop();
}

void main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`${String(err)}\n`);
    process.exit(1);
  },
);
