/**
 * deploy/grafana/media-service.json: it parses as a Grafana dashboard, its
 * panels fit the grid without overlapping, every PromQL expression uses only
 * metrics the service exports (or `up`, or the reconcile push), parses as
 * PromQL (promtool check rules on the expressions as recording rules, with the
 * dashboard's variables filled in), and the panels cover what an operator
 * watches: requests by route, latency, 5xx, queue depth, jobs, bytes stored,
 * process memory, CPU and event loop, reconcile. Each queue's backlog is
 * plotted as KEDA counts it (waiting + held, run through promtool).
 *
 * Needs promtool (Debian's `prometheus` package; .ci/run installs it; PROMTOOL
 * overrides the command): the test fails, saying so, where it is missing.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import {
  BACKLOG_MID_UPGRADE,
  expectPromqlAnswer,
  exportedMetricNames,
  metricNamesIn,
  queueJobsMidUpgrade,
} from '../support/promql';

const root = join(__dirname, '..', '..');
const PROMTOOL = process.env.PROMTOOL || 'promtool';

interface Target {
  expr: string;
  refId: string;
  legendFormat?: string;
  datasource?: { type: string; uid: string };
}
interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { h: number; w: number; x: number; y: number };
  datasource?: { type: string; uid: string };
  targets?: Target[];
}
interface Dashboard {
  title: string;
  uid: string;
  schemaVersion: number;
  panels: Panel[];
  templating: { list: { name: string; type: string; query: unknown; definition?: string }[] };
}

const dashboard = JSON.parse(
  readFileSync(join(root, 'deploy', 'grafana', 'media-service.json'), 'utf8'),
) as Dashboard;
const panels = dashboard.panels.filter((p) => p.type !== 'row');
const targets = panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, ...t })));
/** The expression as Prometheus sees it once Grafana filled in its variables. */
const asPromql = (expr: string) =>
  expr.replace(/\$__rate_interval|\$__interval|\$__range/g, '5m').replace(/\$namespace/g, '.*');

it('is a dashboard with a uid, a datasource variable and panels on the 24-column grid', () => {
  expect(dashboard.title).toBe('Media storage service');
  expect(dashboard.uid).toMatch(/^[a-z0-9-]{1,40}$/);
  expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
  expect(dashboard.templating.list.find((v) => v.name === 'datasource')).toMatchObject({
    type: 'datasource',
    query: 'prometheus',
  });
  const ids = dashboard.panels.map((p) => p.id);
  expect(new Set(ids).size).toBe(ids.length);
  const cells = new Set<string>();
  for (const p of dashboard.panels) {
    const { x, y, w, h } = p.gridPos;
    expect({ panel: p.title, fits: x >= 0 && w > 0 && x + w <= 24 && h > 0 }).toEqual({
      panel: p.title,
      fits: true,
    });
    for (let i = x; i < x + w; i++)
      for (let j = y; j < y + h; j++) {
        expect({ panel: p.title, overlaps: cells.has(`${i},${j}`) }).toEqual({
          panel: p.title,
          overlaps: false,
        });
        cells.add(`${i},${j}`);
      }
  }
});

it('every panel queries Prometheus through the datasource variable', () => {
  expect(panels.length).toBeGreaterThan(10);
  for (const p of panels) {
    expect({ panel: p.title, queries: (p.targets?.length ?? 0) > 0 }).toEqual({
      panel: p.title,
      queries: true,
    });
    expect(p.datasource).toEqual({ type: 'prometheus', uid: '${datasource}' });
    const refIds = p.targets!.map((t) => t.refId);
    expect(new Set(refIds).size).toBe(refIds.length);
  }
});

it('every expression references a metric that exists', async () => {
  const known = await exportedMetricNames();
  for (const t of targets) {
    const used = metricNamesIn(t.expr);
    expect(used.length).toBeGreaterThan(0);
    for (const name of used)
      expect({ panel: t.panel, name, exists: known.has(name) }).toEqual({
        panel: t.panel,
        name,
        exists: true,
      });
  }
  // The namespace variable lists the label's values from a metric that exists too.
  for (const v of dashboard.templating.list.filter((x) => x.type === 'query')) {
    const metric = /label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(v.definition ?? '')?.[1];
    expect(metric && known.has(metric)).toBe(true);
  }
});

it('every expression is valid PromQL (promtool check rules)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'grafana-promql-'));
  try {
    const file = join(dir, 'dashboard-exprs.yml');
    const rules = targets.map((t, i) => ({
      record: `dashboard:expr_${i}`,
      expr: asPromql(t.expr),
    }));
    writeFileSync(file, stringify({ groups: [{ name: 'dashboard', rules }] }));
    const run = spawnSync(PROMTOOL, ['check', 'rules', file], { encoding: 'utf8' });
    if (run.error) {
      throw new Error(
        `promtool is needed to check the dashboard's PromQL (${run.error.message}). Install ` +
          "Debian's `prometheus` package (apt-get install prometheus; .ci/run does), or point PROMTOOL at one.",
      );
    }
    expect({ code: run.status, out: run.stdout + run.stderr }).toEqual({
      code: 0,
      out: expect.stringContaining(`SUCCESS: ${rules.length} rules found`) as string,
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('covers requests, latency and 5xx by route, queues, jobs, bytes stored, processes, reconcile', () => {
  const panelsUsing = (metric: string, also: RegExp = /./) =>
    targets.filter((t) => metricNamesIn(t.expr).includes(metric) && also.test(t.expr));
  expect(panelsUsing('http_request_duration_seconds_count', /by \(route\)/).length).toBeGreaterThan(
    0,
  );
  expect(
    panelsUsing('http_request_duration_seconds_bucket', /histogram_quantile/).length,
  ).toBeGreaterThan(0);
  expect(
    panelsUsing('http_request_duration_seconds_count', /status=~"5\.\."/).length,
  ).toBeGreaterThan(0);
  expect(panelsUsing('media_queue_jobs', /waiting\|held/).length).toBeGreaterThan(0);
  expect(panelsUsing('media_job_duration_seconds_count', /outcome/).length).toBeGreaterThan(0);
  expect(
    panelsUsing('media_job_duration_seconds_bucket', /histogram_quantile/).length,
  ).toBeGreaterThan(0);
  expect(panelsUsing('media_bytes_stored_total').length).toBeGreaterThan(0);
  expect(panelsUsing('process_resident_memory_bytes').length).toBeGreaterThan(0);
  expect(panelsUsing('process_cpu_seconds_total', /rate\(/).length).toBeGreaterThan(0);
  expect(panelsUsing('nodejs_eventloop_lag_p99_seconds').length).toBeGreaterThan(0);
  expect(panelsUsing('media_reconcile_findings').length).toBeGreaterThan(0);
  expect(panelsUsing('media_bytes_served_total').length).toBeGreaterThan(0);
  expect(panelsUsing('media_job_wait_seconds_bucket', /histogram_quantile/).length).toBeGreaterThan(
    0,
  );
  expect(panelsUsing('media_job_failures_total', /by \([^)]*code/).length).toBeGreaterThan(0);
  expect(
    panelsUsing('media_dependency_duration_seconds_bucket', /histogram_quantile/).length,
  ).toBeGreaterThan(0);
  expect(panelsUsing('media_dependency_errors_total').length).toBeGreaterThan(0);
});

it("plots each queue's backlog as KEDA counts it: waiting + held (+ prioritized mid-upgrade)", () => {
  const backlog = targets.filter(
    (t) =>
      metricNamesIn(t.expr).includes('media_queue_jobs') && /backlog/.test(t.legendFormat ?? ''),
  );
  expect(backlog.map((t) => t.panel)).toEqual(['Queue depth']);
  // Two API replicas mid-upgrade, per queue: one replica's reading of each state, added up.
  expectPromqlAnswer(
    asPromql(backlog[0]!.expr),
    ['image', 'pdf'].flatMap((queue) => queueJobsMidUpgrade({ namespace: 'media', queue })),
    [
      { labels: '{queue="image"}', value: BACKLOG_MID_UPGRADE },
      { labels: '{queue="pdf"}', value: BACKLOG_MID_UPGRADE },
    ],
  );
});
