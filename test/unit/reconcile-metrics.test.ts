/**
 * `reconcile --pushgateway <url>`: the report as Prometheus gauges, and the
 * PUT to a Pushgateway (here a local node:http server standing in for one).
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { RECONCILE_PUSH_JOB, pushMetrics, reconcileMetrics } from '../../api/cli/reconcile-metrics';
import type { ReconcileReport } from '../../api/services/reconcile.service';

const report: ReconcileReport = {
  scope: { organization: null, prefix: '', olderThanMs: 3_600_000, cutoff: '2026-01-01T00:00:00Z' },
  fixed: false,
  clean: false,
  objectsWithoutRecord: [
    {
      key: 'acme/a.jpg',
      bytes: 10,
      lastModified: '2025-12-31T00:00:00Z',
      temporary: false,
      variant: false,
    },
    {
      key: 'acme/.tmp/b.pdf',
      bytes: 20,
      lastModified: '2025-12-31T00:00:00Z',
      temporary: true,
      variant: false,
    },
  ],
  recordsWithoutObject: [],
  incompleteUploads: [{ key: 'acme/c.jpg', uploadId: 'u1', initiated: '2025-12-31T00:00:00Z' }],
  deletesInProgress: [],
  restoresInProgress: [],
  unwrittenVariants: [],
  usageDrift: [],
  scanned: { objects: 120, records: 118, incompleteUploads: 1, tooRecent: 3, ownedByJobs: 2 },
};

/** `name{labels} value` lines as a map. */
const samples = (text: string) =>
  new Map(
    text
      .split('\n')
      .filter((l) => l && !l.startsWith('#'))
      .map((l) => {
        const at = l.lastIndexOf(' ');
        return [l.slice(0, at), Number(l.slice(at + 1))] as const;
      }),
  );

describe('reconcileMetrics', () => {
  const text = reconcileMetrics(report, {
    seconds: 4.5,
    finishedAt: new Date('2026-01-01T01:00:00.900Z'),
  });

  it('has a gauge per finding kind, the scan counts, the duration and the time of success', () => {
    expect(Object.fromEntries(samples(text))).toEqual({
      'media_reconcile_findings{kind="objects_without_record"}': 2,
      'media_reconcile_findings{kind="deletes_in_progress"}': 0,
      'media_reconcile_findings{kind="usage_drift"}': 0,
      'media_reconcile_findings{kind="records_without_object"}': 0,
      'media_reconcile_findings{kind="incomplete_uploads"}': 1,
      media_reconcile_fixed: 0,
      'media_reconcile_scanned{what="objects"}': 120,
      'media_reconcile_scanned{what="records"}': 118,
      'media_reconcile_scanned{what="incomplete_uploads"}': 1,
      'media_reconcile_scanned{what="too_recent"}': 3,
      'media_reconcile_scanned{what="owned_by_jobs"}': 2,
      media_reconcile_duration_seconds: 4.5,
      media_reconcile_last_success_timestamp_seconds: 1767229200,
    });
  });

  it('is text format 0.0.4: HELP and TYPE before each metric, one trailing newline', () => {
    const lines = text.split('\n');
    expect(lines.at(-1)).toBe('');
    for (const name of new Set([...samples(text).keys()].map((k) => k.split('{')[0]!))) {
      const help = lines.indexOf(lines.find((l) => l.startsWith(`# HELP ${name} `))!);
      expect(help).toBeGreaterThanOrEqual(0);
      expect(lines[help + 1]).toBe(`# TYPE ${name} gauge`);
    }
    expect(
      reconcileMetrics({ ...report, fixed: true }, { seconds: 1, finishedAt: new Date() }),
    ).toContain('\nmedia_reconcile_fixed 1\n');
  });
});

describe('pushMetrics', () => {
  let server: Server;
  let base: string;
  let answer = 200;
  const received: {
    method?: string;
    url?: string;
    headers: IncomingMessage['headers'];
    body: string;
  }[] = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (body += chunk));
      req.on('end', () => {
        received.push({ method: req.method, url: req.url, headers: req.headers, body });
        res.writeHead(answer, { 'Content-Type': 'text/plain' }).end(answer === 200 ? '' : 'nope');
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));
  beforeEach(() => {
    received.length = 0;
    answer = 200;
  });

  it('PUTs the text under job="media_reconcile", with the grouping labels in the path', async () => {
    await pushMetrics(`${base}/`, 'a_metric 1\n');
    await pushMetrics(`${base}/prefix`, 'a_metric 2\n', { org: 'acme' });
    expect(received.map((r) => [r.method, r.url, r.body])).toEqual([
      ['PUT', `/metrics/job/${RECONCILE_PUSH_JOB}`, 'a_metric 1\n'],
      ['PUT', `/prefix/metrics/job/${RECONCILE_PUSH_JOB}/org/acme`, 'a_metric 2\n'],
    ]);
    expect(received[0]!.headers['content-type']).toBe('text/plain; version=0.0.4');
    expect(received[0]!.headers.authorization).toBeUndefined();
  });

  it('sends credentials in the URL as HTTP Basic, and never names them in an error', async () => {
    await pushMetrics(`${base.replace('http://', 'http://ops:s%3Acret@')}`, 'a_metric 1\n');
    expect(received[0]!.headers.authorization).toBe(
      `Basic ${Buffer.from('ops:s:cret').toString('base64')}`,
    );
    answer = 500;
    const failed = pushMetrics(base.replace('http://', 'http://ops:s%3Acret@'), 'a_metric 1\n');
    await expect(failed).rejects.toThrow(
      `the Pushgateway at ${base}/metrics/job/media_reconcile answered 500: nope`,
    );
    await failed.catch((err: Error) => expect(err.message).not.toContain('cret'));
  });

  it('fails with a message naming the Pushgateway when nothing answers', async () => {
    const closed = createServer();
    closed.listen(0, '127.0.0.1');
    await once(closed, 'listening');
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    await expect(pushMetrics(`http://127.0.0.1:${port}`, 'a_metric 1\n')).rejects.toThrow(
      `the Pushgateway at http://127.0.0.1:${port}/metrics/job/media_reconcile did not answer`,
    );
  });
});
