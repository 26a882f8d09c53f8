/**
 * A probe of the request path's fixed cost and of the download stream, for
 * the measurements behind docs/performance.md ("Revalidations", "Downloads"):
 * the API from `dist/` (run `npm run build` first) on the benchmark's
 * services, and beside it the floors of a 304 (a bare `node:http` server and
 * a bare Express app answering the same headers, each in a process of its own).
 *
 *   npx tsx bench/revalidation-probe.ts [--n 3000] [--clients 1] [--cpu-prof <dir>]
 *       [--env NAME=VALUE ...] [--downloads 10] [--download-n 30] [--render]
 *
 * - 304s: `If-None-Match` of a 1 MiB file's ETag (and, with `--render`, of a
 *   rendered variant's: one worker), `--n` per side and round, `--clients` at
 *   once on kept-alive connections (undici, as the render-peers benchmark);
 *   the API's CPU per 304 from /proc.
 * - `--downloads <MiB>`: a file of that size downloaded `--download-n` times
 *   through the API and with the store's own getObject, alternating.
 * - `--env` sets the API's environment (say `RATE_LIMIT_MAX=1000000` to run
 *   the rate limiter, which the benchmarks turn off); `--cpu-prof <dir>` runs
 *   the API with `--cpu-prof` (summarise with bench/cpu-profile-summary.ts).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Readable } from 'node:stream';
import { Agent, request } from 'undici';
import { CORPUS, MiB } from './lib/benchmark';
import { uploadStream } from './lib/http';
import { cpuSeconds } from './lib/proc';
import { Stack } from './lib/stack';
import { stat } from './lib/stats';
import { runBenchmark, startServices } from './services';

const print = (line: string) => process.stdout.write(`${line}\n`);

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '3000' },
    clients: { type: 'string', default: '1' },
    rounds: { type: 'string', default: '3' },
    'cpu-prof': { type: 'string' },
    env: { type: 'string', multiple: true, default: [] },
    downloads: { type: 'string' },
    'download-n': { type: 'string', default: '30' },
    render: { type: 'boolean', default: false },
    /** `name:NAME=VALUE;NAME=VALUE`: the API with this environment, measured beside the others. */
    variant: { type: 'string', multiple: true, default: [] },
  },
});

/** The floors: a bare node:http server, and a bare Express app, answering 304 with the API's headers. */
const FLOOR_SOURCE = `
const http = require('node:http');
const kind = process.argv[2];
const etag = process.argv[3];
const headers = (res) => {
  res.setHeader('X-Request-Id', require('node:crypto').randomUUID());
  res.setHeader('ETag', etag);
  res.setHeader('Cache-Control', 'private, no-cache');
  res.setHeader('Accept-Ranges', 'bytes');
};
let server;
if (kind === 'node') {
  server = http.createServer((req, res) => {
    headers(res);
    res.statusCode = req.headers['if-none-match'] === etag ? 304 : 200;
    res.end();
  });
} else {
  const express = require(process.argv[4]);
  const app = express();
  app.disable('x-powered-by');
  app.get('/media/download', (req, res) => {
    headers(res);
    res.status(req.headers['if-none-match'] === etag ? 304 : 200).end();
  });
  server = http.createServer(app);
}
server.keepAliveTimeout = 65000;
server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
process.on('disconnect', () => process.exit(0));
`;

async function startFloor(kind: 'node' | 'express', etag: string, dir: string) {
  const file = join(dir, 'floor.cjs');
  writeFileSync(file, FLOOR_SOURCE);
  const child = fork(file, [kind, etag, require.resolve('express')], {
    cwd: join(__dirname, '..'),
    execArgv: ['--max-semi-space-size=2'],
    stdio: ['ignore', 2, 2, 'ipc'],
  });
  const [message] = (await once(child, 'message')) as [{ port: number }];
  return { child, url: `http://127.0.0.1:${message.port}/media/download` };
}

/** `n` requests, `clients` at once, each on its own kept-alive connection; requests per second. */
async function loop(
  n: number,
  clients: number,
  url: string,
  headers: Record<string, string>,
  status: number,
): Promise<number> {
  const agents = Array.from({ length: clients }, () => new Agent({ connections: 1 }));
  let left = n;
  const t = performance.now();
  await Promise.all(
    agents.map(async (dispatcher) => {
      while (left-- > 0) {
        const res = await request(url, { headers, dispatcher });
        await res.body.dump();
        if (res.statusCode !== status) throw new Error(`${url} answered ${res.statusCode}`);
      }
    }),
  );
  const s = (performance.now() - t) / 1000;
  await Promise.all(agents.map((a) => a.close()));
  return n / s;
}

async function drain(stream: Readable): Promise<number> {
  let bytes = 0;
  for await (const chunk of stream) bytes += (chunk as Buffer).length;
  return bytes;
}

runBenchmark(async () => {
  const n = Number(values.n);
  const clients = Number(values.clients);
  const rounds = Number(values.rounds);
  const services = await startServices();
  const dir = mkdtempSync(join(tmpdir(), 'reval-probe-'));
  const apiEnv: Record<string, string> = Object.fromEntries(
    values.env.map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
  );
  const stack = await Stack.start(services, 'dist', { LOG_LEVEL: 'warn', ...apiEnv });
  const floors: ChildProcess[] = [];
  try {
    if (values['cpu-prof']) {
      await stack.setApiEnv({ NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${values['cpu-prof']}` });
    }
    const block = randomBytes(MiB);
    block.set(readFileSync(join(CORPUS, 'images', 'Canon_40D.jpg')).subarray(0, 4096));
    const { key, checksum } = await uploadStream(stack.url, stack.token, MiB, block);
    const etag = `"${checksum.replace(/^sha256:/, '')}"`;
    const downloadUrl = `${stack.url}/media/download?media=${encodeURIComponent(key)}`;
    const conditional = { ...stack.auth, 'if-none-match': etag };
    const sides: { name: string; url: string; pid?: number }[] = [
      { name: 'API: download 304', url: downloadUrl, pid: stack.api.pid },
    ];
    if (values.render) {
      await stack.setWorkers(1);
      const photo = readFileSync(join(CORPUS, 'images', 'gps-DSCN0010.jpg'));
      const rec = await uploadStream(stack.url, stack.token, photo.length, photo, 'p.jpg');
      const renderUrl = `${stack.url}/media/render?media=${encodeURIComponent(rec.key)}&w=400&format=webp`;
      const first = await request(renderUrl, { headers: stack.auth });
      await first.body.dump();
      sides.push({
        name: 'API: render 304',
        url: renderUrl,
        pid: stack.api.pid,
      });
      (sides[1] as { etag?: string }).etag = String(first.headers.etag);
    }
    for (const kind of ['node', 'express'] as const) {
      const floor = await startFloor(kind, etag, dir);
      floors.push(floor.child);
      sides.push({ name: `floor: bare ${kind}`, url: floor.url, pid: floor.child.pid });
    }
    const headersOf = (side: (typeof sides)[number]) => ({
      ...conditional,
      'if-none-match': (side as { etag?: string }).etag ?? etag,
    });
    const variants = values.variant.map((v) => {
      const name = v.slice(0, v.indexOf(':'));
      const pairs = v.slice(v.indexOf(':') + 1);
      const env = Object.fromEntries(
        pairs
          .split(';')
          .filter(Boolean)
          .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
      );
      // NODE_FLAGS: the API's Node flags instead of `npm run start:api`'s (space-separated).
      const { NODE_FLAGS: flags, ...rest } = env;
      return { name, env: { ...apiEnv, ...rest }, flags: flags?.split(' ') };
    });
    if (n > 0) {
      for (const side of sides) await loop(300, clients, side.url, headersOf(side), 304); // warm-up
      const results = new Map<string, { rate: number[]; cpu: number[] }>();
      for (let r = 0; r < rounds; r++) {
        const order = r % 2 ? [...sides].reverse() : sides;
        for (const variant of variants) {
          await stack.setApiEnv(variant.env, variant.flags);
          const side = { name: `API ${variant.name}`, url: downloadUrl, pid: stack.api.pid };
          // Served once, so its validators are known; then a warm-up.
          await loop(1, 1, downloadUrl, stack.auth, 200);
          await loop(300, clients, side.url, headersOf(side), 304);
          const cpu0 = cpuSeconds(side.pid);
          const rate = await loop(n, clients, side.url, headersOf(side), 304);
          const entry = results.get(side.name) ?? { rate: [], cpu: [] };
          entry.rate.push(rate);
          entry.cpu.push(((cpuSeconds(side.pid) - cpu0) * 1000) / n);
          results.set(side.name, entry);
        }
        if (variants.length) continue;
        for (const side of order) {
          const cpu0 = side.pid ? cpuSeconds(side.pid) : 0;
          const rate = await loop(n, clients, side.url, headersOf(side), 304);
          const cpu = side.pid ? ((cpuSeconds(side.pid) - cpu0) * 1000) / n : NaN;
          const entry = results.get(side.name) ?? { rate: [], cpu: [] };
          entry.rate.push(rate);
          entry.cpu.push(cpu);
          results.set(side.name, entry);
        }
      }
      print(`304s, ${n} per run, ${clients} client(s), ${rounds} rounds (median, min-max):`);
      for (const [name, { rate, cpu }] of results) {
        const a = stat(rate);
        const c = stat(cpu);
        print(
          `  ${name.padEnd(24)} ${a.median.toFixed(0)}/s (${a.min.toFixed(0)}-${a.max.toFixed(0)})  ` +
            `server CPU ${c.median.toFixed(3)} ms (${c.min.toFixed(3)}-${c.max.toFixed(3)})`,
        );
      }
    }

    if (values.downloads) {
      const bytes = Number(values.downloads) * MiB;
      const m = Number(values['download-n']);
      const big = await uploadStream(stack.url, stack.token, bytes, block);
      const url = `${stack.url}/media/download?media=${encodeURIComponent(big.key)}`;
      const agent = new Agent({ connections: 1 });
      const viaApi = async () => {
        const res = await request(url, { headers: stack.auth, dispatcher: agent });
        let got = 0;
        for await (const chunk of res.body) got += (chunk as Buffer).length;
        if (got !== bytes) throw new Error(`read ${got}`);
      };
      const fromStore = async () => {
        const got = await drain(await stack.client.getObject(stack.config.s3!.bucket, big.key));
        if (got !== bytes) throw new Error(`read ${got}`);
      };
      const time = async (one: () => Promise<void>) => {
        const t = performance.now();
        for (let i = 0; i < m; i++) await one();
        return (m * bytes) / MiB / ((performance.now() - t) / 1000);
      };
      // Each variant of the API (or the API as it is) beside the store's get, alternating.
      const apis = variants.length ? variants : [{ name: '', env: apiEnv, flags: undefined }];
      const figures = new Map(
        apis.map((v) => [v.name, { ratio: [] as number[], cpu: [] as number[] }]),
      );
      for (let r = 0; r < rounds; r++) {
        for (const variant of apis) {
          await stack.setApiEnv(variant.env, variant.flags);
          await viaApi(); // warm-up
          await fromStore();
          let api = 0;
          let cpu = 0;
          const a = async () => {
            const cpu0 = cpuSeconds(stack.api.pid);
            api = await time(viaApi);
            cpu = ((cpuSeconds(stack.api.pid) - cpu0) * 1000) / m;
          };
          if (r % 2) await a();
          const store = await time(fromStore);
          if (!(r % 2)) await a();
          figures.get(variant.name)!.ratio.push(api / store);
          figures.get(variant.name)!.cpu.push(cpu);
        }
      }
      await agent.close();
      print(`downloads of ${values.downloads} MiB, ${m} per run, ${rounds} rounds:`);
      for (const [name, f] of figures) {
        const ratio = stat(f.ratio);
        print(
          `  API ${name.padEnd(20)} API / store ${ratio.median.toFixed(3)} ` +
            `(${ratio.min.toFixed(3)}-${ratio.max.toFixed(3)}), API CPU ${stat(f.cpu).median.toFixed(1)} ms each`,
        );
      }
    }
  } finally {
    for (const child of floors) child.disconnect();
    await stack.stop();
    await services.stop();
  }
});
