/**
 * What the monitoring files (deploy/prometheus, deploy/grafana) may refer to:
 * the metric names the service really exports, read from the registries of
 * shared/metrics.ts after one observation each, what `reconcile
 * --pushgateway` pushes, and Prometheus's own `up`; and the metric names a
 * PromQL expression uses.
 */
import { reconcileMetrics } from '../../api/services/reconcile-metrics';
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
  usageDrift: [],
  scanned: { objects: 0, records: 0, incompleteUploads: 0, tooRecent: 0, ownedByJobs: 0 },
};

/** Every metric name a scrape of the API, a worker or the reconcile push can carry. */
export async function exportedMetricNames(): Promise<Set<string>> {
  const api = createApiMetrics({
    queueCounts: () =>
      Promise.resolve({ image: { waiting: 0 }, pdf: { waiting: 0 }, maintenance: { waiting: 0 } }),
  });
  api.observeRequest('GET', '/media/download', 200, 0.01);
  api.bytesStored('/media/upload', 1);
  api.bytesServed(1);
  api.observeDependency('storage', 'put', 0.01, false);
  const worker = createWorkerMetrics();
  worker.observeJob('image', 'image.convert', 'completed', 0.5);
  worker.observeWait('image', 'image.convert', 0.1);
  worker.jobFailed('image', 'image.convert', 'INTERNAL', 'failed');
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
