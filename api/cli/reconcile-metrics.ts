/**
 * A reconcile run's findings as Prometheus metrics, pushed to a Pushgateway
 * (`reconcile --pushgateway <url>`), so that a scheduled run (the Kubernetes
 * CronJob in deploy/kubernetes) becomes something an alert can watch
 * (deploy/prometheus/alerts.yml). Formatted by hand: shared/metrics.ts is the
 * one module that knows prom-client, and a push is a single PUT of text.
 */
import type { ReconcileReport } from '../services/reconcile.service';

/** The `job` label the metrics are pushed under (the Pushgateway's grouping key). */
export const RECONCILE_PUSH_JOB = 'media_reconcile';

/** How long a push may take before the command gives up on it. */
const PUSH_TIMEOUT_MS = 10_000;

/** The metrics of one completed run, in Prometheus text format (0.0.4). */
export function reconcileMetrics(
  report: ReconcileReport,
  run: { seconds: number; finishedAt: Date },
): string {
  const lines: string[] = [];
  const gauge = (name: string, help: string, samples: [labels: string, value: number][]) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`);
    for (const [labels, value] of samples) lines.push(`${name}${labels} ${value}`);
  };
  gauge(
    'media_reconcile_findings',
    'What the last completed reconcile run found, by kind (left in place unless media_reconcile_fixed is 1)',
    [
      ['{kind="objects_without_record"}', report.objectsWithoutRecord.length],
      ['{kind="records_without_object"}', report.recordsWithoutObject.length],
      ['{kind="incomplete_uploads"}', report.incompleteUploads.length],
      ['{kind="deletes_in_progress"}', report.deletesInProgress.length],
      ['{kind="usage_drift"}', report.usageDrift.length],
    ],
  );
  gauge(
    'media_reconcile_fixed',
    '1 when the run removed what it found (--fix), 0 when it only reported',
    [['', report.fixed ? 1 : 0]],
  );
  gauge('media_reconcile_scanned', 'What the last completed reconcile run looked at, by kind', [
    ['{what="objects"}', report.scanned.objects],
    ['{what="records"}', report.scanned.records],
    ['{what="incomplete_uploads"}', report.scanned.incompleteUploads],
    ['{what="too_recent"}', report.scanned.tooRecent],
    ['{what="owned_by_jobs"}', report.scanned.ownedByJobs],
  ]);
  gauge('media_reconcile_duration_seconds', 'How long the last completed reconcile run took', [
    ['', run.seconds],
  ]);
  gauge(
    'media_reconcile_last_success_timestamp_seconds',
    'When the last reconcile run completed (Unix time); a failed run pushes nothing',
    [['', Math.floor(run.finishedAt.getTime() / 1000)]],
  );
  return `${lines.join('\n')}\n`;
}

/**
 * Replaces the metrics of this run's group on the Pushgateway (HTTP PUT to
 * `<url>/metrics/job/media_reconcile[/<label>/<value>…]`; credentials in the
 * URL are sent as HTTP Basic). Throws when the Pushgateway does not answer
 * 2xx within 10 s.
 */
export async function pushMetrics(
  url: string,
  body: string,
  grouping: Record<string, string> = {},
): Promise<void> {
  const target = new URL(url);
  const headers: Record<string, string> = { 'Content-Type': 'text/plain; version=0.0.4' };
  if (target.username || target.password) {
    const user = decodeURIComponent(target.username);
    const password = decodeURIComponent(target.password);
    headers.Authorization = `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
    target.username = '';
    target.password = '';
  }
  const group = ['job', RECONCILE_PUSH_JOB, ...Object.entries(grouping).flat()];
  target.pathname = `${target.pathname.replace(/\/+$/, '')}/metrics/${group
    .map(encodeURIComponent)
    .join('/')}`;
  let res: Response;
  try {
    res = await fetch(target, {
      method: 'PUT',
      headers,
      body,
      signal: AbortSignal.timeout(PUSH_TIMEOUT_MS),
    });
  } catch (err) {
    throw new Error(
      `the Pushgateway at ${target.href} did not answer: ${err instanceof Error ? err.message : String(err)}`,
      { cause: err },
    );
  }
  if (!res.ok) {
    const text = (await res.text().catch(() => '')).slice(0, 500).trim();
    throw new Error(`the Pushgateway at ${target.href} answered ${res.status}: ${text}`);
  }
}
