/**
 * Issue 15, point 5: every job has a time limit (JOB_TIMEOUT_MS). With a
 * tiny one (1 s) and one job at a time, a slow conversion (a noisy 9 MP
 * image to GIF: several seconds of palette quantisation) fails with
 * 422 PROCESSING_TIMEOUT as the spec describes, leaves no record or object,
 * and the worker's only slot is free again: the next job (metadata) runs and
 * answers 200 while the slow one would still be working.
 */
import sharp from 'sharp';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('job-timeout');
  worker = await startWorker(api.env.env, { JOB_TIMEOUT_MS: '1000', WORKER_CONCURRENCY: '1' });
  org = await api.createOrg('slow');
});
afterAll(async () => {
  await worker.close();
  await api.close();
});

it('fails a job past JOB_TIMEOUT_MS with 422 PROCESSING_TIMEOUT and takes the next job', async () => {
  const noisy = await sharp({
    create: {
      width: 3000,
      height: 3000,
      channels: 3,
      background: '#808080',
      noise: { type: 'gaussian', mean: 128, sigma: 40 },
    },
  })
    .jpeg({ quality: 40 })
    .toBuffer();
  const slow = await org.upload(noisy, 'noisy.jpg');
  const small = await org.upload('Canon_40D.jpg', 'small.jpg');

  const res = await fetch(`${api.url}/media/convert`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ mediaKey: slow, format: 'gif' }),
  });
  const body = (await res.json()) as { error: string; jobId?: string };
  expectMatchesSpec('POST', '/media/convert', res.status, body, res.headers);
  expect(res.status).toBe(422);
  expect(body.error).toBe('PROCESSING_TIMEOUT');
  expect(body.jobId).toMatch(/^image-/);

  // The one slot is free: the next job runs now.
  const meta = await fetch(`${api.url}/media/metadata?mediaKey=${encodeURIComponent(small)}`, {
    headers: org.auth,
  });
  expect(meta.status).toBe(200);
  expect(((await meta.json()) as { data: { format: string } }).data.format).toBe('jpeg');

  // Nothing of the stopped conversion: only the two uploads.
  expect(await api.ctx.models.Media.countDocuments({ organizationId: org.organization.id })).toBe(
    2,
  );
  expect((await api.objectKeys()).sort()).toEqual([slow, small].sort());
});
