/**
 * One organization cannot fill the queues (issue 15, point 8), through the
 * real API, worker, Redis, S3 and MongoDB:
 *
 * - past MAX_PENDING_JOBS unfinished jobs an organization is answered 429
 *   TOO_MANY_JOBS with Retry-After, nothing is queued, other organizations
 *   are not affected, and once its jobs end it may queue again;
 * - with one organization holding 200 queued conversions, another
 *   organization's single metadata request runs after about the jobs already
 *   running, not after the 200 (it is queued ahead of the backlog).
 */
import { Queue } from 'bullmq';
import sharp from 'sharp';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { form } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Body = { statusCode: number; error?: string; limit?: number; data: { key: string } };

let api: TestApi;
let queue: Queue;

/** A 32 × 32 PNG: conversions of it take milliseconds, so 200 of them are a short backlog. */
let tiny: Buffer;

beforeAll(async () => {
  // The cost limit is not under test here (200 conversions spend more than a minute's units).
  api = await startApi('fairqueues', { env: { RATE_LIMIT_MAX: '0', MAX_PENDING_JOBS: '200' } });
  queue = new Queue('image', {
    connection: { url: api.env.env.REDIS_URL },
    prefix: api.env.queuePrefix,
  });
  tiny = await sharp({
    create: { width: 32, height: 32, channels: 3, background: { r: 200, g: 30, b: 30 } },
  })
    .png()
    .toBuffer();
}, 60_000);
afterAll(async () => {
  await queue.close();
  await api.close();
});

async function upload(org: TestOrg, name: string): Promise<string> {
  const res = await fetch(`${api.url}/media/upload`, {
    method: 'POST',
    headers: org.auth,
    body: form([['file', tiny, name]]),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as Body).data.key;
}

async function convertAsync(org: TestOrg, key: string) {
  const res = await fetch(`${api.url}/media/convert`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json', Prefer: 'respond-async' },
    body: JSON.stringify({ mediaKey: key, format: 'webp' }),
  });
  const body = (await res.json()) as Body;
  expectMatchesSpec('POST', '/media/convert', res.status, body, res.headers);
  return { status: res.status, body, retryAfter: res.headers.get('retry-after') };
}

/** Jobs of this test's image queue not yet ended. */
const unfinished = () => queue.getJobCountByTypes('waiting', 'prioritized', 'delayed', 'active');

describe('an organization’s unfinished jobs are capped', () => {
  it('past the cap: 429 TOO_MANY_JOBS with Retry-After, nothing queued, others unaffected; freed when jobs end', async () => {
    const capped = await startApi('fairqueuescap', {
      env: { RATE_LIMIT_MAX: '0', MAX_PENDING_JOBS: '3' },
    });
    const capQueue = new Queue('image', {
      connection: { url: capped.env.env.REDIS_URL },
      prefix: capped.env.queuePrefix,
    });
    try {
      const [greedy, other] = [await capped.createOrg('greedy'), await capped.createOrg('other')];
      const send = async (org: TestOrg) => {
        const up = await fetch(`${capped.url}/media/upload`, {
          method: 'POST',
          headers: org.auth,
          body: form([['file', tiny, 'red.png']]),
        });
        const key = ((await up.json()) as Body).data.key;
        const res = await fetch(`${capped.url}/media/convert`, {
          method: 'POST',
          headers: { ...org.auth, 'Content-Type': 'application/json', Prefer: 'respond-async' },
          body: JSON.stringify({ mediaKey: key, format: 'webp' }),
        });
        const body = (await res.json()) as Body;
        expectMatchesSpec('POST', '/media/convert', res.status, body, res.headers);
        return { status: res.status, body, retryAfter: res.headers.get('retry-after') };
      };
      // No worker yet: the jobs stay queued.
      for (let i = 0; i < 3; i++) expect((await send(greedy)).status).toBe(202);
      const refused = await send(greedy);
      expect(refused.status).toBe(429);
      expect(refused.body).toMatchObject({ statusCode: 429, error: 'TOO_MANY_JOBS', limit: 3 });
      expect(Number(refused.retryAfter)).toBeGreaterThan(0);
      expect(await capQueue.getJobCountByTypes('waiting', 'prioritized')).toBe(3);
      // Another organization is not held back by the first one's cap.
      expect((await send(other)).status).toBe(202);
      expect(await capQueue.getJobCountByTypes('waiting', 'prioritized')).toBe(4);

      // Once its jobs have ended, the organization may queue again.
      const worker: TestWorker = await startWorker(capped.env.env);
      try {
        await eventually(async () => {
          const counts = await capQueue.getJobCountByTypes('completed');
          if (counts < 4) throw new Error(`${counts} of 4 completed`);
        });
        expect((await send(greedy)).status).toBe(202);
      } finally {
        await worker.close();
      }
    } finally {
      await capQueue.close();
      await capped.close();
    }
  }, 120_000);
});

describe('queues stay fair', () => {
  it('another organization’s metadata request runs ahead of a 200-conversion backlog', async () => {
    const [flood, quiet] = [await api.createOrg('flood'), await api.createOrg('quiet')];
    const floodKey = await upload(flood, 'flood.png');
    const quietKey = await upload(quiet, 'quiet.png');
    for (let i = 0; i < 200; i++) {
      const queued = await convertAsync(flood, floodKey);
      expect(queued.status).toBe(202);
    }
    // The 201st is past the default cap of 200.
    expect((await convertAsync(flood, floodKey)).body.error).toBe('TOO_MANY_JOBS');
    expect(await unfinished()).toBe(200);

    const worker = await startWorker(api.env.env, { WORKER_CONCURRENCY: '1' });
    try {
      // Let the backlog start draining, then ask as the other organization.
      await eventually(async () => {
        if ((await queue.getJobCountByTypes('completed')) < 3) throw new Error('not started');
      });
      const asked = Date.now();
      const res = await fetch(
        `${api.url}/media/metadata?mediaKey=${encodeURIComponent(quietKey)}`,
        { headers: quiet.auth },
      );
      const answered = Date.now();
      expect(res.status).toBe(200);
      // The flood's jobs that finished while the other organization waited.
      const completed = await queue.getJobs(['completed'], 0, -1);
      const during = completed.filter(
        (j) => j.name === 'image.convert' && j.finishedOn! > asked && j.finishedOn! <= answered,
      ).length;
      const floodLeft = await unfinished();
      const durations = completed
        .filter((j) => j.name === 'image.convert')
        .map((j) => j.finishedOn! - j.processedOn!);
      const meanJobMs = durations.reduce((a, b) => a + b, 0) / durations.length;
      process.stdout.write(
        `fair queues: metadata of another organization answered in ${answered - asked} ms ` +
          `with ${floodLeft} of the flood's 200 conversions still unfinished; ` +
          `${during} flood jobs finished meanwhile (mean conversion ${meanJobMs.toFixed(1)} ms)\n`,
      );
      // Only the job running when it was queued (and one taken at that instant) went first.
      expect(during).toBeLessThanOrEqual(2);
      expect(floodLeft).toBeGreaterThan(150);
    } finally {
      await worker.close();
    }
    // Drained by a second worker so the test leaves no queued jobs behind.
    const drain = await startWorker(api.env.env);
    try {
      await eventually(async () => {
        const left = await unfinished();
        if (left > 0) throw new Error(`${left} left`);
      }, 120_000);
    } finally {
      await drain.close();
    }
  }, 240_000);
});
