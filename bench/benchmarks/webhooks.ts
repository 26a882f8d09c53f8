/**
 * 12. Webhook delivery latency with a hanging endpoint: `media.created`
 * events of two organizations recorded in the outbox at a steady rate (as a
 * record's insert does; uploads themselves cannot keep 100 a second on this
 * machine beside the rest), each organization with one webhook endpoint on
 * loopback (opened through EGRESS_ALLOWLIST); one endpoint hangs 30 s on
 * every request (past the 15 s delivery timeout), the other answers at once.
 * The latency is from the event's commit (its `occurredAt`, the payload's
 * `timestamp`) to the message's arrival at the receiver.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Queue } from 'bullmq';
import { createLogger } from '../../shared/logger';
import { createRedis } from '../../shared/queue/redis';
import type { Benchmark, BenchContext } from '../lib/benchmark';
import { bars } from '../lib/charts';
import type { BenchmarkResult, Table } from '../lib/report';
import { target } from '../lib/report';
import { percentile, stat } from '../lib/stats';
import { deleteKeys } from '../lib/stack';

const HANG_MS = 30_000;
/**
 * --quick's delivery timeout (the default is 15 s): an attempt held by the hanging endpoint
 * ends in 2 s, so stopping the worker between scenarios does not wait out its 10 s grace.
 */
const QUICK_TIMEOUT_MS = 2_000;

async function receiver(host: string, hang: boolean, arrived: (body: string) => void) {
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      arrived(body);
      if (hang) setTimeout(() => res.end('late'), HANG_MS).unref();
      else res.writeHead(204).end();
    });
  });
  server.listen(0, host);
  await once(server, 'listening');
  return { server, url: `http://${host}:${(server.address() as AddressInfo).port}/hook` };
}

async function organization(ctx: BenchContext, slug: string, url: string) {
  const { token, organization: org } = await ctx.stack.data.organizations.create(slug, slug);
  const auth = { Authorization: `Bearer ${token.token}` };
  const res = await fetch(`${ctx.stack.url}/media/webhooks`, {
    method: 'POST',
    headers: { ...auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ url, events: ['media.created'] }),
  });
  if (res.status !== 201) throw new Error(`webhook of ${slug}: ${res.status} ${await res.text()}`);
  return org.id;
}

/** Empties the webhook queue and the endpoints' leases (workers stopped first). */
async function resetWebhooks(ctx: BenchContext): Promise<void> {
  const { stack } = ctx;
  await stack.setWorkers(0);
  const redis = createRedis(stack.config.redisUrl!, 'worker', createLogger({ level: 'warn' }));
  try {
    const queue = new Queue('webhook', { connection: redis, prefix: stack.config.queuePrefix });
    await queue.obliterate({ force: true });
    await queue.close();
    await deleteKeys(redis, `${stack.config.queuePrefix}:webhook-inflight*`);
  } finally {
    redis.disconnect();
  }
}

/**
 * Of the measured organization's first attempts (BullMQ keeps completed
 * jobs), from the commit: the job queued by the fan-out, and the job that
 * sent the message started (later when the attempt was parked for a slot of
 * its endpoint and queued again).
 */
async function jobStages(
  ctx: BenchContext,
  organizationId: number,
  occurred: Map<string, number>,
): Promise<{ queued: number[]; started: number[] }> {
  const { stack } = ctx;
  const redis = createRedis(stack.config.redisUrl!, 'worker', createLogger({ level: 'warn' }));
  const queue = new Queue('webhook', { connection: redis, prefix: stack.config.queuePrefix });
  try {
    const jobs = await queue.getJobs(['completed'], 0, 5_000);
    const queued: number[] = [];
    const started: number[] = [];
    for (const job of jobs) {
      const data = job.data as {
        organizationId: number;
        eventId?: string;
        attempt: number;
        waits: number;
      };
      const at = data.eventId ? occurred.get(data.eventId) : undefined;
      if (data.organizationId !== organizationId || data.attempt !== 1 || at === undefined)
        continue;
      if (data.waits === 0) queued.push(job.timestamp - at);
      const outcome = (job.returnvalue as { outcome?: string } | null)?.outcome;
      if (outcome === 'delivered' && job.processedOn) started.push(job.processedOn - at);
    }
    return { queued, started };
  } finally {
    await queue.close();
    redis.disconnect();
  }
}

interface Scenario {
  rate: number;
  /** The other organization's endpoint hangs (else it answers like the measured one). */
  hang: boolean;
  latencies: number[];
  expected: number;
  achieved: number;
  hung: number;
  failures: number;
  /**
   * Where the time goes, per message of the measured organization, from its
   * event's commit: to the dispatcher's mark (`dispatchedAt`), to its first
   * attempt's job queued, to that job started (ms).
   */
  dispatched: number[];
  queued: number[];
  started: number[];
}

/** One scenario: two fresh organizations, events at `rate` a second for `seconds`, the queue emptied after. */
async function scenario(
  ctx: BenchContext,
  urls: { fast: string; slow: string },
  arrivals: Map<number, number[]>,
  counts: { hung: number },
  rate: number,
  seconds: number,
  hang: boolean,
): Promise<Scenario> {
  const { stack } = ctx;
  const ports = [urls.fast, urls.slow].map((u) => new URL(u).port).join(',');
  const env = {
    EGRESS_ALLOWLIST: '127.0.0.3/32,127.0.0.4/32',
    EGRESS_ALLOWED_PORTS: ports,
    ...(ctx.quick ? { WEBHOOK_TIMEOUT_MS: String(QUICK_TIMEOUT_MS) } : {}),
  };
  // The API and the workers restart side by side.
  await Promise.all([stack.setApiEnv(env), stack.setWorkers(1, env)]);
  const stamp = `${Date.now()}`;
  const other = await organization(ctx, `hooks-other-${stamp}`, hang ? urls.slow : urls.fast);
  const measured = await organization(ctx, `hooks-measured-${stamp}`, urls.fast);
  const latencies: number[] = [];
  arrivals.set(measured, latencies);
  const hungBefore = counts.hung;
  ctx.log(
    `webhooks: ${rate} events/s for ${seconds} s, the other endpoint ${hang ? 'hanging' : 'answering'}`,
  );
  const total = rate * seconds;
  const outbox = stack.data.repositories.events;
  const started = performance.now();
  let failures = 0;
  const writes: Promise<void>[] = [];
  for (let i = 0; i < total; i++) {
    const due = started + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const organizationId = i % 2 ? measured : other;
    const at = new Date();
    const media = {
      id: i + 1,
      organizationId,
      folderId: null,
      key: `bench/dot-${stamp}-${i}.png`,
      name: `dot-${i}.png`,
      mimetype: 'image/png',
      bytes: 100,
      checksum: 'sha256:0',
      jobId: null,
      createdAt: at.toISOString(),
    };
    writes.push(
      outbox
        .record([
          {
            id: `media.created:bench-${stamp}-${i}`,
            type: 'media.created',
            organizationId,
            occurredAt: at,
            data: { media },
          },
        ])
        .then(
          () => undefined,
          () => void failures++,
        ),
    );
  }
  await Promise.all(writes);
  const achieved = total / ((performance.now() - started) / 1000);
  const expected = Math.floor(total / 2);
  const deadline = Date.now() + 90_000;
  while (latencies.length < expected && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
  }
  // Where the time goes: the commit to the dispatcher's mark, to the job queued, to the job started.
  const events = await stack.data.models.Event.find({ organizationId: measured }).lean().exec();
  const occurred = new Map(events.map((e) => [e._id, e.occurredAt.getTime()]));
  const dispatched = events.flatMap((e) =>
    e.dispatchedAt ? [e.dispatchedAt.getTime() - e.occurredAt.getTime()] : [],
  );
  const stages = await jobStages(ctx, measured, occurred);
  await resetWebhooks(ctx);
  return {
    rate,
    hang,
    latencies,
    expected,
    achieved,
    hung: counts.hung - hungBefore,
    failures,
    dispatched,
    ...stages,
  };
}

export const webhooks: Benchmark = {
  id: 'webhooks',
  title: 'Webhook delivery with a hanging endpoint',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack, quick } = ctx;
    const rates = quick ? [20] : [25, 100];
    const seconds = quick ? 1 : 20;
    // Arrivals at the answering receiver, by organization (the measured one's are kept).
    const arrivals = new Map<number, number[]>();
    const counts = { hung: 0 };
    const fast = await receiver('127.0.0.3', false, (body) => {
      const payload = JSON.parse(body) as {
        timestamp: string;
        data: { media: { organizationId: number } };
      };
      arrivals
        .get(payload.data.media.organizationId)
        ?.push(Date.now() - Date.parse(payload.timestamp));
    });
    const slow = await receiver('127.0.0.4', true, () => counts.hung++);
    const runs: Scenario[] = [];
    try {
      for (const rate of rates) {
        for (const hang of [false, true]) {
          runs.push(
            await scenario(
              ctx,
              { fast: fast.url, slow: slow.url },
              arrivals,
              counts,
              rate,
              seconds,
              hang,
            ),
          );
        }
      }
    } finally {
      await resetWebhooks(ctx);
      await stack.setApiEnv({});
      for (const r of [fast, slow]) {
        r.server.closeAllConnections();
        r.server.close();
      }
    }
    const table: Table = {
      columns: [
        { key: 'what', label: 'events a second (achieved), the other organization’s endpoint' },
        { key: 'n', label: 'messages arrived' },
        { key: 'p50', label: 'p50, ms', digits: 0 },
        { key: 'p99', label: 'p99, ms', digits: 0 },
        { key: 'max', label: 'max, ms', digits: 0 },
        { key: 'd99', label: 'p99 from the commit to: the dispatcher’s mark, ms', digits: 0 },
        { key: 'q99', label: '… the delivery job queued, ms', digits: 0 },
        { key: 's99', label: '… the sending attempt started, ms', digits: 0 },
      ],
      rows: runs.map((r) => ({
        what: `${r.rate} (${r.achieved.toFixed(0)}), ${r.hang ? `hanging (${r.hung} attempts held)` : 'answering'}`,
        n: `${r.latencies.length} of ${r.expected}`,
        p50: r.latencies.length ? stat([percentile(r.latencies, 50)]) : null,
        p99: r.latencies.length ? stat([percentile(r.latencies, 99)]) : null,
        max: r.latencies.length ? stat([Math.max(...r.latencies)]) : null,
        d99: r.dispatched.length ? stat([percentile(r.dispatched, 99)]) : null,
        q99: r.queued.length ? stat([percentile(r.queued, 99)]) : null,
        s99: r.started.length ? stat([percentile(r.started, 99)]) : null,
      })),
    };
    const top = runs.filter((r) => r.rate === Math.max(...rates));
    const [answeringRun, hangingRun] = [top.find((r) => !r.hang)!, top.find((r) => r.hang)!];
    const p99 = (r: Scenario) => (r.latencies.length ? percentile(r.latencies, 99) : Infinity);
    const failures = runs.reduce((n, r) => n + r.failures, 0);
    return {
      id: this.id,
      title: this.title,
      method: `
\`media.created\` events of two organizations, alternating, are recorded in
the outbox (as a record's insert records its event; uploads themselves do not
keep 100 a second on this machine beside the rest), at ${rates.join(' and ')}
a second in all for ${seconds} s each. Each organization has one webhook
endpoint on loopback (opened with \`EGRESS_ALLOWLIST\`). The measured
organization's endpoint answers \`204\` at once; the other's either answers
too (the baseline) or hangs ${HANG_MS / 1000} s on every request (past
\`WEBHOOK_TIMEOUT_MS\`, ${quick ? QUICK_TIMEOUT_MS / 1000 : 15} s). One worker process with the defaults
(\`WEBHOOK_CONCURRENCY\` 16, \`WEBHOOK_ENDPOINT_CONCURRENCY\` 4). The
latency of a message is from its event's commit (\`occurredAt\`, the
payload's \`timestamp\`) to its arrival at the receiver: the dispatcher's
tick (every 250 ms), its claim of a batch and the webhooks' fan-out (the
messages' first attempts queued together, no listener job between), the
delivery's job, the signed POST. The last three columns say where the time
goes (the 99th percentile from the commit to each step): the dispatcher's
mark (\`dispatchedAt\`, after the fan-out), the delivery job queued (its
BullMQ timestamp), the attempt that sent it started (\`processedOn\`;
later than the first job when that one found its endpoint's
\`WEBHOOK_ENDPOINT_CONCURRENCY\` slots taken and was parked). Fresh
organizations and an emptied queue for each run. ${failures} events
failed to record.`,
      tables: [table],
      charts: [
        {
          id: 'webhooks',
          title: 'Webhook delivery latency, the other organization’s endpoint answering or hanging',
          spec: bars({
            title: 'Delivery latency (commit → receiver), ms',
            yTitle: 'ms',
            format: '.0f',
            data: runs.flatMap((r) =>
              (['p50', 'p99'] as const).map((series) => {
                const v = r.latencies.length
                  ? percentile(r.latencies, series === 'p50' ? 50 : 99)
                  : 0;
                return {
                  group: `${r.rate}/s, other ${r.hang ? 'hanging' : 'answering'}`,
                  series,
                  median: v,
                  min: v,
                  max: v,
                };
              }),
            ),
            rules: [{ y: 1000, label: 'target p99' }],
          }),
        },
      ],
      targets: [
        target(
          `the answering organization’s delivery p99 at ${answeringRun.rate}/s, beside a hanging endpoint`,
          stat([p99(hangingRun)]),
          '<=',
          1000,
          'ms',
          {
            digits: 0,
            why: `at the same rate with both endpoints answering its p99 is ${p99(answeringRun).toFixed(0)} ms: the pipeline's throughput on this machine, not the hanging endpoint, sets it (the hanging endpoint held at most WEBHOOK_ENDPOINT_CONCURRENCY attempts at once)`,
          },
        ),
      ],
    };
  },
};
