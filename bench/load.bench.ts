/**
 * Load test, long mode: `--connections` clients (64)
 * mixing uploads, downloads, metadata and conversions for `--duration`
 * seconds (60) against an API process and TWO worker processes from dist/,
 * as production runs them (`npm run start:api` / `start:worker` flags), over
 * the same services the tests resolve. Prints the per-endpoint table
 * (requests, req/s, p50/p90/p99/max latency, status counts), the CPU each
 * process used, and the invariants checked behind the API (bench/load.ts);
 * exits non-zero on a 5xx, an unexpected answer or a broken invariant.
 *
 * Run: npm run bench:load [-- --duration 60 --connections 64 --format webp]
 *      [--cpu-prof <dir>: V8 CPU profiles of the API and the workers, written
 *       there when they stop; `npx tsx bench/cpu-profile-summary.ts <dir>`
 *       summarises them (docs/performance.md, "Where the CPU goes")]
 * The short mode of the same engine runs in `npm test` (test/e2e/load.test.ts).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createApiContext } from '../api/context';
import { loadConfig } from '../shared/config';
import { createLogger } from '../shared/logger';
import { createS3Client } from '../shared/storage/s3-client';
import { freePort, waitFor } from '../test/support/services/process';
import { ENDPOINTS, formatTable, runLoad, verifyLoad } from './load';
import { machineBusySeconds } from './lib/proc';
import { startEnv, startFlags } from './lib/stack';
import { runBenchmark, startServices } from './services';

const MiB = 1024 * 1024;
const root = join(__dirname, '..');
const out = (line: string) => process.stdout.write(`${line}\n`);
const { values } = parseArgs({
  options: {
    duration: { type: 'string', default: '60' },
    connections: { type: 'string', default: '64' },
    format: { type: 'string', default: 'webp' },
    'cpu-prof': { type: 'string' },
  },
});
const profileDir = values['cpu-prof'];
const IMAGES = [
  'Canon_40D.jpg',
  'xmp-BlueSquare.jpg',
  'orientation-landscape_6.jpg',
  'tiff-BSG1.tiff',
];
const MAX_FILE_SIZE = 6 * MiB;

/** Every process on the machine: parent, command and CPU seconds used (user + system), from /proc. */
function processes(): Map<number, { ppid: number; comm: string; cpu: number }> {
  const out = new Map<number, { ppid: number; comm: string; cpu: number }>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.set(Number(entry), {
        ppid: Number(fields[1]),
        comm,
        cpu: (Number(fields[11]) + Number(fields[12])) / 100,
      });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}
/** CPU seconds per label over the run: our children by name, the services under this process by command. */
function cpuByProcess(
  before: ReturnType<typeof processes>,
  after: ReturnType<typeof processes>,
  named: Map<number, string>,
): Map<string, number> {
  const ours = new Set<number>([process.pid]);
  for (let grew = true; grew;) {
    grew = false;
    for (const [pid, p] of after) {
      if (!ours.has(pid) && ours.has(p.ppid)) {
        ours.add(pid);
        grew = true;
      }
    }
  }
  const totals = new Map<string, number>();
  for (const pid of ours) {
    if (pid === process.pid) continue;
    const p = after.get(pid)!;
    const label = named.get(pid) ?? p.comm;
    totals.set(label, (totals.get(label) ?? 0) + p.cpu - (before.get(pid)?.cpu ?? 0));
  }
  return totals;
}
const selfCpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

async function main() {
  out('building dist/ …');
  execFileSync('npm', ['run', '--silent', 'build'], { cwd: root, stdio: 'inherit' });
  const services = await startServices();
  out(services.describe());
  const children: { name: string; child: ChildProcess }[] = [];
  try {
    const port = await freePort();
    const env: NodeJS.ProcessEnv = {
      ...services.envFor('bench-load', port),
      PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
      MAX_FILE_SIZE: String(MAX_FILE_SIZE),
      // As the load test: the oversize upload is cut mid multipart upload.
      S3_PART_SIZE: String(5 * MiB),
      S3_SINGLE_PUT_MAX: '0',
      RATE_LIMIT_MAX: '0',
      // One token plays many clients: no cap on its uploads in flight.
      MAX_UPLOADS_IN_FLIGHT: '1000',
    };
    const config = loadConfig(env);
    const logger = createLogger({ level: 'warn' });
    // To create the organization and look behind the API afterwards (it also creates the bucket).
    const ctx = await createApiContext(config, logger);
    const { token } = await ctx.organizations.create('load', 'Load');

    const node = (name: string, args: string[], extra: NodeJS.ProcessEnv = {}) => {
      const profile = profileDir
        ? [
            '--cpu-prof',
            `--cpu-prof-dir=${profileDir}`,
            `--cpu-prof-name=${name.replace(/\s+/g, '-')}.cpuprofile`,
          ]
        : [];
      const child = spawn(process.execPath, [...profile, ...args], {
        cwd: root,
        env: { ...env, ...extra },
        stdio: ['ignore', 'ignore', 'inherit'],
      });
      children.push({ name, child });
    };
    // As `npm run start:api` and `npm run start:worker` run them (package.json).
    node('api', [...startFlags('start:api'), 'dist/api/main.js'], startEnv('start:api'));
    const workerPorts = [await freePort(), await freePort()];
    workerPorts.forEach((p, i) =>
      node(`worker ${i + 1}`, [...startFlags('start:worker'), 'dist/worker/main.js'], {
        ...startEnv('start:worker'),
        WORKER_PORT: String(p),
      }),
    );
    const url = `http://127.0.0.1:${port}`;
    await waitFor('API', async () => (await fetch(`${url}/healthz`)).ok, 60_000, 200);
    for (const p of workerPorts) {
      await waitFor('worker', async () => (await fetch(`http://127.0.0.1:${p}/readyz`)).ok, 60_000);
    }

    const cpuBefore = processes();
    const machineBefore = machineBusySeconds();
    const selfBefore = selfCpu();
    const durationS = Number(values.duration);
    const connections = Number(values.connections);
    out('');
    out(
      `## ${connections} clients for ${durationS} s: uploads, downloads, metadata, conversions to ${values.format}`,
    );
    const result = await runLoad({
      url,
      token: token.token,
      durationMs: durationS * 1000,
      connections,
      images: IMAGES.map((name) => ({
        name,
        data: readFileSync(join(root, 'test/fixtures', name)),
      })),
      maxFileSize: MAX_FILE_SIZE,
      convertFormat: values.format,
    });
    const machine = machineBusySeconds() - machineBefore;
    const self = selfCpu() - selfBefore;
    const byProcess = cpuByProcess(
      cpuBefore,
      processes(),
      new Map(children.map((c) => [c.child.pid!, c.name])),
    );
    const ours = [...byProcess.values()].reduce((a, b) => a + b, self);
    const cpu = [...byProcess]
      .filter(([, seconds]) => seconds >= 0.05)
      .sort(([, a], [, b]) => b - a)
      .map(([label, seconds]) => `${label} ${seconds.toFixed(1)}`);
    out(formatTable(result));
    out('');
    out(
      `CPU seconds over ${(result.elapsedMs / 1000).toFixed(1)} s: machine ${machine.toFixed(1)} ` +
        `(${(machine / (result.elapsedMs / 1000)).toFixed(2)} cores busy), of which this run ` +
        `${ours.toFixed(1)}: ${cpu.join(', ')}, bench process (the clients) ` +
        `${self.toFixed(1)}; other processes on the machine ${(machine - ours).toFixed(1)}`,
    );

    const check = await verifyLoad(ctx, result);
    const deliberate = result.uploads.filter((u) => u.expected === 'refused').length;
    out('');
    out('## invariants');
    out(
      `uploads: ${check.storedUploads} stored, ${check.refusedUploads} refused (${deliberate} deliberately); ` +
        `conversions stored: ${check.storedConversions}; records: ${check.records}; objects: ${check.objects}; ` +
        `failed jobs: ${check.failedJobs}`,
    );
    const fiveHundreds = ENDPOINTS.flatMap((e) =>
      Object.entries(result.endpoints[e].statuses)
        .filter(([s]) => s === 'error' || Number(s) >= 500)
        .map(([s, n]) => `${e} ${s}: ${n}`),
    );
    const problems = [
      ...fiveHundreds.map((p) => `5xx or no answer: ${p}`),
      ...result.unexpected.map((u) => `unexpected ${u.endpoint} ${u.status}: ${u.detail}`),
      ...result.downloadMismatches.map((m) => `download mismatch: ${m}`),
      ...check.violations,
      ...(check.failedJobs > 0 ? [`${check.failedJobs} failed jobs`] : []),
    ];
    out(problems.length === 0 ? 'all invariants hold' : problems.join('\n'));

    const keys: string[] = [];
    for await (const o of ctx.store.list('')) keys.push(o.key);
    await ctx.store.removeMany(keys);
    await createS3Client(config.s3!)
      .removeBucket(config.s3!.bucket)
      .catch(() => undefined);
    await ctx.connection.dropDatabase();
    await ctx.close();
    if (problems.length > 0) throw new Error(`${problems.length} problem(s), listed above`);
  } finally {
    // Each stops gracefully; a CPU profile is written as its process exits.
    await Promise.all(
      children.map(({ child }) =>
        child.exitCode !== null
          ? Promise.resolve()
          : new Promise<void>((resolve) => {
              const timer = setTimeout(resolve, 30_000);
              child.once('exit', () => {
                clearTimeout(timer);
                resolve();
              });
              child.kill('SIGTERM');
            }),
      ),
    );
    await services.stop();
  }
}

runBenchmark(main);
