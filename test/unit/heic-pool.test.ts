/**
 * The HEIC decoding threads (worker/image/heic-pool.ts): decodes run off the
 * caller's thread, queue when every thread is busy, can be stopped, and an
 * idle pool does not hold the process open.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import sharp from 'sharp';
import { HeicThreadPool } from '../../worker/image/heic-pool';
import { corpusFile, fixture } from '../support/files';

const PHONE = corpusFile('images/heic-IMG_5195.HEIC'); // 2,566 × 3,313
const SMALL = fixture('heic-samplefilehub.heif');

let pool: HeicThreadPool;
beforeEach(() => {
  pool = new HeicThreadPool(1);
});
afterEach(() => pool.close());

it('decodes into a TIFF sharp reads, with the header’s dimensions', async () => {
  expect(pool.threadCount).toBe(0);
  const tiff = await pool.decode(SMALL, undefined);
  const [decoded, header] = await Promise.all([sharp(tiff).metadata(), sharp(SMALL).metadata()]);
  expect([decoded.format, decoded.width, decoded.height]).toEqual([
    'tiff',
    header.width,
    header.height,
  ]);
  expect(pool.threadCount).toBe(1);
});

it('queues decodes past its size on the same thread, each getting its own answer', async () => {
  const [a, b, c] = await Promise.all([
    pool.decode(SMALL, undefined),
    pool.decode(PHONE, undefined),
    pool.decode(SMALL, undefined),
  ]);
  expect(pool.threadCount).toBe(1);
  expect(a.equals(c)).toBe(true);
  expect((await sharp(b).metadata()).width).toBe(2566);
});

it('answers a damaged HEIC with the decoder’s 422', async () => {
  const cut = PHONE.subarray(0, PHONE.length - 1000);
  await expect(pool.decode(cut, undefined)).rejects.toMatchObject({
    status: 422,
    code: 'UNREADABLE_MEDIA',
  });
  // The thread is still there for the next HEIC.
  await expect(pool.decode(SMALL, undefined)).resolves.toBeInstanceOf(Buffer);
});

it('stops a decode when its signal aborts, ending the thread; the next decode gets a new one', async () => {
  await pool.decode(SMALL, undefined); // the thread and its decoder are loaded
  const stop = new AbortController();
  setTimeout(() => stop.abort(new Error('time is up')), 50);
  // No bound in milliseconds (CI machines are shared): the abort's own error,
  // not the decoder's answer, and no thread left, show the decode was cut.
  await expect(pool.decode(PHONE, undefined, stop.signal)).rejects.toThrow('time is up');
  expect(pool.threadCount).toBe(0);
  await expect(pool.decode(SMALL, undefined)).resolves.toBeInstanceOf(Buffer);
  expect(pool.threadCount).toBe(1);
});

it('never starts a decode whose signal aborted while it waited for the thread', async () => {
  await pool.decode(SMALL, undefined);
  const decodedBefore = pool.decodesAnswered;
  const stop = new AbortController();
  const running = pool.decode(PHONE, undefined);
  const waiting = pool.decode(PHONE, undefined, stop.signal);
  let settled = false;
  void running.then(() => (settled = true));
  stop.abort(new Error('time is up'));
  // It leaves the line at its abort, while the decode ahead of it still runs.
  await expect(waiting).rejects.toThrow('time is up');
  expect(settled).toBe(false);
  await expect(running).resolves.toBeInstanceOf(Buffer);
  // Only the first decode ran.
  expect(pool.decodesAnswered).toBe(decodedBefore + 1);
  expect(pool.threadCount).toBe(1);
});

it('starts no thread for a waiting decode that stopped before the running one was stopped', async () => {
  // The order of a job past its limit waiting behind another one past its own (a render
  // behind an upload's placeholder): the waiter stops first, then the running decode is
  // stopped and its thread ended. Nothing is left: no thread started for the waiter.
  await pool.decode(SMALL, undefined);
  const decodedBefore = pool.decodesAnswered;
  const first = new AbortController();
  const second = new AbortController();
  const running = pool.decode(PHONE, undefined, first.signal);
  const waiting = pool.decode(PHONE, undefined, second.signal);
  await new Promise((resolve) => setTimeout(resolve, 20)); // the first decode is on its thread
  second.abort(new Error('the waiter’s time is up'));
  first.abort(new Error('the runner’s time is up'));
  await expect(waiting).rejects.toThrow('the waiter’s time is up');
  await expect(running).rejects.toThrow('the runner’s time is up');
  await new Promise((resolve) => setImmediate(resolve));
  expect(pool.threadCount).toBe(0);
  expect(pool.decodesAnswered).toBe(decodedBefore);
});

it('fails the running and the waiting decodes when closed, and refuses new ones', async () => {
  const both = Promise.allSettled([pool.decode(PHONE, undefined), pool.decode(SMALL, undefined)]);
  await new Promise((resolve) => setTimeout(resolve, 50));
  await pool.close();
  const [running, waiting] = await both;
  expect(running).toMatchObject({ status: 'rejected', reason: { status: 422 } });
  expect(waiting).toMatchObject({
    status: 'rejected',
    reason: { message: expect.stringContaining('closed') as unknown },
  });
  await expect(pool.decode(SMALL, undefined)).rejects.toThrow('closed');
  expect(pool.threadCount).toBe(0);
});

it('does not hold a process open once its decodes are done', () => {
  const script = `
    const { HeicThreadPool } = require(${JSON.stringify(join(__dirname, '../../worker/image/heic-pool.ts'))});
    const { readFileSync } = require('node:fs');
    new HeicThreadPool(1)
      .decode(readFileSync(${JSON.stringify(join(__dirname, '../fixtures/heic-samplefilehub.heif'))}), undefined)
      .then((tiff) => console.log('decoded', tiff.length));
  `;
  const run = spawnSync(process.execPath, ['--import', 'tsx', '-e', script], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  expect(run.stderr).toBe('');
  expect(run.stdout).toMatch(/^decoded \d+\n$/);
  expect(run.status).toBe(0); // not killed by the timeout: it exited by itself
});
