/**
 * 11. Tenancy under load: what one organization's flood does to another
 * organization's jobs, and to the order of its own.
 *
 * - Flood: one organization's clients ask first renders of a large noisy
 *   photo to GIF and AVIF (each a distinct width, so each is new work) while
 *   another organization asks metadata of a photo, one request at a time;
 *   the other organization's latency is measured quiet (no flood) and during
 *   the flood.
 * - Order: one organization's 16 metadata and 16 conversion clients at once (2 and 2, and a 640x480 photo, in quick mode),
 *   with the fair gate as configured, and with it letting every job through
 *   at once (`JOB_QUEUED_PER_SLOT` at its maximum: the queue's own FIFO
 *   order), alternating.
 */
import { request, Agent } from 'undici';
import { Queue } from 'bullmq';
import sharp from 'sharp';
import { createRedis } from '../../shared/queue/redis';
import { createLogger } from '../../shared/logger';
import { QUEUE_NAMES } from '../../shared/config';
import type { Benchmark, BenchContext } from '../lib/benchmark';
import { bars } from '../lib/charts';
import type { BenchmarkResult, Table } from '../lib/report';
import { target } from '../lib/report';
import { percentile, ratios, stat } from '../lib/stats';
import { deleteKeys, type Stack } from '../lib/stack';
import { uploadPhotos } from './convert';

const PHOTO = 'Reconyx_HC500_Hyperfire.jpg'; // 2048x1536, 416 KiB
/** Quick mode's: 640x480, so the order phase's last conversions end sooner. */
const QUICK_PHOTO = 'gps-DSCN0010.jpg';

/** What a closed loop of clients saw: latencies of every answer, and the answers by status. */
interface Loop {
  latencies: number[];
  statuses: Record<string, number>;
}

/** `clients` clients, each one request at a time until `until()` says stop. */
async function loop(
  clients: number,
  until: () => boolean,
  send: (client: number, n: number, dispatcher: Agent) => ReturnType<typeof request>,
): Promise<Loop> {
  const out: Loop = { latencies: [], statuses: {} };
  await Promise.all(
    Array.from({ length: clients }, async (_, client) => {
      const agent = new Agent({ connections: 1, pipelining: 1 });
      try {
        for (let n = 0; !until(); n++) {
          const t = performance.now();
          const res = await send(client, n, agent);
          await res.body.dump();
          out.latencies.push(performance.now() - t);
          out.statuses[res.statusCode] = (out.statuses[res.statusCode] ?? 0) + 1;
        }
      } finally {
        await agent.close();
      }
    }),
  );
  return out;
}

const forMs = (ms: number) => {
  const end = performance.now() + ms;
  return () => performance.now() >= end;
};

/** Empties the queues and the fair gate's and pending counts' keys (workers stopped first). */
async function resetQueues(stack: Stack): Promise<void> {
  await stack.setWorkers(0);
  const redis = createRedis(stack.config.redisUrl!, 'worker', createLogger({ level: 'warn' }));
  try {
    for (const name of QUEUE_NAMES) {
      const queue = new Queue(name, { connection: redis, prefix: stack.config.queuePrefix });
      await queue.obliterate({ force: true });
      await queue.close();
    }
    for (const pattern of ['gate', 'pending']) {
      await deleteKeys(redis, `${stack.config.queuePrefix}:${pattern}*`);
    }
  } finally {
    redis.disconnect();
  }
}

const statusText = (s: Record<string, number>) =>
  Object.entries(s)
    .map(([code, n]) => `${n} × ${code}`)
    .join(', ');

async function organization(ctx: BenchContext, slug: string) {
  const { token } = await ctx.stack.data.organizations.create(slug, slug);
  return { Authorization: `Bearer ${token.token}` };
}

async function uploadAs(
  ctx: BenchContext,
  auth: Record<string, string>,
  bytes: Buffer,
  name: string,
) {
  const fd = new FormData();
  fd.append('file', new Blob([bytes]), name);
  const res = await fetch(`${ctx.stack.url}/media/upload`, {
    method: 'POST',
    headers: auth,
    body: fd,
  });
  if (res.status !== 201) throw new Error(`upload of ${name}: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { data: { key: string } }).data.key;
}

export const tenancy: Benchmark = {
  id: 'tenancy',
  title: 'Tenancy under load',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack, quick } = ctx;
    const quietMs = quick ? 1_000 : 15_000;
    const floodMs = quick ? 2_000 : 60_000;
    const orderMs = quick ? 1_000 : 30_000;
    const orderRounds = quick ? 1 : 2;
    const floodClients = quick ? 2 : 6;
    // Quick mode only proves the phase runs: 4 clients and a small photo finish their
    // last requests sooner.
    const orderClients = quick ? 4 : 32;
    const photoName = quick ? QUICK_PHOTO : PHOTO;
    const side = quick ? 1024 : 4096;
    // Clients wait as they would in production: a job not done in 30 s answers 504. Every
    // width of the flood is a new variant: no cap on a source's variants stops it early.
    const apiEnv = { JOB_WAIT_MS: '30000', RENDER_MAX_VARIANTS: '10000' };
    // As docker-compose runs them: two workers at the default concurrency (2 jobs each).
    const workerEnv = { RENDER_MAX_VARIANTS: apiEnv.RENDER_MAX_VARIANTS };
    // The API and the workers restart side by side.
    await Promise.all([stack.setApiEnv(apiEnv), stack.setWorkers(2, workerEnv)]);

    const [photo] = await uploadPhotos(ctx, [photoName]);
    const metadataPath = `/media/metadata?mediaKey=${encodeURIComponent(photo!)}`;
    const flooder = await organization(ctx, 'flooder');
    ctx.log(`tenancy: making a noisy ${side} x ${(side * 3) / 4} JPEG`);
    const noisy = await sharp({
      create: {
        width: side,
        height: (side * 3) / 4,
        channels: 3,
        background: '#808080',
        noise: { type: 'gaussian', mean: 128, sigma: 50 },
      },
    })
      .jpeg({ quality: 90 })
      .toBuffer();
    const big = await uploadAs(ctx, flooder, noisy, 'noisy.jpg');
    const metadata = (_c: number, _n: number, dispatcher: Agent) =>
      request(`${stack.url}${metadataPath}`, { headers: stack.auth, dispatcher });

    // Quiet: the other organization alone.
    await loop(1, forMs(500), metadata);
    ctx.log('tenancy: quiet');
    const quiet = await loop(1, forMs(quietMs), metadata);

    // Flood: distinct widths to GIF and AVIF, every request a first render.
    ctx.log(`tenancy: flood, ${floodClients} clients of one organization`);
    const floodDone = forMs(floodMs);
    // GIFs up to 2047 px wide (3.1 MP, within MAX_GIF_OUTPUT_PIXELS), AVIFs up to 4095 px.
    const render = (client: number, n: number, dispatcher: Agent) => {
      const gif = (client + n) % 2 === 1;
      const width = gif
        ? 1000 + ((client * 997 + n * 13) % 1048)
        : 2000 + ((client * 997 + n * 13) % 2096);
      const format = gif ? 'gif' : 'avif';
      return request(
        `${stack.url}/media/render?media=${encodeURIComponent(big)}&w=${width}&format=${format}`,
        { headers: flooder, dispatcher },
      );
    };
    const [flood, during] = await Promise.all([
      loop(floodClients, floodDone, render),
      loop(1, floodDone, metadata),
    ]);
    await resetQueues(stack);

    // Order: one organization's own mix, gated and FIFO, alternating.
    await stack.setWorkers(2, workerEnv);
    const mix = (c: number, _n: number, dispatcher: Agent) =>
      c % 2
        ? request(`${stack.url}${metadataPath}`, { headers: stack.auth, dispatcher })
        : request(`${stack.url}/media/convert`, {
            method: 'POST',
            headers: { ...stack.auth, 'Content-Type': 'application/json' },
            body: JSON.stringify({ mediaKey: photo, format: 'webp' }),
            dispatcher,
          });
    const gated: number[] = [];
    const fifo: number[] = [];
    const orderStatuses: Record<string, number> = {};
    for (let r = 0; r < orderRounds; r++) {
      for (const [name, env, into] of [
        ['gated', {}, gated],
        ['fifo', { JOB_QUEUED_PER_SLOT: '100000' }, fifo],
      ] as const) {
        // The API and the workers restart side by side.
        await Promise.all([
          stack.setApiEnv({ ...apiEnv, ...env }),
          stack.setWorkers(2, { ...workerEnv, ...env }),
        ]);
        ctx.log(`tenancy: order, ${name}, round ${r + 1}/${orderRounds}`);
        const run = await loop(orderClients, forMs(orderMs), mix);
        into.push(percentile(run.latencies, 99));
        for (const [code, n] of Object.entries(run.statuses)) {
          orderStatuses[code] = (orderStatuses[code] ?? 0) + n;
        }
      }
    }
    // The API and the workers restart side by side.
    await Promise.all([stack.setApiEnv({}), stack.setWorkers(0, {})]);
    await resetQueues(stack);

    const q99 = percentile(quiet.latencies, 99);
    const f99 = percentile(during.latencies, 99);
    const table: Table = {
      columns: [
        { key: 'what', label: 'the other organization’s metadata' },
        { key: 'n', label: 'requests', digits: 0 },
        { key: 'p50', label: 'p50, ms', digits: 0 },
        { key: 'p99', label: 'p99, ms', digits: 0 },
        { key: 'max', label: 'max, ms', digits: 0 },
        { key: 'statuses', label: 'answers' },
      ],
      rows: [
        ['quiet', quiet],
        ['during the flood', during],
      ].map(([what, run]) => {
        const l = (run as Loop).latencies;
        return {
          what: what as string,
          n: l.length,
          p50: stat([percentile(l, 50)]),
          p99: stat([percentile(l, 99)]),
          max: stat([Math.max(...l)]),
          statuses: statusText((run as Loop).statuses),
        };
      }),
    };
    const floodTable: Table = {
      columns: [
        { key: 'what', label: 'the flood' },
        { key: 'n', label: 'renders', digits: 0 },
        { key: 'p50', label: 'p50, ms', digits: 0 },
        { key: 'statuses', label: 'answers' },
      ],
      rows: [
        {
          what: `${floodClients} clients, first renders of a ${side} px noisy JPEG to GIF and AVIF`,
          n: flood.latencies.length,
          p50: stat([percentile(flood.latencies, 50)]),
          statuses: statusText(flood.statuses),
        },
      ],
    };
    const orderTable: Table = {
      columns: [
        {
          key: 'what',
          label: `one organization, ${orderClients / 2} metadata + ${orderClients / 2} convert clients`,
        },
        { key: 'p99', label: 'request p99, ms', digits: 0 },
      ],
      rows: [
        { what: 'fair gate (defaults)', p99: stat(gated) },
        { what: 'FIFO (JOB_QUEUED_PER_SLOT=100000)', p99: stat(fifo) },
        { what: 'answers, both', p99: null },
      ],
    };
    orderTable.rows[2]!.what = `answers, both: ${statusText(orderStatuses)}`;
    return {
      id: this.id,
      title: this.title,
      method: `
**Flood.** One organization's ${floodClients} clients ask, one request at a
time each, first renders of a ${side} × ${(side * 3) / 4} noisy JPEG
(${(noisy.length / 1024 / 1024).toFixed(1)} MiB; noise is the worst case for
every encoder) to GIF at distinct widths from 1000 to 2047 px and to AVIF from
2000 to 4095 px (\`RENDER_MAX_VARIANTS\` raised so every one is new work), for
${floodMs / 1000} s, while another organization asks \`GET /media/metadata\` of
\`${photoName}\` one request at a time. The same client alone first
(${quietMs / 1000} s) gives the quiet figure. Two workers at the default
concurrency (4 image slots), \`JOB_WAIT_MS\` 30 s, the fair gate's defaults.
Queues are emptied afterwards.

**Order.** One organization's ${orderClients} clients at once, half asking metadata of
\`${photoName}\`, half converting it to WebP, for ${orderMs / 1000} s; with the
fair gate as configured and with \`JOB_QUEUED_PER_SLOT=100000\` (every job to
the workers at once: the queue's own first-in first-out order), alternating,
${orderRounds} round(s) each. p99 over every answer of a round.`,
      tables: [table, floodTable, orderTable],
      charts: [
        {
          id: 'tenancy',
          title: 'Another organization’s metadata, quiet and during one organization’s flood',
          spec: bars({
            title: 'Another organization’s metadata latency, ms',
            yTitle: 'ms',
            format: '.0f',
            data: [
              ['quiet', quiet.latencies],
              ['during the flood', during.latencies],
            ].flatMap(([group, l]) =>
              (['p50', 'p99'] as const).map((series) => {
                const v = percentile(l as number[], series === 'p50' ? 50 : 99);
                return { group: group as string, series, median: v, min: v, max: v };
              }),
            ),
          }),
        },
      ],
      targets: [
        target(
          'another organization’s metadata p99 during the flood − quiet',
          stat([f99 - q99]),
          '<=',
          2000,
          'ms',
          { digits: 0 },
        ),
        target(
          'one organization’s request p99, fair gate ÷ FIFO',
          stat(ratios(gated, fifo)),
          '<=',
          1.5,
          '',
          { digits: 2 },
        ),
      ],
    };
  },
};
