/**
 * One trace from an HTTP request through the queue to the worker, seen by an
 * InMemorySpanExporter: the API and the worker run in this process
 * (test/support/api.ts, worker.ts) under the SDK as production starts it
 * (test/support/tracing.ts). The worker's `process` span shares the request's
 * trace id and its parent chain reaches the API's HTTP server span through the
 * `send` span whose context the job carried; storage, MongoDB and Redis spans
 * are in the trace; a job's payload carries a W3C traceparent. Also: with
 * tracing off no SDK is loaded and a job carries no trace.
 */
import { eventually } from '../support/eventually';
import { SpanKind } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace';
import { loadConfig } from '../../shared/config';
import { currentJobTrace, startTracing } from '../../shared/tracing';
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { startTestTracing, type TestTracing } from '../support/tracing';
import { startWorker, type TestWorker } from '../support/worker';

let tracing: TestTracing;
let api: TestApi;
let worker: TestWorker;
let org: TestOrg;

beforeAll(async () => {
  tracing = startTestTracing();
  api = await startApi('tracing');
  worker = await startWorker(api.env.env);
  org = await api.createOrg('tracing');
});
afterAll(async () => {
  await worker?.close();
  await api?.close();
  await tracing?.shutdown();
});

const idOf = (s: ReadableSpan) => s.spanContext().spanId;
const traceOf = (s: ReadableSpan) => s.spanContext().traceId;
const dbSystem = (s: ReadableSpan) => s.attributes['db.system.name'] ?? s.attributes['db.system'];

it('the worker span is in the request trace, a child of its HTTP span through the job', async () => {
  const key = await org.upload('Canon_40D.jpg');
  const res = await fetch(`${api.url}/media/convert`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ mediaKey: key, format: 'webp' }),
  });
  expect(res.status).toBe(201);

  const spans = tracing.spans();
  const byId = new Map(spans.map((s) => [idOf(s), s]));
  const processSpan = spans.find(
    (s) => s.name === 'process image' && s.attributes['media.job.name'] === 'image.convert',
  );
  expect(processSpan?.kind).toBe(SpanKind.CONSUMER);

  const chain: ReadableSpan[] = [];
  for (let s = processSpan; s; s = byId.get(s.parentSpanContext?.spanId ?? '')) chain.push(s);
  expect(new Set(chain.map(traceOf))).toEqual(new Set([traceOf(processSpan!)]));
  expect(chain.map((s) => s.kind)).toEqual(expect.arrayContaining([SpanKind.PRODUCER]));
  const root = chain.at(-1)!;
  expect(root.kind).toBe(SpanKind.SERVER);
  expect(root.parentSpanContext).toBeUndefined();
  expect(root.attributes['http.route']).toBe('/media/convert');

  // Storage, MongoDB and Redis calls of both sides, in the one trace.
  const trace = spans.filter((s) => traceOf(s) === traceOf(processSpan!));
  const names = trace.map((s) => s.name);
  expect(names).toEqual(expect.arrayContaining(['storage get', 'storage put', 'send image']));
  expect(trace.some((s) => s.kind === SpanKind.CLIENT && dbSystem(s) === 'mongodb')).toBe(true);
  expect(trace.some((s) => s.kind === SpanKind.CLIENT && dbSystem(s) === 'redis')).toBe(true);
  // The worker wrote the converted file's record: an insert under its process span.
  const underProcess = (s: ReadableSpan): boolean => {
    for (let p: ReadableSpan | undefined = s; p; p = byId.get(p.parentSpanContext?.spanId ?? ''))
      if (p === processSpan) return true;
    return false;
  };
  expect(
    trace.some((s) => underProcess(s) && dbSystem(s) === 'mongodb' && /insert/.test(s.name)),
  ).toBe(true);
  expect(trace.some((s) => underProcess(s) && s.name === 'storage put')).toBe(true);
});

it('puts the W3C traceparent of the active span into a job', async () => {
  const jobs = api.ctx.queue;
  const key = await org.upload('Canon_40D.jpg');
  const res = await fetch(`${api.url}/media/metadata?mediaKey=${encodeURIComponent(key)}`, {
    headers: { ...org.auth, Prefer: 'respond-async' },
  });
  const { jobId } = ((await res.json()) as { data: { jobId: string } }).data;
  const job = await jobs.get(jobId);
  expect(job?.data.trace?.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
  const send = tracing
    .spans()
    .find((s) => s.name === 'send image' && s.attributes['messaging.message.id'] === jobId)!;
  expect(job?.data.trace?.traceparent).toBe(`00-${traceOf(send)}-${idOf(send)}-01`);
  // As a client would, fetch the result (a large one waits in storage until it is read).
  await eventually(async () => {
    const status = await fetch(`${api.url}/media/jobs/${jobId}`, { headers: org.auth });
    if (status.status !== 200) throw new Error(`job ${jobId}: ${status.status}`);
  });
});

it('is off without OTEL_TRACES_EXPORTER: no SDK, no trace in jobs', async () => {
  expect(startTracing(loadConfig({}).tracing, { serviceName: 'x' })).toBeUndefined();
  await tracing.shutdown();
  expect(currentJobTrace()).toBeUndefined();
});
