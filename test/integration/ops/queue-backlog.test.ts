/**
 * What the deployment's autoscaling, alerts and dashboard read as a queue's
 * backlog (deploy/kubernetes/base/keda.yaml, deploy/prometheus/alerts.yml,
 * deploy/grafana/media-service.json), through the real API, worker, Redis, S3
 * and MongoDB: the jobs the fair gate holds back are reported by GET /metrics
 * as `media_queue_jobs{state="held"}`, apart from `waiting` and `delayed`,
 * and fall back to 0 once the workers have run them; a held job's status URL
 * answers `waiting`, as api/openapi.yaml says.
 */
import { Queue } from 'bullmq';
import sharp from 'sharp';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker } from '../../support/worker';

type Body = { statusCode: number; data: { key: string; jobId: string; state: string } };

let api: TestApi;
let org: TestOrg;
let queue: Queue;

beforeAll(async () => {
  // No worker yet, so the gate counts one live slot: an organization has at most
  // JOB_QUEUED_PER_SLOT (2) jobs handed to the workers, the others held.
  api = await startApi('queuebacklog', { env: { RATE_LIMIT_MAX: '0', JOB_QUEUED_PER_SLOT: '2' } });
  org = await api.createOrg('backlog');
  queue = new Queue('image', {
    connection: { url: api.env.env.REDIS_URL },
    prefix: api.env.queuePrefix,
  });
}, 60_000);
afterAll(async () => {
  await queue.close();
  await api.close();
});

/** `media_queue_jobs` of the image queue, by state, from one scrape of the API. */
async function imageQueueJobs(): Promise<Record<string, number>> {
  const res = await fetch(`${api.url}/metrics`);
  expect(res.status).toBe(200);
  const out: Record<string, number> = {};
  for (const m of (await res.text()).matchAll(
    /^media_queue_jobs\{(?=[^}]*queue="image")[^}]*state="([^"]+)"[^}]*\} (\S+)$/gm,
  ))
    out[m[1]!] = Number(m[2]);
  return out;
}

it('held jobs are the backlog beside waiting ones, reported waiting to clients, 0 once run', async () => {
  const png = await sharp({
    create: { width: 32, height: 32, channels: 3, background: { r: 20, g: 90, b: 200 } },
  })
    .png()
    .toBuffer();
  const key = await org.upload(png, 'blue.png');

  const jobIds: string[] = [];
  for (let i = 0; i < 5; i++) {
    const res = await fetch(`${api.url}/media/convert`, {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json', Prefer: 'respond-async' },
      body: JSON.stringify({ mediaKey: key, format: 'webp' }),
    });
    expect(res.status).toBe(202);
    jobIds.push(((await res.json()) as Body).data.jobId);
  }

  // Each job is entered in the gate and added before the 202: 2 handed to the workers
  // (BullMQ's wait list), 3 held (BullMQ's delayed set), no retry among the delayed.
  expect(await imageQueueJobs()).toMatchObject({ waiting: 2, held: 3, delayed: 0, active: 0 });
  const last = jobIds[4]!;
  expect(await queue.getJobState(last)).toBe('delayed');
  const status = await fetch(`${api.url}/media/jobs/${last}`, { headers: org.auth });
  const body = (await status.json()) as Body;
  expectMatchesSpec('GET', '/media/jobs/{id}', status.status, body, status.headers);
  expect([status.status, body.data.state]).toEqual([202, 'waiting']);

  // A worker runs them all: the backlog falls to 0, so the pool may scale back in.
  const worker = await startWorker(api.env.env);
  try {
    await eventually(async () => {
      expect(await queue.getJobCountByTypes('completed')).toBe(5);
    }, 30_000);
    expect(await imageQueueJobs()).toMatchObject({ waiting: 0, held: 0, delayed: 0 });
  } finally {
    await worker.close();
  }
}, 120_000);
