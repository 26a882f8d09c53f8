/**
 * PDF pages as images: page 1 of a 100-page PDF to a 400 px WebP, a first
 * render each time (a new variant: the quality changes), through the API,
 * the queue and one worker process, beside the same rasterizer in-process
 * (the image adapter: PDFium on its thread, then sharp), and beside the same
 * with the worker's storage read and write around it (the render benchmark's
 * peer process), alternating.
 */
import { PDFDocument } from 'pdf-lib';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import type { RenderOptions } from '../../shared/media/render-options';
import { ImageAdapter } from '../../worker/image/image.adapter';
import { configureSharp } from '../../worker/image/sharp';
import { CORPUS, type Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import { Peer } from '../lib/peer';
import { target, type BenchmarkResult, type Table } from '../lib/report';
import { percentile, stat } from '../lib/stats';
import { ONE_JOB_EACH } from './convert';

const PAGES = 100;
/**
 * The pause after each measurement before the next one starts: the API writes
 * the variant and settles its record after its answer, and without the pause
 * that work shares the cores with whichever measurement comes next (it slowed
 * the in-process render that followed an API request by half at p95: 63 ms
 * against 40 in one run, so the ratio flattered the API).
 */
const SETTLE_MS = 100;

/** Why the API's first render of a page is slower than the same render in-process. */
const API_PATH = `The render is the same on both sides (the worker's source cache holds the
PDF, so it is not read from S3 again; PDFium parses the document in 0.2 ms
and rasterizes the page in about 5 ms, sharp resizes and encodes the rest);
what the API path adds is the job around it, about 12 ms on a render of
26 ms. Split with BullMQ's own timestamps (\`bench/render-split-probe.ts\`,
85 first renders paced as here, medians): the API before the job is in the
queue (the bearer token, the source's record, admission, the fair gate, the
add) 4 ms, the wait in the queue 1 ms, the worker's job 31-33 ms, 5-7 ms
longer than the render alone (its lookups beside the render, the quota
reservation, the variant's booking and the hand-off of its bytes to Redis,
BullMQ's finish), and the API after the job (the completion event, the
hand-off's read, the answer) 3 ms. The target needs the whole hop within
about 3 ms of a 26 ms render: the separate worker process the design asks for
costs more than that on this machine. The variant's S3 write and its
record's last update come after the answer, so the API is level with the
in-process render with its S3 read and write (the first target).`;
const client = new Agent({ connections: 2 });

/** A 100-page PDF: the corpus's 4-page pdfTeX document, its pages copied 25 times. */
async function hundredPages(): Promise<Buffer> {
  const source = await PDFDocument.load(readFileSync(join(CORPUS, 'pdfs', 'pdflatex-4-pages.pdf')));
  const doc = await PDFDocument.create();
  while (doc.getPageCount() < PAGES) {
    for (const page of await doc.copyPages(source, source.getPageIndices())) doc.addPage(page);
  }
  return Buffer.from(await doc.save());
}

export const pdfRender: Benchmark = {
  id: 'pdf-render',
  title: 'PDF pages as images',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const samples = ctx.quick ? 3 : 40;
    // p95 of 40 samples is the second-slowest: one round's ratio swings with a single slow
    // request on either side, so the ratio is taken per round, as everywhere in the suite.
    const rounds = ctx.quick ? 1 : 5;
    configureSharp();
    const pdf = await hundredPages();
    await stack.setWorkers(1, ONE_JOB_EACH);
    /** The PDF as a new record: each round's renders are first renders of its own source. */
    const uploadPdf = async (): Promise<string> => {
      const fd = new FormData();
      fd.append('file', new Blob([pdf], { type: 'application/pdf' }), 'hundred.pdf');
      const up = await fetch(`${stack.url}/media/upload`, {
        method: 'POST',
        headers: stack.auth,
        body: fd,
      });
      if (up.status !== 201) throw new Error(`upload answered ${up.status}`);
      return ((await up.json()) as { data: { key: string } }).data.key;
    };
    let key = await uploadPdf();

    const adapter = new ImageAdapter({ maxInputPixels: 268_402_689 });
    const options = (q: number): RenderOptions => ({
      width: 400,
      height: null,
      fit: 'cover',
      format: 'webp',
      quality: q,
      keepMetadata: false,
      page: 1,
    });
    const viaApi = async (q: number) => {
      const started = performance.now();
      const res = await request(
        `${stack.url}/media/render?media=${encodeURIComponent(key)}&w=400&format=webp&q=${q}&page=1`,
        { headers: stack.auth, dispatcher: client },
      );
      const body = Buffer.from(await res.body.arrayBuffer());
      if (res.statusCode !== 200)
        throw new Error(`render answered ${res.statusCode}: ${body.toString()}`);
      return performance.now() - started;
    };
    const inProcess = async (q: number) => {
      const started = performance.now();
      await adapter.render(pdf, options(q));
      return performance.now() - started;
    };
    const peer = await Peer.start(stack.env);
    const withStorage = async (q: number) =>
      (await peer.call({ op: 'render', key, options: options(q) })).ms;
    try {
      // Warm both (PDFium's load on a thread, sharp's first WebP, the worker's first job).
      await viaApi(99);
      await inProcess(99);
      await withStorage(99);
      const p = (xs: number[], n: number) => percentile(xs, n);
      const api: number[] = [];
      const local: number[] = [];
      const stored: number[] = [];
      const perRound = { api: [] as number[][], local: [] as number[][], stored: [] as number[][] };
      for (let r = 0; r < rounds; r++) {
        ctx.log(`pdf-render: round ${r + 1}/${rounds}`);
        const round = { api: [] as number[], local: [] as number[], stored: [] as number[] };
        if (r > 0) {
          // A new source (the variants of the last one exist), read once by the worker
          // as the first round's was by the warm-up: the source cache holds it.
          key = await uploadPdf();
          await viaApi(99);
        }
        for (let i = 0; i < samples; i++) {
          // A distinct quality per sample: every API request is a first render (a job).
          const q = 50 + i;
          const measure = async (
            side: keyof typeof round,
            work: (q: number) => Promise<number>,
          ) => {
            round[side].push(await work(q));
            await sleep(SETTLE_MS);
          };
          if (i % 2) {
            await measure('api', viaApi);
            await measure('local', inProcess);
            await measure('stored', withStorage);
          } else {
            await measure('stored', withStorage);
            await measure('local', inProcess);
            await measure('api', viaApi);
          }
        }
        for (const side of ['api', 'local', 'stored'] as const) perRound[side].push(round[side]);
        api.push(...round.api);
        local.push(...round.local);
        stored.push(...round.stored);
      }
      const p95s = (side: 'api' | 'local' | 'stored') => perRound[side].map((xs) => p(xs, 95));
      const ratio = p95s('local').map((x, i) => x / p95s('api')[i]!);
      const storedRatio = p95s('stored').map((x, i) => x / p95s('api')[i]!);
      const table: Table = {
        columns: [
          { key: 'where', label: 'page 1 → 400 px WebP' },
          { key: 'p50', label: 'p50, ms', digits: 1 },
          { key: 'p95', label: 'p95, ms', digits: 1 },
        ],
        rows: [
          {
            where: 'through the API (first render, 1 worker)',
            p50: stat(perRound.api.map((xs) => p(xs, 50))),
            p95: stat(p95s('api')),
          },
          {
            where: 'in-process with storage: S3 read + render + S3 write (a peer process)',
            p50: stat(perRound.stored.map((xs) => p(xs, 50))),
            p95: stat(p95s('stored')),
          },
          {
            where: 'the same rasterizer in-process',
            p50: stat(perRound.local.map((xs) => p(xs, 50))),
            p95: stat(p95s('local')),
          },
        ],
      };
      return {
        id: this.id,
        title: this.title,
        method: `
A ${PAGES}-page PDF (${(pdf.length / 1024).toFixed(0)} KiB, the corpus's
\`pdflatex-4-pages.pdf\` copied 25 times with pdf-lib) is uploaded once;
page 1 is rendered to a 400 px WebP ${samples} times in each of ${rounds} round(s),
each time with another quality so that every request is a first render (a job on one worker
process: the source read from storage, PDFium on the worker's PDF thread,
sharp, the variant written and recorded). Alternating with it, the same
render in the benchmark's own process through the worker's image adapter
(PDFium on a thread, sharp), and the same render with the worker's storage
around it in a process started like a worker (the render benchmark's peer:
the source read from S3, rendered, the variant written to S3). Each
measurement starts ${SETTLE_MS} ms after the previous one ended, so the work
the API does after its answer (the variant's write and its record) is not
charged to the measurement that follows it. The ratios
are in-process p95 ÷ API p95, taken per round; the tables give the median of
the rounds with their min–max.`,
        tables: [table],
        charts: [
          {
            id: 'pdf-render',
            title: 'First render of a PDF page: through the API and in-process',
            spec: bars({
              title: 'Page 1 of a PDF to a 400 px WebP, first render, ms',
              yTitle: 'ms',
              format: '.0f',
              data: (
                [
                  ['through the API', api],
                  ['in-process with storage', stored],
                  ['in-process', local],
                ] as const
              ).flatMap(([group, xs]) =>
                (['p50', 'p95'] as const).map((series) => {
                  const v = p(xs, series === 'p50' ? 50 : 95);
                  return { group, series, median: v, min: v, max: v };
                }),
              ),
            }),
          },
        ],
        targets: [
          target(
            'in-process with storage p95 ÷ API p95, first render of a PDF page',
            stat(storedRatio),
            '>=',
            0.9,
            '',
            { digits: 3, why: API_PATH },
          ),
          target(
            'in-process p95 ÷ API p95, first render of a PDF page',
            stat(ratio),
            '>=',
            0.9,
            '',
            { digits: 3, why: API_PATH },
          ),
        ],
      };
    } finally {
      await adapter.close();
      await peer.stop();
    }
  },
};
