/**
 * A probe of where a first render's time goes through the API, for
 * docs/benchmarks.md ("PDF pages as images"): the API from `dist/` (run `npm
 * run build` first) on the benchmark's services, one worker taking one job at
 * a time, and page 1 of a 100-page PDF (the pdf-render benchmark's) rendered
 * to a 400 px WebP `--n` times, each with another quality (each a first
 * render: a job), one at a time with `--pause` ms between them. Per render,
 * from the client's clock and BullMQ's own timestamps of its job: the API
 * before the job was added (the token, the source's record, admission, the
 * fair gate, the add), the wait in the queue, the worker's job, and the API
 * after the job finished (the completion event, the hand-off's read, the
 * answer). The first 5 are left out (warm-up).
 *
 * With `--photo`, each render names a fresh upload of the render-peers
 * benchmark's photo (tests-42_IndexError.jpg → 400 px WebP), uploaded
 * before the renders and its placeholder computed, as that benchmark does;
 * `--workers` sets how many workers take the jobs (one job each), so with 2
 * a render finds its source in the worker's cache about half the time. The
 * workers log each job's own split to stderr (`"msg":"rendered"`, its
 * `phases`: lookups, source read, render, booking).
 *
 *   npx tsx bench/render-split-probe.ts [--n 90] [--pause 100] [--photo] [--workers 1]
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Queue } from 'bullmq';
import { PDFDocument } from 'pdf-lib';
import { Agent, request } from 'undici';
import { ONE_JOB_EACH } from './benchmarks/convert';
import { CORPUS } from './lib/benchmark';
import { Stack } from './lib/stack';
import { stat } from './lib/stats';
import { runBenchmark, startServices } from './services';

const print = (line: string) => process.stdout.write(`${line}\n`);
const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '90' },
    pause: { type: 'string', default: '100' },
    photo: { type: 'boolean', default: false },
    workers: { type: 'string', default: '1' },
  },
});
const PHOTO = 'tests-42_IndexError.jpg';
const WARM_UP = 5;

async function hundredPages(): Promise<Buffer> {
  const source = await PDFDocument.load(readFileSync(join(CORPUS, 'pdfs', 'pdflatex-4-pages.pdf')));
  const doc = await PDFDocument.create();
  while (doc.getPageCount() < 100) {
    for (const page of await doc.copyPages(source, source.getPageIndices())) doc.addPage(page);
  }
  return Buffer.from(await doc.save());
}

/** `n` render URLs of page 1 of one 100-page PDF, each with another quality (a first render). */
async function pageUrls(stack: Stack, n: number): Promise<string[]> {
  const form = new FormData();
  form.append('file', new Blob([await hundredPages()], { type: 'application/pdf' }), 'h.pdf');
  const up = await fetch(`${stack.url}/media/upload`, {
    method: 'POST',
    headers: stack.auth,
    body: form,
  });
  const { key } = ((await up.json()) as { data: { key: string } }).data;
  return Array.from(
    { length: n },
    (_, i) =>
      `${stack.url}/media/render?media=${encodeURIComponent(key)}&w=400&format=webp&q=${1 + (i % 100)}&page=1`,
  );
}

/** `n` render URLs, each of a fresh upload of the photo whose placeholder is computed. */
async function photoUrls(stack: Stack, n: number): Promise<string[]> {
  const bytes = readFileSync(join(CORPUS, 'images', PHOTO));
  const keys: string[] = [];
  for (let i = 0; i < n; i++) {
    const form = new FormData();
    form.append('file', new Blob([bytes], { type: 'image/jpeg' }), PHOTO);
    const up = await fetch(`${stack.url}/media/upload`, {
      method: 'POST',
      headers: stack.auth,
      body: form,
    });
    if (up.status !== 201) throw new Error(`upload answered ${up.status}`);
    keys.push(((await up.json()) as { data: { key: string } }).data.key);
  }
  const deadline = performance.now() + 120_000;
  while (
    (await stack.data.models.Media.countDocuments({
      key: { $in: keys },
      thumbhash: { $exists: false },
    })) > 0
  ) {
    if (performance.now() > deadline) throw new Error('placeholders still missing');
    await sleep(50);
  }
  return keys.map(
    (key) => `${stack.url}/media/render?media=${encodeURIComponent(key)}&w=400&format=webp`,
  );
}

runBenchmark(async () => {
  const n = Number(values.n);
  const services = await startServices();
  const stack = await Stack.start(services, 'dist', { LOG_LEVEL: 'warn' });
  const client = new Agent({ connections: 2 });
  const queue = new Queue('image', {
    connection: { url: stack.env.REDIS_URL },
    prefix: stack.config.queuePrefix,
  });
  try {
    // The workers log each job's own split (`rendered`, its `phases`) to this process's stderr.
    await stack.setWorkers(Number(values.workers), { ...ONE_JOB_EACH, LOG_LEVEL: 'info' });
    const urls = values.photo ? await photoUrls(stack, n) : await pageUrls(stack, n);
    const spans: { start: number; end: number }[] = [];
    for (const url of urls) {
      const start = Date.now();
      const res = await request(url, { headers: stack.auth, dispatcher: client });
      await res.body.arrayBuffer();
      if (res.statusCode !== 200) throw new Error(`render answered ${res.statusCode}`);
      spans.push({ start, end: Date.now() });
      await sleep(Number(values.pause));
    }
    const jobs = (await queue.getJobs(['completed'], 0, 10_000))
      .filter((job) => job.name === 'image.render')
      .sort((a, b) => a.timestamp - b.timestamp);
    if (jobs.length !== n) throw new Error(`${jobs.length} render jobs for ${n} renders`);
    const parts = { wall: [], before: [], queued: [], worker: [], after: [] } as Record<
      string,
      number[]
    >;
    jobs.forEach((job, i) => {
      if (i < WARM_UP) return;
      const { start, end } = spans[i]!;
      parts.wall!.push(end - start);
      parts.before!.push(job.timestamp - start);
      parts.queued!.push(job.processedOn! - job.timestamp);
      parts.worker!.push(job.finishedOn! - job.processedOn!);
      parts.after!.push(end - job.finishedOn!);
    });
    const what = values.photo ? `${PHOTO} → 400 px WebP` : 'page 1 → 400 px WebP';
    print(`${n - WARM_UP} first renders of ${what}, ms (median, min–max; p95)`);
    for (const [name, xs] of Object.entries(parts)) {
      const s = stat(xs);
      const p95 = [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.95)]!;
      print(`  ${name.padEnd(7)} ${s.median.toFixed(1)} (${s.min}–${s.max}; p95 ${p95})`);
    }
  } finally {
    await queue.close();
    await client.close();
    await stack.stop();
    await services.stop();
  }
});
