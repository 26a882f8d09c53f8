/**
 * Tracing end to end, as in production: the real API and worker processes
 * (api/main.ts, worker/main.ts through tsx, each importing its tracing module
 * first) export OTLP/HTTP JSON (OTEL_TRACES_EXPORTER=otlp) to a collector
 * stand-in in the test process. An upload, then a metadata job: the worker's
 * `process` span is in the API request's trace, its parent chain reaches the
 * API's HTTP server span through the `send` span whose context the job
 * carried, and the trace holds storage, MongoDB and Redis spans of both
 * processes. Health and metrics requests make no span. The processes are
 * stopped with SIGTERM, which exports what they still buffer.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { eventually } from '../support/eventually';
import { startApiProcess, startWorkerProcess, type ServiceProcess } from '../support/processes';

/** A span as the collector stand-in keeps it. */
interface CollectedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  name: string;
  /** OTLP's numbers: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, unknown>;
}

type OtlpValue = {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
};
type OtlpAttribute = { key: string; value: OtlpValue };
interface OtlpRequest {
  resourceSpans: {
    resource: { attributes: OtlpAttribute[] };
    scopeSpans: {
      spans: {
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind: number;
        attributes?: OtlpAttribute[];
      }[];
    }[];
  }[];
}

const SERVER = 2;
const CLIENT = 3;
const PRODUCER = 4;
const CONSUMER = 5;

/** OTLP/JSON ids are hex; accept base64 too. */
const hex = (id: string | undefined) =>
  !id
    ? undefined
    : /^[0-9a-f]+$/i.test(id)
      ? id.toLowerCase()
      : Buffer.from(id, 'base64').toString('hex');
const valueOf = (v: OtlpValue) => v.stringValue ?? v.boolValue ?? v.doubleValue ?? v.intValue;
const attributesOf = (list: OtlpAttribute[] = []) =>
  Object.fromEntries(list.map((a) => [a.key, valueOf(a.value)]));

const spans: CollectedSpan[] = [];
let collector: Server;
let harness: TestApi; // in-process, only to make the organization and look behind the API
let org: TestOrg;
let api: ServiceProcess;
let worker: ServiceProcess;

beforeAll(async () => {
  collector = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.url === '/v1/traces') {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpRequest;
        for (const rs of body.resourceSpans) {
          const service = String(attributesOf(rs.resource.attributes)['service.name']);
          for (const ss of rs.scopeSpans)
            for (const s of ss.spans)
              spans.push({
                service,
                traceId: hex(s.traceId)!,
                spanId: hex(s.spanId)!,
                parentSpanId: hex(s.parentSpanId),
                name: s.name,
                kind: s.kind,
                attributes: attributesOf(s.attributes),
              });
        }
      }
      res.writeHead(200, { 'Content-Type': 'application/json' }).end('{}');
    });
  });
  collector.listen(0, '127.0.0.1');
  await once(collector, 'listening');
  const endpoint = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;

  harness = await startApi('e2etracing');
  org = await harness.createOrg('tracing');
  const env = {
    ...harness.env.env,
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    SHUTDOWN_TIMEOUT_MS: '5000',
  };
  // Side by side; each is kept as it comes up, so that afterAll stops it whatever the other did.
  await Promise.all([
    startApiProcess(env).then((p) => (api = p)),
    startWorkerProcess(env).then((p) => (worker = p)),
  ]);
}, 120_000);

afterAll(async () => {
  for (const p of [worker, api]) await p?.kill('SIGTERM');
  await harness?.close();
  collector?.close();
}, 60_000);

it('one trace from the HTTP request through the queue to the worker, with storage, MongoDB and Redis spans', async () => {
  const key = await org.upload('Canon_40D.jpg', 'Canon_40D.jpg', { via: api.url! });
  const meta = await fetch(`${api.url!}/media/metadata?mediaKey=${encodeURIComponent(key)}`, {
    headers: org.auth,
  });
  expect(meta.status).toBe(200);
  await fetch(`${api.url!}/readyz`);
  await fetch(`${api.url!}/metrics`);

  // SIGTERM: each process exports what its batch still holds before it exits.
  const [workerCode, apiCode] = await Promise.all([worker.kill('SIGTERM'), api.kill('SIGTERM')]);
  expect(workerCode).toBe(0);
  expect(apiCode).toBe(0);
  await eventually(() =>
    Promise.resolve().then(() => expect(spans.some((s) => s.name === 'process image')).toBe(true)),
  );

  const byId = new Map(spans.map((s) => [s.spanId, s]));
  const processSpan = spans.find(
    (s) => s.name === 'process image' && s.attributes['media.job.name'] === 'image.metadata',
  )!;
  expect(processSpan).toMatchObject({ service: 'media-worker', kind: CONSUMER });

  // The parent chain, from the worker's span up to the root.
  const chain: CollectedSpan[] = [];
  for (let s: CollectedSpan | undefined = processSpan; s; s = byId.get(s.parentSpanId ?? '')) {
    chain.push(s);
  }
  expect(chain.every((s) => s.traceId === processSpan.traceId)).toBe(true);
  const send = chain.find((s) => s.kind === PRODUCER);
  expect(send).toMatchObject({ service: 'media-api', name: 'send image' });
  const root = chain.at(-1)!;
  expect(root).toMatchObject({ service: 'media-api', kind: SERVER, parentSpanId: undefined });
  expect(root.attributes['http.route']).toBe('/media/metadata');

  // Storage, MongoDB and Redis in the one trace, in both processes.
  const trace = spans.filter((s) => s.traceId === processSpan.traceId);
  const has = (service: string, match: (s: CollectedSpan) => boolean) =>
    trace.some((s) => s.service === service && match(s));
  const isMongo = (s: CollectedSpan) =>
    s.kind === CLIENT &&
    (s.attributes['db.system.name'] ?? s.attributes['db.system']) === 'mongodb';
  const isRedis = (s: CollectedSpan) =>
    s.kind === CLIENT && (s.attributes['db.system.name'] ?? s.attributes['db.system']) === 'redis';
  expect(has('media-worker', (s) => s.name === 'storage get' && s.kind === CLIENT)).toBe(true);
  expect(has('media-worker', isMongo)).toBe(true);
  expect(has('media-api', isMongo)).toBe(true);
  // (Redis: the API's job add. The worker's own Redis commands, BullMQ taking and finishing the
  // job, run outside the job's span: ioredis spans need a parent, so they make none.)
  expect(has('media-api', isRedis)).toBe(true);

  // The upload's own trace: its object put and its record's insert.
  const uploadRoot = spans.find(
    (s) => s.kind === SERVER && s.attributes['http.route'] === '/media/upload',
  )!;
  const upload = spans.filter((s) => s.traceId === uploadRoot.traceId);
  expect(upload.some((s) => s.name === 'storage put')).toBe(true);
  expect(upload.some((s) => isMongo(s) && /insert/.test(s.name))).toBe(true);

  // Probes and scrapes are not traced.
  const paths = spans
    .filter((s) => s.kind === SERVER)
    .map((s) => s.attributes['url.path'] ?? s.attributes['http.target'])
    .map((p) => (typeof p === 'string' ? p : ''));
  expect(paths.filter((p) => /^\/(healthz|readyz|metrics)/.test(p))).toEqual([]);
}, 60_000);
