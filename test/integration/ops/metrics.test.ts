/**
 * GET /metrics of the API and the worker, against the real services: the
 * request histogram is labelled by route pattern (never the raw URL), uploads
 * count their bytes, downloads the bytes they send, queue depths are read on
 * scrape, calls to MongoDB, Redis and storage are timed (and readiness checks),
 * a conversion records its job duration and its queue wait, a refused job
 * counts its error code, and METRICS_TOKEN closes the endpoint.
 */
import { corpusFile } from '../../support/files';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { startWorker, type TestWorker } from '../../support/worker';

/** The samples of a Prometheus text exposition: `name{labels}` → value. */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

/** Samples of `name` whose labels include every `label="value"` given. */
function find(all: Map<string, number>, name: string, labels: Record<string, string> = {}) {
  return [...all.entries()].filter(
    ([key]) =>
      (key === name || key.startsWith(`${name}{`)) &&
      Object.entries(labels).every(([k, v]) => key.includes(`${k}="${v}"`)),
  );
}

async function scrape(base: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}/metrics`, { headers });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
  return samples(await res.text());
}

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('metrics');
  worker = await startWorker(api.env.env);
  org = await api.createOrg('metrics');
});
afterAll(async () => {
  await worker.close();
  await api.close();
});

it('API: route-labelled latency, bytes stored, queue depths and process metrics', async () => {
  const record = await org.uploadRecord('Canon_40D.jpg');
  // A job status lookup: labelled by its pattern, not its id.
  await fetch(`${api.url}/media/jobs/image-00000000-0000-4000-8000-000000000000`, {
    headers: org.auth,
  });
  await fetch(`${api.url}/no/such/route`);

  const all = await scrape(api.url);
  const uploads = find(all, 'http_request_duration_seconds_count', {
    method: 'POST',
    route: '/media/upload',
    status: '201',
  });
  expect(uploads).toHaveLength(1);
  expect(uploads[0]![1]).toBeGreaterThanOrEqual(1);
  expect(
    find(all, 'http_request_duration_seconds_count', { route: '/media/jobs/:id' }),
  ).not.toHaveLength(0);
  expect(find(all, 'http_request_duration_seconds_count', { route: 'unmatched' })).not.toHaveLength(
    0,
  );
  expect(find(all, 'http_request_duration_seconds_count', { route: '/no/such/route' })).toEqual([]);

  const stored = find(all, 'media_bytes_stored_total', { endpoint: '/media/upload' });
  expect(stored).toHaveLength(1);
  expect(stored[0]![1]).toBeGreaterThanOrEqual(record.bytes);

  for (const queue of ['image', 'pdf']) {
    expect(find(all, 'media_queue_jobs', { queue, state: 'waiting' })).toHaveLength(1);
  }

  // Calls to each dependency, by operation: the upload's put and its record's insert, and the
  // queue counts the scrape itself read.
  const calls = (dependency: string, operation: string) =>
    find(all, 'media_dependency_duration_seconds_count', { dependency, operation })[0]?.[1] ?? 0;
  expect(calls('storage', 'put')).toBeGreaterThanOrEqual(1);
  expect(calls('mongodb', 'insert')).toBeGreaterThanOrEqual(1);
  expect(calls('mongodb', 'find')).toBeGreaterThanOrEqual(1);
  expect(find(all, 'media_dependency_errors_total', { dependency: 'storage' })).toEqual([]);
  const again = await scrape(api.url);
  expect(
    find(again, 'media_dependency_duration_seconds_count', {
      dependency: 'redis',
      operation: 'getJobCounts',
    })[0]![1],
  ).toBeGreaterThanOrEqual(2);
});

it('API: downloads count the bytes they send; readiness checks are timed per dependency', async () => {
  const record = await org.uploadRecord('Canon_40D.jpg');
  const before = find(await scrape(api.url), 'media_bytes_served_total')[0]?.[1] ?? 0;
  const whole = await fetch(`${api.url}/media/download?media=${encodeURIComponent(record.key)}`, {
    headers: org.auth,
  });
  expect((await whole.arrayBuffer()).byteLength).toBe(record.bytes);
  const part = await fetch(`${api.url}/media/download?media=${encodeURIComponent(record.key)}`, {
    headers: { ...org.auth, Range: 'bytes=0-99' },
  });
  expect(part.status).toBe(206);
  await part.arrayBuffer();
  expect((await fetch(`${api.url}/readyz`)).status).toBe(200);

  const all = await scrape(api.url);
  expect(find(all, 'media_bytes_served_total')[0]![1] - before).toBe(record.bytes + 100);
  expect(
    find(all, 'media_dependency_duration_seconds_count', {
      dependency: 'storage',
      operation: 'get',
    })[0]![1],
  ).toBeGreaterThanOrEqual(2);
  for (const dependency of ['mongodb', 'redis', 'storage']) {
    expect(
      find(all, 'media_dependency_duration_seconds_count', { dependency, operation: 'readiness' }),
    ).toHaveLength(1);
  }
  expect(find(all, 'process_cpu_user_seconds_total')).toHaveLength(1);
  expect(find(all, 'nodejs_eventloop_lag_seconds')).toHaveLength(1);
});

it('worker: a conversion records its duration as completed', async () => {
  const { key } = await org.uploadRecord('Canon_40D.jpg');
  const res = await fetch(`${api.url}/media/convert`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ mediaKey: key, format: 'png' }),
  });
  expect(res.status).toBe(201);
  const all = await scrape(worker.opsUrl);
  const completed = find(all, 'media_job_duration_seconds_count', {
    queue: 'image',
    name: 'image.convert',
    outcome: 'completed',
  });
  expect(completed).toHaveLength(1);
  expect(completed[0]![1]).toBeGreaterThanOrEqual(1);
  expect(
    find(all, 'media_job_duration_seconds_sum', {
      name: 'image.convert',
      outcome: 'completed',
    })[0]![1],
  ).toBeGreaterThan(0);
  expect(find(all, 'process_resident_memory_bytes')).toHaveLength(1);

  // Its wait in the queue (added → started), and the worker's own storage and MongoDB calls.
  expect(
    find(all, 'media_job_wait_seconds_count', { queue: 'image', name: 'image.convert' })[0]![1],
  ).toBeGreaterThanOrEqual(1);
  expect(
    find(all, 'media_dependency_duration_seconds_count', {
      dependency: 'storage',
      operation: 'get',
    }),
  ).toHaveLength(1);
  expect(
    find(all, 'media_dependency_duration_seconds_count', {
      dependency: 'mongodb',
      operation: 'insert',
    }),
  ).toHaveLength(1);
});

it('worker: a refused job counts as a failure with its error code', async () => {
  const key = await org.upload(corpusFile('images/corrupted.jpg'), 'corrupted.jpg');
  const convert = await fetch(`${api.url}/media/convert`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ mediaKey: key, format: 'png' }),
  });
  const { error } = (await convert.json()) as { error: string };
  expect([convert.status, error]).toEqual([422, 'UNREADABLE_MEDIA']);
  const failures = find(await scrape(worker.opsUrl), 'media_job_failures_total', {
    queue: 'image',
    name: 'image.convert',
    code: 'UNREADABLE_MEDIA',
    outcome: 'failed',
  });
  expect(failures).toHaveLength(1);
  expect(failures[0]![1]).toBeGreaterThanOrEqual(1);
});

it('METRICS_TOKEN: /metrics needs the bearer token (API and worker); health stays open', async () => {
  const token = 'scrape-secret-123';
  const closed = await startApi('metricstoken', { env: { METRICS_TOKEN: token } });
  const closedWorker = await startWorker(closed.env.env);
  try {
    for (const base of [closed.url, closedWorker.opsUrl]) {
      const denied = await fetch(`${base}/metrics`);
      expect(denied.status).toBe(401);
      expect(denied.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect(
        (await fetch(`${base}/metrics`, { headers: { Authorization: 'Bearer nope' } })).status,
      ).toBe(401);
      await scrape(base, { Authorization: `Bearer ${token}` });
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
    }
  } finally {
    await closedWorker.close();
    await closed.close();
  }
});
