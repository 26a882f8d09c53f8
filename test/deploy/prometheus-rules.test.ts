/**
 * deploy/prometheus/alerts.yml: `promtool check rules` accepts it, `promtool
 * test rules` passes its unit tests (alerts.test.yml), every expression uses
 * only metrics the service exports (or `up`, or what `reconcile
 * --pushgateway` pushes), the alerts cover what an operator must hear about,
 * and every runbook points at a heading that exists. Also lints the reconcile
 * push's exposition with `promtool check metrics`.
 *
 * Needs promtool (Debian's `prometheus` package; .ci/run installs it; PROMTOOL
 * overrides the command): the test fails, saying so, where it is missing.
 */
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { reconcileMetrics } from '../../api/cli/reconcile-metrics';
import { EMPTY_REPORT, exportedMetricNames, metricNamesIn } from '../support/promql';

const root = join(__dirname, '..', '..');
const dir = join(root, 'deploy', 'prometheus');
const PROMTOOL = process.env.PROMTOOL || 'promtool';

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
const rules = (
  parse(readFileSync(join(dir, 'alerts.yml'), 'utf8')) as { groups: { rules: Rule[] }[] }
).groups.flatMap((g) => g.rules);

function promtool(args: string[], input?: string): SpawnSyncReturns<string> {
  const run = spawnSync(PROMTOOL, args, { cwd: dir, encoding: 'utf8', input });
  if (run.error) {
    throw new Error(
      `promtool is needed to check deploy/prometheus (${run.error.message}). Install Debian's ` +
        '`prometheus` package (apt-get install prometheus; .ci/run does), or point PROMTOOL at one.',
    );
  }
  return run;
}

/** GitHub's anchor for a Markdown heading. */
const slug = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');

it('promtool check rules accepts the rules', () => {
  const run = promtool(['check', 'rules', 'alerts.yml']);
  expect({ code: run.status, out: run.stdout + run.stderr }).toEqual({
    code: 0,
    out: expect.stringContaining('SUCCESS') as string,
  });
});

it('promtool test rules passes the unit tests of the alerts', () => {
  const run = promtool(['test', 'rules', 'alerts.test.yml']);
  expect({ code: run.status, out: run.stdout + run.stderr }).toEqual({
    code: 0,
    out: expect.stringContaining('SUCCESS') as string,
  });
});

it('finds the metrics an expression selects, not its functions, keywords or labels', () => {
  expect(
    metricNamesIn(
      'sum by (queue) (rate(a_total{job="x", state=~"b|c"}[5m])) / on (queue) group_left ' +
        'max without (instance) (b_gauge offset 5m) > 0.5 and time() - c_seconds{d="e"} > 26 * 3600',
    ),
  ).toEqual(['a_total', 'b_gauge', 'c_seconds']);
});

it('every expression uses metrics that exist', async () => {
  const known = await exportedMetricNames();
  for (const rule of rules) {
    const used = metricNamesIn(rule.expr);
    expect(used.length).toBeGreaterThan(0);
    for (const name of used) {
      expect({ alert: rule.alert, name, exists: known.has(name) }).toEqual({
        alert: rule.alert,
        name,
        exists: true,
      });
    }
  }
});

it('alerts on backlog, failing jobs, targets down or flapping, reconcile findings and 5xx', () => {
  const uses = (metric: string) =>
    rules.filter((r) => r.alert && metricNamesIn(r.expr).includes(metric)).map((r) => r.alert);
  expect(uses('media_queue_jobs')).toEqual(
    expect.arrayContaining(['MediaQueueBacklogGrowing', 'MediaQueueStalled']),
  );
  expect(uses('media_job_duration_seconds_count')).toContain('MediaJobsFailing');
  expect(uses('up')).toEqual(
    expect.arrayContaining(['MediaTargetDown', 'MediaTargetFlapping', 'MediaApiRedisUnreachable']),
  );
  expect(uses('media_reconcile_findings')).toContain('MediaReconcileFindings');
  // What an operator alerts on past one machine: queue wait, failures by code, dependencies.
  expect(uses('media_job_wait_seconds_bucket')).toContain('MediaJobWaitHigh');
  expect(uses('media_job_failures_total')).toContain('MediaJobsFailingOnServerErrors');
  expect(uses('media_dependency_errors_total')).toContain('MediaDependencyErrors');
  expect(uses('media_dependency_duration_seconds_bucket')).toContain('MediaDependencySlow');
  expect(uses('media_reconcile_last_success_timestamp_seconds')).toContain('MediaReconcileStale');
  const fiveXx = rules.find((r) => r.alert === 'MediaHigh5xxRate');
  expect(fiveXx?.expr).toMatch(/http_request_duration_seconds_count\{[^}]*status=~"5\.\."/);
  for (const rule of rules) {
    expect({ alert: rule.alert, severity: rule.labels?.severity }).toEqual({
      alert: rule.alert,
      severity: expect.stringMatching(/^(warning|critical)$/) as string,
    });
    expect(rule.annotations?.summary).toBeTruthy();
  }
});

it('every runbook is a file and heading that exist', () => {
  for (const rule of rules) {
    const runbook = rule.annotations?.runbook;
    expect({ alert: rule.alert, runbook }).toEqual({
      alert: rule.alert,
      runbook: expect.any(String) as string,
    });
    const [file, anchor] = runbook!.split('#');
    expect(existsSync(join(root, file!))).toBe(true);
    if (anchor) {
      const headings = [...readFileSync(join(root, file!), 'utf8').matchAll(/^#{1,6} (.+)$/gm)].map(
        (m) => slug(m[1]!),
      );
      expect({ runbook, found: headings.includes(anchor) }).toEqual({ runbook, found: true });
    }
  }
});

it("promtool check metrics accepts the reconcile push's exposition", () => {
  const text = reconcileMetrics(
    {
      ...EMPTY_REPORT,
      clean: false,
      incompleteUploads: [{ key: 'a', uploadId: 'u', initiated: '' }],
    },
    { seconds: 2.5, finishedAt: new Date() },
  );
  const run = promtool(['check', 'metrics'], text);
  expect({ code: run.status, out: run.stdout + run.stderr }).toEqual({ code: 0, out: '' });
});
