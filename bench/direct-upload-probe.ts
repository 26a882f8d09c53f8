/**
 * A probe of where a direct-to-storage upload's API CPU goes, for the
 * measurements behind docs/direct-uploads.md ("The figure"): the API from
 * `dist/` (run `npm run build` first) on the benchmark's services, one worker,
 * and a file of `--mib` MiB sent as the direct-upload benchmark sends it. Per
 * upload, the API process's CPU (its threads' run time, to the nanosecond) in
 * each phase, with the phase's wall time:
 *
 *  - request: `POST /media/upload/direct` (folder, booking, multipart upload
 *    created, part URLs signed);
 *  - parts: the parts PUT by the probe straight to the store (the API idle);
 *  - complete: the completion (the multipart upload completed, the worker's
 *    job awaited, the record read);
 *  - idle: the API with nothing to do, per second (what its timers cost).
 *
 *   npx tsx bench/direct-upload-probe.ts [--mib 100] [--n 8] [--env NAME=VALUE ...]
 *       [--cpu-prof <dir>]   (the API with --cpu-prof: bench/cpu-profile-summary.ts)
 *       [--node-flag <flag> ...]   (more of Node's flags for the API, e.g. --trace-gc)
 */
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { putParts, type Ticket } from './benchmarks/direct-upload';
import { jpegLikeBlock, MiB } from './lib/benchmark';
import { threadCpuSeconds } from './lib/proc';
import { Stack, startFlags } from './lib/stack';
import { stat } from './lib/stats';
import { runBenchmark, startServices } from './services';

const print = (line: string) => process.stdout.write(`${line}\n`);

const { values } = parseArgs({
  options: {
    mib: { type: 'string', default: '100' },
    n: { type: 'string', default: '8' },
    env: { type: 'string', multiple: true, default: [] },
    'cpu-prof': { type: 'string' },
    'node-flag': { type: 'string', multiple: true, default: [] },
  },
});

runBenchmark(async () => {
  const size = Number(values.mib) * MiB;
  const n = Number(values.n);
  const apiEnv = Object.fromEntries(
    values.env.map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
  );
  const services = await startServices();
  const stack = await Stack.start(services, 'dist', { LOG_LEVEL: 'warn', ...apiEnv });
  try {
    const profile = values['cpu-prof']
      ? { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${values['cpu-prof']}` }
      : {};
    const flags = values['node-flag'];
    if (values['cpu-prof'] || flags.length > 0) {
      await stack.setApiEnv(
        profile,
        flags.length > 0 ? [...startFlags('start:api'), ...flags] : undefined,
      );
    }
    await stack.setWorkers(1);
    const block = jpegLikeBlock();
    const data = Buffer.concat(Array.from({ length: size / MiB }, () => block));
    const auth = { Authorization: `Bearer ${stack.token}` };
    const pid = stack.api.pid;
    const phases = { request: [] as number[], parts: [] as number[], complete: [] as number[] };
    const walls = { request: [] as number[], parts: [] as number[], complete: [] as number[] };
    const timed = async <T>(phase: keyof typeof phases, work: () => Promise<T>): Promise<T> => {
      const cpu = threadCpuSeconds(pid);
      const wall = performance.now();
      const out = await work();
      phases[phase].push((threadCpuSeconds(pid) - cpu) * 1000);
      walls[phase].push(performance.now() - wall);
      return out;
    };
    for (let i = 0; i < n + 2; i++) {
      const ticket = await timed('request', async () => {
        const asked = await fetch(`${stack.url}/media/upload/direct`, {
          method: 'POST',
          headers: { ...auth, 'Content-Type': 'application/json' },
          body: JSON.stringify({ name: 'probe.jpg', size, type: 'image/jpeg' }),
        });
        if (asked.status !== 201) throw new Error(`request: ${asked.status}`);
        return ((await asked.json()) as { data: Ticket }).data;
      });
      await timed('parts', () => putParts(ticket, data));
      await timed('complete', async () => {
        const done = await fetch(ticket.completeUrl, { method: 'POST', headers: auth });
        if (done.status !== 201) throw new Error(`complete: ${done.status} ${await done.text()}`);
      });
      // The first two warm the code up.
      if (i < 2) for (const list of [...Object.values(phases), ...Object.values(walls)]) list.pop();
    }
    const idleCpu = threadCpuSeconds(pid);
    await sleep(5_000);
    const idlePerSecond = ((threadCpuSeconds(pid) - idleCpu) * 1000) / 5;
    const fmt = (s: { median: number; min: number; max: number }) =>
      `${s.median.toFixed(1)} (${s.min.toFixed(1)}–${s.max.toFixed(1)})`;
    print(`${values.mib} MiB direct uploads, ${n} measured; API CPU ms, wall ms (median, min–max)`);
    let total = 0;
    for (const phase of Object.keys(phases) as (keyof typeof phases)[]) {
      const cpu = stat(phases[phase]);
      total += cpu.median;
      print(`  ${phase.padEnd(9)} cpu ${fmt(cpu)}  wall ${fmt(stat(walls[phase]))}`);
    }
    print(
      `  total cpu (sum of medians) ${total.toFixed(1)}; idle API ${idlePerSecond.toFixed(2)} ms/s`,
    );
  } finally {
    await stack.stop();
    await services.stop();
  }
});
