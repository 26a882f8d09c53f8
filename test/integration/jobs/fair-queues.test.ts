/**
 * One organization cannot fill the queues, through the
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
const unfinished = () => queue.getJobCountByTypes('waiting', 'delayed', 'active');

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
        const key = await org.upload(tiny, 'red.png');
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
      // Queued: waiting, or held back by the fair gate (delayed) behind the organization's first.
      expect(await capQueue.getJobCountByTypes('waiting', 'delayed')).toBe(3);
      // Another organization is not held back by the first one's cap.
      expect((await send(other)).status).toBe(202);
      expect(await capQueue.getJobCountByTypes('waiting', 'delayed')).toBe(4);

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
    const floodKey = await flood.upload(tiny, 'flood.png');
    const quietKey = await quiet.upload(tiny, 'quiet.png');
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
      // The flood's jobs that finished while the other organization's job waited in the queue:
      // from when it was queued (the API's own work before that, slower on a loaded machine,
      // is not the queue's) to when a worker took it.
      const completed = await queue.getJobs(['completed'], 0, -1);
      const metadataJob = completed.find(
        (j) =>
          j.name === 'image.metadata' &&
          (j.data as { organizationId: number }).organizationId === quiet.organization.id,
      );
      expect(metadataJob).toBeDefined();
      const during = completed.filter(
        (j) =>
          j.name === 'image.convert' &&
          j.finishedOn! > metadataJob!.timestamp &&
          j.finishedOn! <= metadataJob!.processedOn!,
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
      // Only the flood's jobs already handed to the workers when it was queued went first:
      // JOB_QUEUED_PER_SLOT (2) × one slot, the one running and the one waiting.
      expect(during).toBeLessThanOrEqual(2);
      expect(floodLeft).toBeGreaterThan(150);
    } finally {
      await worker.close();
    }
    // The flood's jobs not started are removed (as an organization's offboarding removes
    // them: the API's own removeUnstartedOf), so the test leaves no queued jobs behind
    // without running the rest of the 200. The closed worker finished its active one.
    await eventually(async () => {
      await api.ctx.queue.removeUnstartedOf(flood.organization.id);
      const left = await unfinished();
      if (left > 0) throw new Error(`${left} left`);
    }, 30_000);
  }, 240_000);
});

describe('one organization’s jobs keep their order', () => {
  it('jobs queued while earlier ones of the organization run start in the order they came', async () => {
    const org = await api.createOrg('ordered');
    const key = await org.upload(tiny, 'ordered.png');
    const worker = await startWorker(api.env.env, { WORKER_CONCURRENCY: '1' });
    const sent: string[] = [];
    const send = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const queued = await convertAsync(org, key);
        expect(queued.status).toBe(202);
        sent.push((queued.body as unknown as { data: { jobId: string } }).data.jobId);
      }
    };
    try {
      // A first batch, then more once part of it has run: their organization's count of
      // unfinished jobs is lower than when the first batch came.
      await send(30);
      await eventually(async () => {
        const done = (await queue.getJobs(['completed'], 0, -1)).filter((j) =>
          sent.includes(j.id!),
        );
        if (done.length < 10) throw new Error(`${done.length} of 10 done`);
      }, 60_000);
      await send(15);
      await eventually(async () => {
        const left = await unfinished();
        if (left > 0) throw new Error(`${left} left`);
      }, 120_000);
    } finally {
      await worker.close();
    }
    const jobs = await Promise.all(sent.map((id) => queue.getJob(id)));
    const started = jobs.map((j) => j!.processedOn!);
    // One slot: each job started after the one sent before it.
    const outOfOrder = started.flatMap((t, i) => (i > 0 && t < started[i - 1]! ? [sent[i]] : []));
    expect(outOfOrder).toEqual([]);
  }, 240_000);
});

describe('heavy jobs leave slots to other organizations', () => {
  it('one organization’s heavy conversions take one of two slots; another’s metadata does not wait for them', async () => {
    const [heavy, light] = [await api.createOrg('heavy'), await api.createOrg('light')];
    // A noisy 800 × 800 JPEG: to AVIF, a second or more of work per conversion (heavy by its size).
    const noisy = await sharp({
      create: {
        width: 800,
        height: 800,
        channels: 3,
        background: '#808080',
        noise: { type: 'gaussian', mean: 128, sigma: 60 },
      },
    })
      .jpeg({ quality: 95 })
      .toBuffer();
    const heavyKey = await heavy.upload(noisy, 'noisy.jpg');
    const lightKey = await light.upload(tiny, 'light.png');

    const worker = await startWorker(api.env.env, {
      WORKER_CONCURRENCY: '2',
      JOB_RESERVED_SLOTS: '1',
    });
    try {
      const flood: string[] = [];
      for (let i = 0; i < 4; i++) {
        const res = await fetch(`${api.url}/media/convert`, {
          method: 'POST',
          headers: { ...heavy.auth, 'Content-Type': 'application/json', Prefer: 'respond-async' },
          body: JSON.stringify({ mediaKey: heavyKey, format: 'avif' }),
        });
        expect(res.status).toBe(202);
        flood.push(((await res.json()) as { data: { jobId: string } }).data.jobId);
      }
      await eventually(async () => {
        if ((await queue.getActiveCount()) < 1) throw new Error('the flood has not started');
      });
      const res = await fetch(
        `${api.url}/media/metadata?mediaKey=${encodeURIComponent(lightKey)}`,
        { headers: light.auth },
      );
      expect(res.status).toBe(200);
      await eventually(async () => {
        const left = await unfinished();
        if (left > 0) throw new Error(`${left} left`);
      }, 120_000);

      const runs = (await Promise.all(flood.map((id) => queue.getJob(id)))).map((j) => ({
        start: j!.processedOn!,
        end: j!.finishedOn!,
      }));
      // Never two of the flood's heavy jobs at once: one slot stayed free.
      const overlapping = runs.filter((a, i) =>
        runs.some((b, k) => k !== i && a.start < b.end && b.start < a.end),
      );
      expect(overlapping).toEqual([]);
      // The other organization's job started while a heavy one ran, without waiting for it.
      const metadata = (await queue.getJobs(['completed'], 0, -1)).find(
        (j) =>
          j.name === 'image.metadata' &&
          (j.data as { organizationId: number }).organizationId === light.organization.id,
      )!;
      const runningMeanwhile = runs.filter(
        (r) => r.start <= metadata.processedOn! && metadata.processedOn! < r.end,
      );
      expect(runningMeanwhile.length).toBeLessThanOrEqual(1);
    } finally {
      await worker.close();
    }
  }, 240_000);
});
