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
    configureSharp();
    const pdf = await hundredPages();
    await stack.setWorkers(1, ONE_JOB_EACH);
    const fd = new FormData();
    fd.append('file', new Blob([pdf], { type: 'application/pdf' }), 'hundred.pdf');
    const up = await fetch(`${stack.url}/media/upload`, {
      method: 'POST',
      headers: stack.auth,
      body: fd,
    });
    if (up.status !== 201) throw new Error(`upload answered ${up.status}`);
    const key = ((await up.json()) as { data: { key: string } }).data.key;

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
      const api: number[] = [];
      const local: number[] = [];
      const stored: number[] = [];
      for (let i = 0; i < samples; i++) {
        if (i % 10 === 0) ctx.log(`pdf-render: ${i}/${samples}`);
        // A distinct quality per sample: every API request is a first render (a job).
        const q = 50 + i;
        if (i % 2) {
          api.push(await viaApi(q));
          local.push(await inProcess(q));
          stored.push(await withStorage(q));
        } else {
          stored.push(await withStorage(q));
          local.push(await inProcess(q));
          api.push(await viaApi(q));
        }
      }
      const p = (xs: number[], n: number) => percentile(xs, n);
      const ratio = p(local, 95) / p(api, 95);
      const storedRatio = p(stored, 95) / p(api, 95);
      const table: Table = {
        columns: [
          { key: 'where', label: 'page 1 → 400 px WebP' },
          { key: 'p50', label: 'p50, ms', digits: 1 },
          { key: 'p95', label: 'p95, ms', digits: 1 },
        ],
        rows: [
          {
            where: 'through the API (first render, 1 worker)',
            p50: stat([p(api, 50)]),
            p95: stat([p(api, 95)]),
          },
          {
            where: 'in-process with storage: S3 read + render + S3 write (a peer process)',
            p50: stat([p(stored, 50)]),
            p95: stat([p(stored, 95)]),
          },
          {
            where: 'the same rasterizer in-process',
            p50: stat([p(local, 50)]),
            p95: stat([p(local, 95)]),
          },
        ],
      };
      return {
        id: this.id,
        title: this.title,
        method: `
A ${PAGES}-page PDF (${(pdf.length / 1024).toFixed(0)} KiB, the corpus's
\`pdflatex-4-pages.pdf\` copied 25 times with pdf-lib) is uploaded once;
page 1 is rendered to a 400 px WebP ${samples} times, each time with another
quality so that every request is a first render (a job on one worker
process: the source read from storage, PDFium on the worker's PDF thread,
sharp, the variant written and recorded). Alternating with it, the same
render in the benchmark's own process through the worker's image adapter
(PDFium on a thread, sharp), and the same render with the worker's storage
around it in a process started like a worker (the render benchmark's peer:
the source read from S3, rendered, the variant written to S3). The ratios
are in-process p95 ÷ API p95.`,
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
            stat([storedRatio]),
            '>=',
            0.9,
            '',
            { digits: 3 },
          ),
          target(
            'in-process p95 ÷ API p95, first render of a PDF page',
            stat([ratio]),
            '>=',
            0.9,
            '',
            {
              digits: 3,
            },
          ),
        ],
      };
    } finally {
      await adapter.close();
      await peer.stop();
    }
  },
};
