/**
 * The load test's engine (issue 7, "Hardening"): `connections` concurrent
 * clients mix uploads, downloads, metadata and conversions against a running
 * API for a fixed time; then `verifyLoad` looks behind the API (MongoDB, the
 * bucket, the queues) and lists every broken invariant.
 *
 * Used by test/e2e/load.test.ts (short mode, part of `npm test`) and by
 * bench/load.bench.ts (`npm run bench:load`, long mode with the table).
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
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import * as hdr from 'hdr-histogram-js';
import { FormData, Pool } from 'undici';
import type { Models } from '../shared/db/models';
import type { JobQueue } from '../shared/queue/job-queue';
import type { ObjectStore } from '../shared/storage/object-store';

export const ENDPOINTS = ['upload', 'download', 'metadata', 'convert'] as const;
export type Endpoint = (typeof ENDPOINTS)[number];

export interface SampleImage {
  /** File name (its extension is kept for the uploaded names). */
  name: string;
  data: Buffer;
}

export interface LoadOptions {
  /** Base URL of the API, e.g. http://127.0.0.1:3000. */
  url: string;
  /** A bearer token of the organization the load runs in. */
  token: string;
  durationMs: number;
  /** Concurrent clients (one connection each), split over the endpoints by `shares`. */
  connections: number;
  /** Relative share of the connections per endpoint (default: equal). */
  shares?: Record<Endpoint, number>;
  /** Images to upload (each is also uploaded once before the clock starts, as the first sources). */
  images: SampleImage[];
  /** Every n-th upload is a text file the API must refuse with 415 (0: never). Default 10. */
  refuseEvery?: number;
  /** Every n-th upload is `maxFileSize` + 1 MiB, refused with 413 (0: never). Default 40. */
  oversizeEvery?: number;
  /** The API's MAX_FILE_SIZE (needed when `oversizeEvery` > 0). */
  maxFileSize?: number;
  /** Target format of the conversions. Default webp. */
  convertFormat?: string;
  /** Per-request limit for headers and body (ms). Default 60 s (above JOB_WAIT_MS). */
  requestTimeoutMs?: number;
}

/** What the API returned for a stored file (the fields the checks use). */
export interface StoredMedia {
  id: number;
  key: string;
  name: string;
  mimetype: string;
  bytes: number;
  checksum: string;
  folderId: number | null;
}

export interface UploadAttempt {
  phase: 'seed' | 'load';
  /** The unique file name sent. */
  name: string;
  bytes: number;
  checksum: string;
  folder: { name: string; position: 'before' | 'after' } | null;
  /** What a correct service does with it. */
  expected: 'stored' | 'refused';
  /** HTTP status, or null when the request failed without one. */
  status: number | null;
  error?: string;
  stored?: StoredMedia;
}

export interface ConvertAttempt {
  source: string;
  status: number | null;
  error?: string;
  stored?: StoredMedia;
  /** The job id an error answer carried (a 504's job goes on and may still store its result). */
  jobId?: string;
}

export interface EndpointStats {
  requests: number;
  perSecond: number;
  latencyMs: { p50: number; p90: number; p99: number; max: number; mean: number };
  /** Count per HTTP status; `error` for requests that got none (connection error, timeout). */
  statuses: Record<string, number>;
}

export interface UnexpectedAnswer {
  endpoint: Endpoint;
  status: number | null;
  /** Start of the body, or the client-side error. */
  detail: string;
}

export interface LoadResult {
  options: { connections: number; durationMs: number };
  connections: Record<Endpoint, number>;
  /** From the first request to the last answer (the drain included). */
  elapsedMs: number;
  endpoints: Record<Endpoint, EndpointStats>;
  uploads: UploadAttempt[];
  conversions: ConvertAttempt[];
  /** Downloads whose bytes differ from the record (size or SHA-256). */
  downloadMismatches: string[];
  /** Answers other than the expected one (deliberate refusals excluded); the first 50. */
  unexpected: UnexpectedAnswer[];
  unexpectedCount: number;
}

type Envelope<T> = { statusCode: number; data: T };

const MiB = 1024 * 1024;
const sha256 = (data: Buffer) => `sha256:${createHash('sha256').update(data).digest('hex')}`;

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

const histogram = () =>
  hdr.build({
    lowestDiscernibleValue: 1, // microseconds
    highestTrackableValue: 10 * 60 * 1_000_000,
    numberOfSignificantValueDigits: 3,
  });

export async function runLoad(options: LoadOptions): Promise<LoadResult> {
  const refuseEvery = options.refuseEvery ?? 10;
  const oversizeEvery = options.oversizeEvery ?? 40;
  if (oversizeEvery > 0 && !options.maxFileSize) {
    throw new Error('runLoad: maxFileSize (the API MAX_FILE_SIZE) is needed for oversize uploads');
  }
  const format = options.convertFormat ?? 'webp';
  const timeout = options.requestTimeoutMs ?? 60_000;
  const split = splitConnections(
    options.connections,
    options.shares ?? { upload: 1, download: 1, metadata: 1, convert: 1 },
  );
  const auth = { authorization: `Bearer ${options.token}` };
  const pool = new Pool(options.url, {
    connections: options.connections + 4,
    pipelining: 1,
    headersTimeout: timeout,
    bodyTimeout: timeout,
  });

  const histograms = Object.fromEntries(ENDPOINTS.map((e) => [e, histogram()])) as Record<
    Endpoint,
    ReturnType<typeof histogram>
  >;
  const statuses = Object.fromEntries(ENDPOINTS.map((e) => [e, {}])) as Record<
    Endpoint,
    Record<string, number>
  >;
  const uploads: UploadAttempt[] = [];
  const conversions: ConvertAttempt[] = [];
  const downloadMismatches: string[] = [];
  const unexpected: UnexpectedAnswer[] = [];
  let unexpectedCount = 0;
  /** Stored images (metadata and convert sources) and everything downloadable. */
  const images: StoredMedia[] = [];
  const downloadable: StoredMedia[] = [];
  const pick = <T>(xs: T[]): T => xs[Math.floor(Math.random() * xs.length)]!;

  const note = (endpoint: Endpoint, status: number | null, detail: string) => {
    unexpectedCount++;
    if (unexpected.length < 50) unexpected.push({ endpoint, status, detail: detail.slice(0, 500) });
  };

  /** One request, timed from its start to the end of its body. */
  async function timed(
    endpoint: Endpoint,
    request: Parameters<Pool['request']>[0],
    record: boolean,
  ): Promise<{ status: number | null; body: Buffer; error?: string }> {
    const started = performance.now();
    let status: number | null = null;
    let body = Buffer.alloc(0);
    let error: string | undefined;
    try {
      const res = await pool.request(request);
      status = res.statusCode;
      body = Buffer.from(await res.body.arrayBuffer());
    } catch (err) {
      error = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    }
    if (record) {
      histograms[endpoint].recordValue(
        Math.max(1, Math.round((performance.now() - started) * 1000)),
      );
      const label = status === null ? 'error' : String(status);
      statuses[endpoint][label] = (statuses[endpoint][label] ?? 0) + 1;
    }
    return error === undefined ? { status, body } : { status, body, error };
  }

  let uploadSeq = 0;
  let loadUploads = 0;
  const folders = ['load-a', 'load-b'];
  async function upload(phase: UploadAttempt['phase'], sample?: SampleImage): Promise<void> {
    const n = ++uploadSeq;
    const k = phase === 'load' ? ++loadUploads : 0;
    let data: Buffer;
    let ext: string;
    let expected: UploadAttempt['expected'] = 'refused';
    if (sample) {
      data = sample.data;
      ext = sample.name.slice(sample.name.lastIndexOf('.'));
      expected = 'stored';
    } else if (oversizeEvery > 0 && k % oversizeEvery === 3 % oversizeEvery) {
      // A JPEG head, then zeros past the limit: refused while it streams.
      const head = options.images.find((i) => /\.jpe?g$/i.test(i.name))?.data ?? Buffer.alloc(0);
      data = Buffer.alloc(options.maxFileSize! + MiB);
      head.copy(data, 0, 0, Math.min(head.length, 64 * 1024));
      ext = '.jpg';
    } else if (refuseEvery > 0 && k % refuseEvery === 5 % refuseEvery) {
      data = Buffer.from(`not an image, attempt ${n}\n`.repeat(64));
      ext = '.jpg';
    } else {
      const image = options.images[n % options.images.length]!;
      data = image.data;
      ext = image.name.slice(image.name.lastIndexOf('.'));
      expected = 'stored';
    }
    const name = `load-${String(n).padStart(6, '0')}${ext}`;
    const folder: UploadAttempt['folder'] =
      n % 3 === 1
        ? { name: folders[n % 2]!, position: 'before' }
        : n % 3 === 2
          ? { name: folders[n % 2]!, position: 'after' }
          : null;
    const form = new FormData();
    if (folder?.position === 'before') form.append('folder', folder.name);
    form.append('file', new Blob([data]), name);
    if (folder?.position === 'after') form.append('folder', folder.name);

    const attempt: UploadAttempt = {
      phase,
      name,
      bytes: data.length,
      checksum: sha256(data),
      folder,
      expected,
      status: null,
    };
    uploads.push(attempt);
    const res = await timed(
      'upload',
      { method: 'POST', path: '/media/upload', headers: auth, body: form },
      phase === 'load',
    );
    attempt.status = res.status;
    if (res.error) attempt.error = res.error;
    if (res.status === 201) {
      const stored = (JSON.parse(res.body.toString()) as Envelope<StoredMedia>).data;
      attempt.stored = stored;
      images.push(stored);
      downloadable.push(stored);
    }
    const answeredAsExpected =
      expected === 'stored'
        ? res.status === 201
        : res.status === (data.length > (options.maxFileSize ?? Infinity) ? 413 : 415);
    if (!answeredAsExpected) {
      note('upload', res.status, res.error ?? res.body.toString());
      if (phase === 'seed') {
        throw new Error(`seed upload of ${name} answered ${res.status}: ${res.body.toString()}`);
      }
    }
  }

  async function download(): Promise<void> {
    const media = pick(downloadable);
    const res = await timed(
      'download',
      {
        method: 'GET',
        path: `/media/download?media=${encodeURIComponent(media.key)}`,
        headers: auth,
      },
      true,
    );
    if (res.status !== 200) return note('download', res.status, res.error ?? res.body.toString());
    if (res.body.length !== media.bytes || sha256(res.body) !== media.checksum) {
      downloadMismatches.push(
        `${media.key}: got ${res.body.length} bytes ${sha256(res.body)}, record says ${media.bytes} ${media.checksum}`,
      );
    }
  }

  async function metadata(): Promise<void> {
    const media = pick(images);
    const res = await timed(
      'metadata',
      {
        method: 'GET',
        path: `/media/metadata?mediaKey=${encodeURIComponent(media.key)}`,
        headers: auth,
      },
      true,
    );
    if (res.status !== 200) note('metadata', res.status, res.error ?? res.body.toString());
  }

  async function convert(): Promise<void> {
    const source = pick(images);
    const attempt: ConvertAttempt = { source: source.key, status: null };
    conversions.push(attempt);
    const res = await timed(
      'convert',
      {
        method: 'POST',
        path: '/media/convert',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ mediaKey: source.key, format }),
      },
      true,
    );
    attempt.status = res.status;
    if (res.error) attempt.error = res.error;
    if (res.status === 201) {
      attempt.stored = (JSON.parse(res.body.toString()) as Envelope<StoredMedia>).data;
      downloadable.push(attempt.stored);
    } else {
      note('convert', res.status, res.error ?? res.body.toString());
      try {
        const { jobId } = JSON.parse(res.body.toString()) as { jobId?: unknown };
        if (typeof jobId === 'string') attempt.jobId = jobId;
      } catch {
        // not JSON: no job id
      }
    }
  }

  const actions: Record<Endpoint, () => Promise<void>> = {
    upload: () => upload('load'),
    download,
    metadata,
    convert,
  };

  try {
    // Sources for the first downloads, metadata and conversions: each image once.
    for (const image of options.images) await upload('seed', image);

    const started = performance.now();
    const deadline = started + options.durationMs;
    const clients = ENDPOINTS.flatMap((endpoint) =>
      Array.from({ length: split[endpoint] }, async () => {
        // Stop starting requests at the deadline; the one in flight finishes.
        while (performance.now() < deadline) await actions[endpoint]();
      }),
    );
    await Promise.all(clients);
    const elapsedMs = performance.now() - started;

    const endpoints = Object.fromEntries(
      ENDPOINTS.map((e) => {
        const h = histograms[e];
        const ms = (us: number) => Math.round(us / 10) / 100;
        const stats: EndpointStats = {
          requests: h.totalCount,
          perSecond: Math.round((h.totalCount / (elapsedMs / 1000)) * 10) / 10,
          latencyMs: {
            p50: ms(h.getValueAtPercentile(50)),
            p90: ms(h.getValueAtPercentile(90)),
            p99: ms(h.getValueAtPercentile(99)),
            max: ms(h.maxValue),
            mean: ms(h.mean),
          },
          statuses: statuses[e],
        };
        return [e, stats];
      }),
    ) as Record<Endpoint, EndpointStats>;
    return {
      options: { connections: options.connections, durationMs: options.durationMs },
      connections: split,
      elapsedMs: Math.round(elapsedMs),
      endpoints,
      uploads,
      conversions,
      downloadMismatches,
      unexpected,
      unexpectedCount,
    };
  } finally {
    for (const h of Object.values(histograms)) h.destroy();
    await pool.close();
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

export interface LoadVerification {
  records: number;
  objects: number;
  storedUploads: number;
  refusedUploads: number;
  storedConversions: number;
  /** Jobs that ended failed in the queues. */
  failedJobs: number;
  /** Every broken invariant, one line each (empty when all hold). */
  violations: string[];
}

/**
 * Looks behind the API once the load is over (after the queues are idle):
 *  - every upload answered 201 has exactly one record (its name, size and
 *    checksum) and one object of that size, at a key in its folder when it
 *    named one;
 *  - every upload not answered 201 has no record and no object;
 *  - every conversion answered 201 has one record and one object (one
 *    answered without its result but with a job id, e.g. a 504, may still
 *    have stored one, and at most one);
 *  - there is no other record, no object without a record, no record
 *    without its object, and no multipart upload left open in the bucket.
 */
export async function verifyLoad(
  behind: {
    models: Pick<Models, 'Media'>;
    store: Pick<ObjectStore, 'list' | 'listIncompleteUploads'>;
    queue: Pick<JobQueue, 'counts'>;
  },
  result: Pick<LoadResult, 'uploads' | 'conversions'>,
  options: { idleTimeoutMs?: number } = {},
): Promise<LoadVerification> {
  const violations: string[] = [];
  // Jobs whose caller stopped waiting still finish and store; wait for them.
  const idleBy = Date.now() + (options.idleTimeoutMs ?? 60_000);
  let failedJobs: number;
  for (;;) {
    const counts = await behind.queue.counts();
    const busy = Object.values(counts).reduce(
      (n, c) => n + (c.waiting ?? 0) + (c.active ?? 0) + (c.delayed ?? 0) + (c.prioritized ?? 0),
      0,
    );
    failedJobs = Object.values(counts).reduce((n, c) => n + (c.failed ?? 0), 0);
    if (busy === 0) break;
    if (Date.now() > idleBy) {
      violations.push(`queues still busy after the load: ${JSON.stringify(counts)}`);
      break;
    }
    await sleep(200);
  }

  const records = await behind.models.Media.find({}).lean();
  const recordsByKey = new Map<string, typeof records>();
  for (const r of records) recordsByKey.set(r.key, [...(recordsByKey.get(r.key) ?? []), r]);
  const objects = new Map<string, number>();
  for await (const o of behind.store.list('')) objects.set(o.key, o.size);
  const expectedKeys = new Set<string>();

  const checkStored = (what: string, stored: StoredMedia, bytes?: number, checksum?: string) => {
    expectedKeys.add(stored.key);
    const found = recordsByKey.get(stored.key) ?? [];
    if (found.length !== 1) {
      violations.push(`${what}: ${found.length} records for ${stored.key}`);
      return;
    }
    const record = found[0]!;
    if (record.id !== stored.id) violations.push(`${what}: record id ${record.id} ≠ ${stored.id}`);
    if (bytes !== undefined && record.bytes !== bytes)
      violations.push(`${what}: record says ${record.bytes} bytes, ${bytes} were sent`);
    if (checksum !== undefined && record.checksum !== checksum)
      violations.push(`${what}: record checksum ${record.checksum} ≠ ${checksum}`);
    const size = objects.get(stored.key);
    if (size === undefined) violations.push(`${what}: no object at ${stored.key}`);
    else if (size !== record.bytes)
      violations.push(`${what}: object ${stored.key} is ${size} bytes, record ${record.bytes}`);
  };

  let storedUploads = 0;
  let refusedUploads = 0;
  for (const u of result.uploads) {
    const what = `upload ${u.name} (${u.status ?? u.error})`;
    if (u.status === 201 && u.stored) {
      storedUploads++;
      checkStored(what, u.stored, u.bytes, u.checksum);
      if (u.stored.name !== u.name) violations.push(`${what}: record name ${u.stored.name}`);
      if (u.folder && !u.stored.key.includes(`/${u.folder.name}/`))
        violations.push(`${what}: key ${u.stored.key} is not in folder ${u.folder.name}`);
    } else {
      refusedUploads++;
      const base = u.name.slice(0, u.name.lastIndexOf('.'));
      const leftRecords = records.filter((r) => r.name === u.name);
      const leftObjects = [...objects.keys()].filter((k) => k.includes(`/${base}-`));
      if (leftRecords.length > 0)
        violations.push(`${what}: refused, yet ${leftRecords.length} record(s) exist`);
      if (leftObjects.length > 0)
        violations.push(`${what}: refused, yet objects exist: ${leftObjects.join(', ')}`);
    }
  }
  let storedConversions = 0;
  for (const c of result.conversions) {
    if (c.status === 201 && c.stored) {
      storedConversions++;
      checkStored(`conversion of ${c.source}`, c.stored);
    } else if (c.jobId) {
      // Answered without a result (e.g. 504) but the job went on: at most one result.
      const made = records.filter((r) => r.jobId === c.jobId);
      if (made.length > 1) violations.push(`job ${c.jobId}: ${made.length} records`);
      for (const r of made) checkStored(`late result of job ${c.jobId}`, { ...r, folderId: null });
    }
  }

  for (const r of records) {
    if (!expectedKeys.has(r.key))
      violations.push(`record ${r.id} (${r.key}) answers no successful request`);
    if (!objects.has(r.key)) violations.push(`record ${r.id} (${r.key}) has no object`);
  }
  for (const key of objects.keys()) {
    if (!recordsByKey.has(key)) violations.push(`object ${key} has no record`);
  }
  for (const key of await behind.store.listIncompleteUploads('')) {
    violations.push(`multipart upload left open: ${key}`);
  }
  return {
    records: records.length,
    objects: objects.size,
    storedUploads,
    refusedUploads,
    storedConversions,
    failedJobs,
    violations,
  };
}
