/**
 * The benchmark suite: starts the services the way the tests do,
 * one API process and the worker processes each benchmark asks for, runs the
 * benchmarks one after another, and writes `results.json`, one SVG chart per
 * chart and the markdown page.
 *
 *   npm run bench                       full run: dist/ processes (built first);
 *                                       writes docs/benchmarks.md and docs/benchmarks/
 *   npm run bench -- --quick            reduced sizes; dist/ processes when dist/ is current
 *                                       (as CI's build leaves it), else tsx ones (no build
 *                                       step); writes bench/out/ (part of `npm test`)
 *   npm run bench -- --only upload,merge  some benchmarks; the others' last results are kept
 *   npm run bench -- --render-only      the page again from the last results.json
 *   options: --out <dir>  --launch dist|tsx  --no-build
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { staleness } from '../dev/build-if-stale';
import { archive } from './benchmarks/archive';
import { consolePage } from './benchmarks/console';
import { convert } from './benchmarks/convert';
import { download } from './benchmarks/download';
import { heic } from './benchmarks/heic';
import { manage } from './benchmarks/manage';
import { merge } from './benchmarks/merge';
import { metadata } from './benchmarks/metadata';
import { pdfRender } from './benchmarks/pdf-render';
import { queue } from './benchmarks/queue';
import { render } from './benchmarks/render';
import { renderPeers } from './benchmarks/render-peers';
import { resumable } from './benchmarks/resumable';
import { directUpload } from './benchmarks/direct-upload';
import { scaling } from './benchmarks/scaling';
import { scan } from './benchmarks/scan';
import { tenancy } from './benchmarks/tenancy';
import { importUrl } from './benchmarks/import';
import { upload } from './benchmarks/upload';
import { uploadMemory } from './benchmarks/upload-memory';
import { webhooks } from './benchmarks/webhooks';
import { MiB, type Benchmark } from './lib/benchmark';
import { renderSvg } from './lib/charts';
import { machineInfo } from './lib/proc';
import { markdownTable, renderMarkdown, type BenchmarkResult, type RunResult } from './lib/report';
import { Stack, type LaunchMode } from './lib/stack';
import { runBenchmark, startServices } from './services';

/** In the order the page lists them (the issue's numbering). */
export const BENCHMARKS: Benchmark[] = [
  upload,
  uploadMemory,
  convert,
  queue,
  metadata,
  merge,
  scaling,
  manage,
  render,
  renderPeers,
  pdfRender,
  heic,
  tenancy,
  webhooks,
  scan,
  importUrl,
  download,
  archive,
  resumable,
  consolePage,
  directUpload,
];

const root = join(__dirname, '..');
const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    out: { type: 'string' },
    launch: { type: 'string' },
    'no-build': { type: 'boolean', default: false },
    'render-only': { type: 'boolean', default: false },
  },
});
const quick = values.quick;
const outDir = resolve(values.out ?? (quick ? 'bench/out' : 'docs'));
const chartDir = join(outDir, 'benchmarks');
/**
 * --quick without --launch runs dist/ when it is current (built from the sources as they are,
 * the check `npm start` makes: CI builds before `npm test`), since a process from dist/ starts
 * on half the CPU of a tsx one and the quick run starts dozens; else the sources through tsx,
 * never waiting for a build.
 */
const distCurrent = quick && values.launch === undefined && staleness(root) === undefined;
const launch: LaunchMode =
  (values.launch as LaunchMode | undefined) ?? (quick && !distCurrent ? 'tsx' : 'dist');
if (launch !== 'dist' && launch !== 'tsx') throw new Error('--launch is dist or tsx');
const only = values.only?.split(',').map((s) => s.trim());
for (const id of only ?? []) {
  if (!BENCHMARKS.some((b) => b.id === id)) {
    throw new Error(`unknown benchmark "${id}" (known: ${BENCHMARKS.map((b) => b.id).join(', ')})`);
  }
}
/**
 * The order they run in: metadata (two workers at the default concurrency)
 * before the ones that run workers one job at a time, so workers restart once.
 */
const RUN_ORDER = [
  'upload',
  'upload-memory',
  'archive',
  'queue',
  'metadata',
  'convert',
  'render',
  'render-peers',
  'pdf-render',
  'merge',
  'scaling',
  'heic',
  'tenancy',
  'scan',
  'import',
  'download',
  'resumable',
  'direct-upload',
];
const selected = BENCHMARKS.filter((b) => !only || only.includes(b.id)).sort(
  (a, b) => RUN_ORDER.indexOf(a.id) - RUN_ORDER.indexOf(b.id),
);
const log = (line: string) => process.stderr.write(`[bench] ${line}\n`);
/**
 * Sections kept by hand beside the suite's: every `docs/benchmarks/*.md`, in
 * name order (round-trips.md, which bench/round-trips.ts prints, and
 * before/after comparisons whose "before" needs older code).
 */
const appendixDir = join(root, 'docs', 'benchmarks');
const isAppendix = (name: string) => name.endsWith('.md');
function readAppendix(): string {
  if (!existsSync(appendixDir)) return '';
  return readdirSync(appendixDir)
    .filter(isAppendix)
    .sort()
    .map((name) => readFileSync(join(appendixDir, name), 'utf8').trim())
    .join('\n\n');
}

const PREAMBLE = `
How fast the service is and how much memory it takes, each figure beside its
physical limit or a peer doing the same work, measured on the kind of machine
named below. Run it yourself with \`npm run bench\` (about 10 minutes here; it
rewrites this page, \`docs/benchmarks/results.json\` and the charts), or
\`npm run bench -- --only upload,merge\` for some of them. \`npm run bench --
--quick\` runs every benchmark with small sizes in under a minute and writes
to \`bench/out/\`; \`npm test\` runs it, so the suite cannot rot unnoticed.

How to read it: every figure is the **median over repeated runs, with the
min–max of the runs** in brackets. Every comparison is a **ratio measured in
the same run**, the two sides alternating round by round against the same
services, and the ratio is taken per round: absolute times on a shared
machine wander, ratios much less. The services are the ones the tests use
(resolved the same way, see [testing.md](testing.md)); the API and worker
processes run from \`dist/\` with the flags of \`npm run start:api\` and
\`npm run start:worker\`. A missed target is listed with how far it is
missed and what the measurements say about why.`;

/** The page again from the last results.json (after editing the method texts or the appendix). */
function renderOnly(): void {
  const run = JSON.parse(readFileSync(join(chartDir, 'results.json'), 'utf8')) as RunResult;
  const appendix = readAppendix();
  writeFileSync(
    join(outDir, 'benchmarks.md'),
    renderMarkdown(run, relative(outDir, chartDir), PREAMBLE, appendix),
  );
}

async function main(): Promise<void> {
  if (values['render-only']) return renderOnly();
  const started = new Date();
  const t0 = performance.now();
  const machine = machineInfo();
  if (launch === 'dist' && !values['no-build'] && !distCurrent) {
    log('building dist/ …');
    execFileSync('npm', ['run', '--silent', 'build'], { cwd: root, stdio: 'inherit' });
  }
  if (quick)
    log(`API and workers from ${launch === 'dist' ? 'dist/ (current)' : 'the sources (tsx)'}`);
  log('starting services …');
  const services = await startServices();
  for (const line of services.describe().split('\n')) log(line);
  const results: BenchmarkResult[] = [];
  const failures: RunResult['failures'] = [];
  const stack = await Stack.start(services, launch, {
    LOG_LEVEL: 'warn',
    MAX_FILE_SIZE: String(2048 * MiB),
    JOB_WAIT_MS: '120000',
    // Quick mode restarts processes between phases with requests still waiting on
    // jobs a phase left behind (the tenancy flood's): a short budget, not the 25 s default.
    ...(quick ? { SHUTDOWN_TIMEOUT_MS: '3000' } : {}),
  });
  try {
    for (const benchmark of selected) {
      log(`${benchmark.id} …`);
      const t = performance.now();
      try {
        const result = await benchmark.run({ quick, stack, machine, log });
        result.seconds = (performance.now() - t) / 1000;
        results.push(result);
        log(`${benchmark.id}: ${result.seconds.toFixed(1)} s`);
      } catch (err) {
        const error = err instanceof Error ? (err.stack ?? err.message) : String(err);
        log(`${benchmark.id} FAILED: ${error}`);
        failures.push({ id: benchmark.id, error });
      }
      await stack.clear().catch(() => undefined);
    }
  } finally {
    await stack.stop().catch((err: unknown) => log(`cleanup: ${String(err)}`));
    await services.stop();
  }

  // In the page's order; with --only, the other benchmarks' last results stay on the page.
  const previousFile = join(chartDir, 'results.json');
  let benchmarks = BENCHMARKS.flatMap((b) => results.filter((r) => r.id === b.id));
  if (only && existsSync(previousFile)) {
    const previous = JSON.parse(readFileSync(previousFile, 'utf8')) as RunResult;
    const m = previous.machine;
    const earlier = {
      startedAt: previous.startedAt,
      machine: `${m.cpuModel}, ${m.cores} cores, Node ${m.node}`,
    };
    benchmarks = BENCHMARKS.flatMap(
      (b) =>
        results.find((r) => r.id === b.id) ??
        previous.benchmarks
          .filter((r) => r.id === b.id)
          // Kept: it says when it ran (a result kept twice keeps its first run's).
          .map((r) => ({ ranIn: earlier, ...r })),
    );
  }
  const run: RunResult = {
    mode: quick ? 'quick' : 'full',
    startedAt: started.toISOString(),
    seconds: (performance.now() - t0) / 1000,
    machine,
    services: Object.fromEntries(
      services
        .describe()
        .split('\n')
        .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 2)]),
    ),
    processes:
      launch === 'dist'
        ? 'API and workers from dist/ (`npm run start:api` / `start:worker` flags and environment)'
        : 'API and workers from the TypeScript sources through tsx (quick mode)',
    benchmarks,
    failures,
  };

  // A full run starts the folder afresh, but for the appendix kept there by hand.
  if (!only && existsSync(chartDir)) {
    for (const f of readdirSync(chartDir, { withFileTypes: true })) {
      if (!(join(chartDir, f.name).startsWith(appendixDir) && isAppendix(f.name)))
        rmSync(join(chartDir, f.name), { recursive: true, force: true });
    }
  }
  mkdirSync(chartDir, { recursive: true });
  for (const b of benchmarks) {
    for (const chart of b.charts) {
      writeFileSync(join(chartDir, `${chart.id}.svg`), await renderSvg(chart.spec));
    }
  }
  writeFileSync(previousFile, `${JSON.stringify(run, null, 2)}\n`);
  const page = join(outDir, 'benchmarks.md');
  const appendix = readAppendix();
  writeFileSync(page, renderMarkdown(run, relative(outDir, chartDir), PREAMBLE, appendix));

  for (const b of results) {
    process.stdout.write(`\n## ${b.title}\n`);
    for (const table of b.tables) process.stdout.write(`${markdownTable(table)}\n`);
    for (const t of b.targets) {
      process.stdout.write(
        `target ${t.what}: ${t.op} ${t.limit} ${t.unit}, median ${t.measured.median.toFixed(3)}: ${t.met ? 'met' : 'MISSED'}\n`,
      );
    }
  }
  process.stdout.write(
    `\n${relative(process.cwd(), page)} written (${run.seconds.toFixed(0)} s, ${failures.length} failed)\n`,
  );
  if (failures.length) throw new Error(`failed: ${failures.map((f) => f.id).join(', ')}`);
}

runBenchmark(main);
