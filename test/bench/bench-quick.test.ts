/**
 * The benchmark suite's quick mode, run as a person runs it
 * (`npm run bench -- --quick`) against the services the harness resolved: it
 * must finish, run every benchmark, and write results.json, the page and one
 * SVG per chart, with figures that are numbers a reader can use. It asserts
 * that the suite works, not how fast anything is (the quick sizes are too
 * small for that, and the machine is shared); leaving nothing behind is
 * checked too.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { RunResult } from '../../bench/lib/report';
import type { Stat } from '../../bench/lib/stats';
import { createS3Client } from '../../shared/storage/s3-client';
import { redisUrl, s3Endpoint } from '../support/context';

const root = join(__dirname, '..', '..');
const out = mkdtempSync(join(tmpdir(), 'bench-quick-'));
const IDS = [
  'upload',
  'upload-memory',
  'convert',
  'queue',
  'metadata',
  'merge',
  'scaling',
  'manage',
  'render',
  'render-peers',
  'pdf-render',
  'heic',
  'tenancy',
  'webhooks',
  'scan',
  'import',
  'download',
  'archive',
  'resumable',
  'console',
  'direct-upload',
];

let run: { code: number; stdout: string; stderr: string; seconds: number };
let result: RunResult;

beforeAll(async () => {
  const s3 = s3Endpoint();
  const started = performance.now();
  try {
    const { stdout, stderr } = await promisify(execFile)(
      'npm',
      ['run', '--silent', 'bench', '--', '--quick', '--out', out],
      {
        cwd: root,
        env: {
          ...process.env,
          REDIS_URL: redisUrl(),
          MONGODB_URI: process.env.TEST_MONGODB_URI,
          S3_ENDPOINT: s3.endpoint,
          S3_REGION: s3.region,
          S3_ACCESS_KEY: s3.accessKey,
          S3_SECRET_KEY: s3.secretKey,
        },
        maxBuffer: 64 * 1024 * 1024,
        // A bound, not a speed check: a run past it is stopped rather than left running.
        timeout: 580_000,
      },
    );
    run = { code: 0, stdout, stderr, seconds: (performance.now() - started) / 1000 };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    run = { ...e, seconds: (performance.now() - started) / 1000 };
  }
  const file = join(out, 'benchmarks', 'results.json');
  if (existsSync(file)) result = JSON.parse(readFileSync(file, 'utf8')) as RunResult;
}, 600_000);
afterAll(() => rmSync(out, { recursive: true, force: true }));

const isStat = (v: unknown): v is Stat =>
  typeof v === 'object' && v !== null && 'median' in v && 'runs' in v;

it('runs every benchmark and exits 0', () => {
  if (run.code !== 0) {
    // Each failed benchmark's own error (its stack), which later benchmarks'
    // log lines would push out of the stderr's tail.
    const failed = result?.failures.map((f) => `${f.id}: ${f.error}`).join('\n') ?? '';
    throw new Error(`bench exited ${run.code}:\n${failed}\n…\n${run.stderr.slice(-3000)}`);
  }
  expect(result.mode).toBe('quick');
  expect(result.failures).toEqual([]);
  expect(result.benchmarks.map((b) => b.id)).toEqual(IDS);
  process.stdout.write(`bench --quick: ${run.seconds.toFixed(0)} s in all\n`);
});

it('reports every figure as a median within the min-max of its runs', () => {
  let figures = 0;
  for (const b of result.benchmarks) {
    expect(b.tables.length).toBeGreaterThan(0);
    for (const table of b.tables) {
      expect(table.rows.length).toBeGreaterThan(0);
      for (const row of table.rows) {
        for (const column of table.columns) expect(row).toHaveProperty(column.key);
        for (const cell of Object.values(row).filter(isStat)) {
          figures++;
          expect(cell.runs.length).toBeGreaterThan(0);
          for (const x of [cell.median, cell.min, cell.max]) expect(Number.isFinite(x)).toBe(true);
          expect(cell.min).toBeLessThanOrEqual(cell.median);
          expect(cell.median).toBeLessThanOrEqual(cell.max);
        }
      }
    }
  }
  expect(figures).toBeGreaterThan(40);
});

it('measures what each benchmark is about (positive rates, the targets the issue names)', () => {
  const byId = Object.fromEntries(result.benchmarks.map((b) => [b.id, b]));
  const stats = (id: string, key: string) =>
    byId[id]!.tables[0]!.rows.map((r) => r[key]).filter(isStat);
  for (const [id, key] of [
    ['upload', 'api'],
    ['upload', 'direct'],
    ['upload', 'ratio'],
    ['convert', 'api'],
    ['convert', 'direct'],
    ['metadata', 'rps'],
    ['merge', 'keys'],
    ['merge', 'qpdf'],
    ['scaling', 'rate'],
    ['manage', 'p50'],
    ['render', 'ratio'],
    ['pdf-render', 'p95'],
  ] as const) {
    const cells = stats(id, key);
    expect(cells.length).toBeGreaterThan(0);
    for (const cell of cells) expect(cell.median).toBeGreaterThan(0);
  }
  const targets = result.benchmarks.flatMap((b) => b.targets.map((t) => `${b.id}: ${t.what}`));
  expect(targets).toEqual(
    expect.arrayContaining([
      "upload: 1 MiB: API time − the store's streaming put",
      "upload: 10 MiB: API ÷ the store's streaming put",
      'queue: p50 round trip',
      'queue: p99 round trip',
      'merge: 10 inputs: endpoint time ÷ S3 fetch + qpdf + S3 put',
    ]),
  );
  expect(byId['upload-memory']!.targets).toHaveLength(2);
  expect(byId.convert!.targets).toHaveLength(4);
  // A stored variant beside a download; first renders with 1 and 2 workers.
  expect(byId.render!.targets).toHaveLength(3);
  // Beside ipx: first renders, repeated renders and revalidations, each at 1 and 4 clients.
  expect(byId['render-peers']!.targets).toHaveLength(6);
  for (const b of result.benchmarks) {
    for (const t of b.targets) {
      expect(t.met).toBe(
        t.op === '>=' ? t.measured.median >= t.limit : t.measured.median <= t.limit,
      );
    }
  }
});

it('writes the page with a section, a table and a chart per benchmark', () => {
  const page = readFileSync(join(out, 'benchmarks.md'), 'utf8');
  expect(page).toContain('mode: **quick**');
  expect(page).toMatch(/\*\*\d+ cores\*\*/);
  for (const [i, b] of result.benchmarks.entries()) {
    expect(page).toContain(`## ${i + 1}. ${b.title}`);
    expect(b.charts.length).toBeGreaterThan(0);
    for (const chart of b.charts) {
      expect(page).toContain(`(benchmarks/${chart.id}.svg)`);
      const svg = readFileSync(join(out, 'benchmarks', `${chart.id}.svg`), 'utf8');
      expect(svg).toMatch(/^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
      // The chart's own title, and marks drawn from its data.
      const title = chart.spec.title;
      expect(typeof title).toBe('string');
      expect(svg).toContain(`aria-label="Title text '${title as string}'"`);
      expect(svg).toMatch(/role-mark layer_0(_layer_0)?_marks[^>]*>\s*<(path|line|text)/);
    }
  }
});

it('leaves no bucket behind', async () => {
  const buckets = (await createS3Client(s3Endpoint()).listBuckets()).map((b) => b.name);
  expect(buckets.filter((name) => name.startsWith('bench-'))).toEqual([]);
});
