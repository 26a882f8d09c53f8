/**
 * The job time limit (JOB_TIMEOUT_MS) stops the work and keeps nothing. With
 * one image job at a time:
 *
 *  - a conversion and a render past the limit (a noisy 12 MP image to GIF,
 *    seconds of palette quantisation that libvips cannot interrupt; the GIF
 *    bound raised so they run) fail with 422 PROCESSING_TIMEOUT at the limit,
 *    and once their encode has ended (sharp idle again) no record, object or
 *    variant of them appears: the worker drops what it rendered instead of
 *    writing it. The slot is free: a metadata job answers 200 meanwhile.
 *  - a HEIC render past a shorter limit ends its decoding thread (its decode
 *    takes 0.5-1 s): the adapter's thread count is back to 0, and
 *    no variant appears.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import sharp from 'sharp';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { corpusFile } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';
import { LISTENERS } from '../../../worker/listeners';
import { thumbhashListener } from '../../../worker/listeners/thumbhash.listener';

let api: TestApi;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('job-timeout');
  org = await api.createOrg('slow');
});
afterAll(async () => {
  await api.close();
});

async function render(key: string, query: Record<string, string>) {
  const params = new URLSearchParams({ media: key, ...query });
  const res = await fetch(`${api.url}/media/render?${params.toString()}`, { headers: org.auth });
  const body = (await res.json()) as { error: string; jobId?: string };
  expectMatchesSpec('GET', '/media/render', res.status, body, res.headers);
  return { status: res.status, body };
}

/**
 * sharp has no work queued or running in this process (the worker's renders and
 * conversions). A bound against an encode that never ends, not a speed: a GIF encode of
 * the noisy image takes seconds alone, and much longer on a loaded 2-core machine.
 */
const sharpIdle = () =>
  eventually(() => expect(sharp.counters()).toEqual({ queue: 0, process: 0 }), 150_000, 100);

/** `check` passes on every poll for `ms` (what a late write would have broken by then). */
async function holds(check: () => Promise<void>, ms = 2_000): Promise<void> {
  const until = Date.now() + ms;
  do {
    await check();
    await sleep(100);
  } while (Date.now() < until);
}

/** The variants recorded on the source's record, and the objects under its `.variants/` prefix. */
async function variantsOf(key: string) {
  const record = await api.ctx.models.Media.findOne({ key }).lean();
  return {
    recorded: record?.variants?.length ?? 0,
    objects: await api.objectKeys(`.variants/${key}/`),
  };
}

describe('a 1 s limit', () => {
  let worker: TestWorker;
  let noisy: string;
  let small: string;

  beforeAll(async () => {
    worker = await startWorker(api.env.env, {
      JOB_TIMEOUT_MS: '1000',
      WORKER_CONCURRENCY: '1',
      // The GIF bound (2048 × 2048 by default) would refuse these renders outright.
      MAX_GIF_OUTPUT_PIXELS: '100000000',
    });
    // 12 MP of noise: 3-4 s of GIF quantisation and remapping after the pixels are read.
    const bytes = await sharp({
      create: {
        width: 4000,
        height: 3000,
        channels: 3,
        background: '#808080',
        noise: { type: 'gaussian', mean: 128, sigma: 40 },
      },
    })
      .jpeg({ quality: 40 })
      .toBuffer();
    noisy = await org.upload(bytes, 'noisy.jpg');
    small = await org.upload('Canon_40D.jpg', 'small.jpg');
  }, 60_000);
  afterAll(async () => {
    await worker.close();
  });

  it('fails a conversion past JOB_TIMEOUT_MS with 422 PROCESSING_TIMEOUT, takes the next job, and keeps nothing', async () => {
    const res = await fetch(`${api.url}/media/convert`, {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKey: noisy, format: 'gif' }),
    });
    const body = (await res.json()) as { error: string; jobId?: string };
    expectMatchesSpec('POST', '/media/convert', res.status, body, res.headers);
    expect(res.status).toBe(422);
    expect(body.error).toBe('PROCESSING_TIMEOUT');
    expect(body.jobId).toMatch(/^image-/);

    // The one slot is free: the next job runs (within the same 1 s limit) while the
    // stopped conversion's encode is still finishing.
    const meta = await fetch(`${api.url}/media/metadata?mediaKey=${encodeURIComponent(small)}`, {
      headers: org.auth,
    });
    expect(meta.status).toBe(200);
    expect(((await meta.json()) as { data: { format: string } }).data.format).toBe('jpeg');

    // Nothing of the stopped conversion once its work has ended: only the two uploads.
    await sharpIdle();
    await holds(async () => {
      expect(
        await api.ctx.models.Media.countDocuments({ organizationId: org.organization.id }),
      ).toBe(2);
      expect((await api.objectKeys(`${org.organization.slug}/`)).sort()).toEqual(
        [noisy, small].sort(),
      );
    });
  }, 240_000);

  it('fails a render past JOB_TIMEOUT_MS with 422 PROCESSING_TIMEOUT and stores no variant, even once its encode has ended', async () => {
    const started = performance.now();
    const { status, body } = await render(noisy, { format: 'gif' });
    expect([status, body.error]).toEqual([422, 'PROCESSING_TIMEOUT']);
    expect(body.jobId).toMatch(/^image-/);
    const answered = performance.now() - started;
    // Answered at the limit, not when the encode ended.
    expect(answered).toBeLessThan(10_000);

    const meta = await fetch(`${api.url}/media/metadata?mediaKey=${encodeURIComponent(small)}`, {
      headers: org.auth,
    });
    expect(meta.status).toBe(200);

    await sharpIdle();
    process.stdout.write(
      `GIF render past a 1 s limit: 422 after ${Math.round(answered)} ms, ` +
        `its encode ended ${Math.round(performance.now() - started - answered)} ms later\n`,
    );
    await holds(async () => expect(await variantsOf(noisy)).toEqual({ recorded: 0, objects: [] }));
  }, 240_000);
});

describe('a 500 ms limit and a HEIC', () => {
  let worker: TestWorker;

  beforeAll(async () => {
    // Without the placeholder listener: its decode of the uploaded HEIC would share the
    // decoding thread with the render's, and this test counts that thread and its decodes.
    worker = await startWorker(
      api.env.env,
      { JOB_TIMEOUT_MS: '500', WORKER_CONCURRENCY: '1' },
      { listeners: LISTENERS.filter((l) => l.name !== thumbhashListener.name) },
    );
  });
  afterAll(async () => {
    await worker.close();
  });

  it('ends the decoding thread of a HEIC render past the limit, and stores no variant', async () => {
    // 8.5 MP from an iPhone: its decode alone takes 0.5-1 s on a decoding thread, so the
    // 500 ms limit usually stops it mid-decode. On a loaded machine the decode can still
    // answer before the worker's timer fires (the limit then stops the resize or the
    // encode after it): that try says nothing about stopping a decode, and the next one
    // is made. Whether a decode ran to its end is the pool's own count, not a guess.
    const heic = await org.upload(corpusFile('images/heic-IMG_5195.HEIC'), 'phone.heic');
    expect(worker.heicThreads()).toBe(0);
    let stoppedMidDecode = false;
    for (let attempt = 1; attempt <= 3 && !stoppedMidDecode; attempt += 1) {
      const decodedBefore = worker.heicDecodesAnswered();
      // The thread is seen while the render runs: the decode did start.
      let seen = 0;
      const watch = setInterval(() => (seen = Math.max(seen, worker.heicThreads())), 5);
      const { status, body } = await render(heic, { w: '400', format: 'jpeg' }).finally(() =>
        clearInterval(watch),
      );
      expect([status, body.error]).toEqual([422, 'PROCESSING_TIMEOUT']);
      expect(seen).toBe(1);
      if (worker.heicDecodesAnswered() > decodedBefore) {
        process.stdout.write(`HEIC render, try ${attempt}: the decode ended before the limit\n`);
        continue;
      }
      // Ended, not left to finish its decode (it would then stay in the pool, idle, and
      // the pool would count an answered decode).
      const answered = performance.now();
      await eventually(() => expect(worker.heicThreads()).toBe(0), 30_000, 20);
      expect(worker.heicDecodesAnswered()).toBe(decodedBefore);
      stoppedMidDecode = true;
      process.stdout.write(
        `HEIC render past a 500 ms limit: its decoding thread ended ` +
          `${Math.round(performance.now() - answered)} ms after the 422\n`,
      );
    }
    expect(stoppedMidDecode).toBe(true);
    await sharpIdle();
    await holds(async () => expect(await variantsOf(heic)).toEqual({ recorded: 0, objects: [] }));
    expect(worker.heicThreads()).toBe(0);
  }, 240_000);
});
