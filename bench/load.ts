/**
 * The load test's engine: `connections` concurrent
 * clients mix uploads, downloads, metadata and conversions against a running
 * API for a fixed time; then `verifyLoad` looks behind the API (MongoDB, the
 * bucket, the queues) and lists every broken invariant.
 *
 * Used by test/e2e/load.test.ts (short mode, part of `npm test`) and by
 * bench/load.bench.ts (`npm run bench:load`, long mode with the table). The
 * clients are in load-clients.ts, the check behind the API in load-verify.ts,
 * the types in load-types.ts.
 *
 * The clients are undici connections with HDR histograms (not autocannon):
 * autocannon destroys its in-flight requests when its time is up and loses
 * track of a request when the server closes the connection after answering
 * (which the API does after a refused upload), so some uploads would end with
 * no outcome. Here every client stops starting requests at the deadline and
 * finishes the one it has in flight, so every attempt has an answer to check.
 *
 * What the clients send (all of it real, small images from test/fixtures):
 *  - upload: POST /media/upload, a unique file name per attempt; one in three
 *    names a folder before the file, one in three after it (the object is
 *    then moved at commit). Deliberate refusals: one upload in `refuseEvery`
 *    is a text file (415) and one in `oversizeEvery` is 1 MiB over the API's
 *    MAX_FILE_SIZE (413, cut mid-stream); the first of each are the 5th and
 *    the 3rd upload, so even a short run on a slow machine sends both;
 *  - download: GET /media/download of a stored key; the bytes' SHA-256 must
 *    equal the record's checksum;
 *  - metadata: GET /media/metadata?mediaKey= of a stored image;
 *  - convert: POST /media/convert of a stored image to `convertFormat`.
 */
import { LoadClients, type LoadSettings } from './load-clients';
import { ENDPOINTS, type Endpoint, type LoadOptions, type LoadResult } from './load-types';

export * from './load-types';
export { verifyLoad, type LoadVerification } from './load-verify';

/** `total` split by `shares`, largest remainders first, every endpoint with a share getting at least one. */
export function splitConnections(
  total: number,
  shares: Record<Endpoint, number>,
): Record<Endpoint, number> {
  const sum = ENDPOINTS.reduce((n, e) => n + shares[e], 0);
  const exact = ENDPOINTS.map((e) => ({ e, x: (total * shares[e]) / sum }));
  const out = Object.fromEntries(exact.map(({ e, x }) => [e, Math.floor(x)])) as Record<
    Endpoint,
    number
  >;
  let left = total - ENDPOINTS.reduce((n, e) => n + out[e], 0);
  for (const { e } of [...exact].sort((a, b) => (b.x % 1) - (a.x % 1))) {
    if (left === 0) break;
    out[e]++;
    left--;
  }
  for (const e of ENDPOINTS) {
    if (shares[e] > 0 && out[e] === 0) {
      const donor = ENDPOINTS.reduce((a, b) => (out[a] >= out[b] ? a : b));
      out[donor]--;
      out[e]++;
    }
  }
  return out;
}

/** The options' defaults applied, and what they need checked. */
function loadSettings(options: LoadOptions): LoadSettings {
  const refuseEvery = options.refuseEvery ?? 10;
  const oversizeEvery = options.oversizeEvery ?? 40;
  if (oversizeEvery > 0 && !options.maxFileSize) {
    throw new Error('runLoad: maxFileSize (the API MAX_FILE_SIZE) is needed for oversize uploads');
  }
  return {
    refuseEvery,
    oversizeEvery,
    format: options.convertFormat ?? 'webp',
    timeout: options.requestTimeoutMs ?? 60_000,
  };
}

/**
 * Seeds the sample images, runs the clients for `durationMs`, and returns
 * every endpoint's figures and every attempt's answer.
 */
export async function runLoad(options: LoadOptions): Promise<LoadResult> {
  const settings = loadSettings(options);
  const split = splitConnections(
    options.connections,
    options.shares ?? { upload: 1, download: 1, metadata: 1, convert: 1 },
  );
  const clients = new LoadClients(options, settings);
  try {
    await clients.seed();
    const elapsedMs = await clients.runFor(options.durationMs, split);
    return {
      options: { connections: options.connections, durationMs: options.durationMs },
      connections: split,
      elapsedMs: Math.round(elapsedMs),
      endpoints: clients.endpointStats(elapsedMs),
      ...clients.outcomes(),
    };
  } finally {
    await clients.close();
  }
}

/** The per-endpoint table (markdown). */
export function formatTable(result: LoadResult): string {
  const rows = ENDPOINTS.map((e) => {
    const s = result.endpoints[e];
    const codes = Object.entries(s.statuses)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([code, n]) => `${code}: ${n}`)
      .join(', ');
    const l = s.latencyMs;
    return [
      e,
      String(result.connections[e]),
      String(s.requests),
      s.perSecond.toFixed(1),
      l.p50.toFixed(1),
      l.p90.toFixed(1),
      l.p99.toFixed(1),
      l.max.toFixed(1),
      codes,
    ];
  });
  const total = ENDPOINTS.reduce((n, e) => n + result.endpoints[e].requests, 0);
  const header = [
    'endpoint',
    'clients',
    'requests',
    'req/s',
    'p50 ms',
    'p90 ms',
    'p99 ms',
    'max ms',
    'statuses',
  ];
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i]!.length)));
  const line = (r: string[]) => `| ${r.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [
    line(header),
    `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`,
    ...rows.map(line),
    '',
    `${total} requests in ${(result.elapsedMs / 1000).toFixed(1)} s (${(total / (result.elapsedMs / 1000)).toFixed(1)} req/s) from ${result.options.connections} clients`,
  ].join('\n');
}
