/**
 * What the monitoring files (deploy/prometheus, deploy/grafana) may refer to:
 * the metric names the service really exports, read from the registries of
 * shared/metrics.ts after one observation each, what `reconcile
 * --pushgateway` pushes, and Prometheus's own `up`; and the metric names a
 * PromQL expression uses; what an expression answers over given series
 * (through promtool), and the queue counts of API replicas mid-upgrade.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { reconcileMetrics } from '../../api/cli/reconcile-metrics';
import type { ReconcileReport } from '../../api/services/reconcile.service';
import { createApiMetrics, createWorkerMetrics } from '../../shared/metrics';

/** Sample names of a Prometheus text exposition (histograms give _bucket, _sum and _count). */
function sampleNames(text: string): string[] {
  return text
    .split('\n')
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(l)![0]);
}

export const EMPTY_REPORT: ReconcileReport = {
  scope: {
    organization: null,
    prefix: '',
    olderThanMs: 3_600_000,
    cutoff: new Date(0).toISOString(),
  },
  fixed: false,
  clean: true,
  objectsWithoutRecord: [],
  recordsWithoutObject: [],
  incompleteUploads: [],
  deletesInProgress: [],
  restoresInProgress: [],
  unwrittenVariants: [],
  usageDrift: [],
  scanned: { objects: 0, records: 0, incompleteUploads: 0, tooRecent: 0, ownedByJobs: 0 },
};

/** Every metric name a scrape of the API, a worker or the reconcile push can carry. */
export async function exportedMetricNames(): Promise<Set<string>> {
  const api = createApiMetrics({
    queueCounts: () =>
      Promise.resolve({
        image: { waiting: 0 },
        pdf: { waiting: 0 },
        maintenance: { waiting: 0 },
        webhook: { waiting: 0 },
        scan: { waiting: 0 },
        import: { waiting: 0 },
      }),
  });
  api.observeRequest('GET', '/media/download', 200, 0.01);
  api.bytesStored('/media/upload', 1);
  api.bytesServed(1);
  api.observeDependency('storage', 'put', 0.01, false);
  const worker = createWorkerMetrics();
  worker.observeJob('image', 'image.convert', 'completed', 0.5);
  worker.observeWait('image', 'image.convert', 0.1);
  worker.jobFailed('image', 'image.convert', 'INTERNAL', 'failed');
  worker.scanned('clean', 0.01, 1);
  worker.observeDependency('mongodb', 'insert', 0.01, false);
  const texts = [
    await api.render(),
    await worker.render(),
    reconcileMetrics(EMPTY_REPORT, { seconds: 1, finishedAt: new Date() }),
  ];
  return new Set([...texts.flatMap(sampleNames), 'up']);
}

const KEYWORDS = new Set([
  'and',
  'or',
  'unless',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'bool',
  'offset',
  'inf',
  'nan',
]);

/**
 * The metric names a PromQL expression selects: identifiers that are neither
 * functions nor aggregations (followed by `(`), keywords, label names (inside
 * `{…}` or a `by (…)`-like list), durations or strings.
 */
export function metricNamesIn(expr: string): string[] {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'/g, '""') // strings
    .replace(/\{[^}]*\}/g, '') // label matchers
    .replace(/\[[^\]]*\]/g, '') // ranges and subqueries
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, '') // label lists
    .replace(/\$\{?\w+\}?/g, '1'); // Grafana variables ($__rate_interval, $pool)
  const names = new Set<string>();
  for (const m of stripped.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const name = m[0];
    const after = stripped.slice(m.index + name.length).trimStart();
    if (after.startsWith('(') || KEYWORDS.has(name.toLowerCase())) continue;
    if (/^\d/.test(name) || /^[smhdwy]$/.test(name)) continue;
    names.add(name);
  }
  return [...names];
}

/** An input series of a promtool unit test: `name{labels}` and its values (`2x5`: 2, six times). */
export interface PromSeries {
  series: string;
  values: string;
}

/**
 * `media_queue_jobs` as two API replicas read one queue during a rolling
 * upgrade (`labels`: the series' other labels, such as queue and namespace):
 * api-0, with the fair gate, reads 1 waiting, 5 held, 2 prioritized (queued by
 * the older API), 3 active and 9 delayed (retries); api-1, from before the
 * gate, reads the same but no `held`, its 5 held jobs among 14 delayed. The
 * queue's backlog is `BACKLOG_MID_UPGRADE` (1 + 5 + 2, one replica's reading).
 */
export function queueJobsMidUpgrade(labels: Record<string, string>): PromSeries[] {
  const selector = (instance: string, state: string) =>
    `media_queue_jobs{${Object.entries({ job: 'media-api', instance, ...labels, state })
      .map(([k, v]) => `${k}="${v}"`)
      .join(', ')}}`;
  const readings: Record<string, Record<string, number>> = {
    'api-0:3000': { waiting: 1, held: 5, prioritized: 2, active: 3, delayed: 9 },
    'api-1:3000': { waiting: 1, prioritized: 2, active: 3, delayed: 14 },
  };
  return Object.entries(readings).flatMap(([instance, states]) =>
    Object.entries(states).map(([state, n]) => ({
      series: selector(instance, state),
      values: `${n}x5`,
    })),
  );
}
export const BACKLOG_MID_UPGRADE = 8;

/**
 * Runs `expr` through `promtool test rules` over `series` (a sample a minute)
 * at minute 2: it must answer exactly `expected` (`labels` as promtool writes
 * them, `{}` for none). Throws with promtool's report otherwise, and saying so
 * where promtool is missing (PROMTOOL overrides the command).
 */
export function expectPromqlAnswer(
  expr: string,
  series: PromSeries[],
  expected: { labels: string; value: number }[],
): void {
  const dir = mkdtempSync(join(tmpdir(), 'media-promql-'));
  try {
    const file = join(dir, 'query.test.yml');
    writeFileSync(
      file,
      stringify({
        evaluation_interval: '1m',
        tests: [
          {
            interval: '1m',
            input_series: series,
            promql_expr_test: [{ expr, eval_time: '2m', exp_samples: expected }],
          },
        ],
      }),
    );
    const run = spawnSync(process.env.PROMTOOL || 'promtool', ['test', 'rules', file], {
      encoding: 'utf8',
    });
    if (run.error)
      throw new Error(
        `promtool is needed to evaluate PromQL (${run.error.message}): apt-get install prometheus, or set PROMTOOL.`,
      );
    if (run.status !== 0) throw new Error(`${expr}\n${run.stdout}${run.stderr}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
