/**
 * 6. Merge: 10 and 50 distinct copies of the corpus's readable PDFs through
 * `POST /media/merge-pdfs`, beside what a user would do instead on the same
 * storage (fetch the stored inputs from S3, `qpdf --empty --pages … --`, put
 * the result back), with bare qpdf on local files as context, and the
 * worker's peak RSS.
 */
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { countPages } from '../../worker/pdf/pdf.adapter';
import { CORPUS, MiB, type BenchContext, type Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import { JobTimings, type Phases } from '../lib/job-timing';
import { Peer } from '../lib/peer';
import { peakRss, resetPeakRss, rss } from '../lib/proc';
import { target, type BenchmarkResult, type Table, type Target } from '../lib/report';
import { pool, ratios, stat, type Stat } from '../lib/stats';
import { ONE_JOB_EACH } from './convert';

/**
 * The bound docs/jobs.md states: a merge of ordinary PDFs (text, vector
 * graphics, small images, like the corpus's) grows a process's RSS by at most
 * this fixed part plus this much per merged page, the inputs' own bytes on top.
 */
export const MERGE_FIXED_MIB = 32;
export const MERGE_KIB_PER_PAGE = 128;
const mergeBound = (pages: number) => MERGE_FIXED_MIB + (MERGE_KIB_PER_PAGE * pages) / 1024;

/** Corpus PDFs a merge refuses as they are (encrypted, damaged beyond pdf-lib, truncated). */
const UNREADABLE = new Set([
  'libreoffice-writer-password.pdf',
  'unreadablemetadata.pdf',
  'truncated-pdflatex-4-pages.pdf',
]);

interface Input {
  name: string;
  path: string;
  data: Buffer;
  key?: string;
}

/**
 * `count` inputs: copy 0 of every readable corpus PDF, then copy 1, …; a copy
 * is the file with a comment appended after %%EOF, so no two inputs are the
 * same bytes (the worker parses identical inputs once).
 */
function distinctCopies(dir: string, count: number): Input[] {
  const originals = readdirSync(join(CORPUS, 'pdfs'))
    .filter((f) => f.endsWith('.pdf') && !UNREADABLE.has(f))
    .sort();
  return Array.from({ length: count }, (_, i) => {
    const original = originals[i % originals.length]!;
    const copy = Math.floor(i / originals.length);
    const name = `${copy}-${original}`;
    const data = Buffer.concat([
      readFileSync(join(CORPUS, 'pdfs', original)),
      Buffer.from(`\n%bench copy ${copy}\n`),
    ]);
    const path = join(dir, name);
    writeFileSync(path, data);
    return { name, path, data };
  });
}

async function mergeViaApi(
  ctx: BenchContext,
  inputs: Input[],
  as: 'keys' | 'files',
): Promise<string> {
  const fd = new FormData();
  for (const input of inputs) {
    if (as === 'keys') fd.append('mediaKeys', input.key!);
    else fd.append('files', new Blob([input.data], { type: 'application/pdf' }), input.name);
  }
  const res = await fetch(`${ctx.stack.url}/media/merge-pdfs`, {
    method: 'POST',
    headers: ctx.stack.auth,
    body: fd,
  });
  if (res.status !== 201) throw new Error(`merge answered ${res.status}: ${await res.text()}`);
  return ((await res.json()) as { data: { key: string } }).data.key;
}

function qpdf(inputs: Input[], out: string): { ms: number; peakMiB: number } {
  if (!existsSync('/usr/bin/time')) {
    throw new Error(
      "the merge benchmark reads qpdf's peak RSS with GNU time: apt-get install time",
    );
  }
  const args = ['-f', 'maxrss=%M', 'qpdf', '--empty', '--pages', ...inputs.map((i) => i.path)];
  const t = performance.now();
  const run = spawnSync('/usr/bin/time', [...args, '--', out], { encoding: 'utf8' });
  const ms = performance.now() - t;
  if (run.error) throw run.error;
  // qpdf exits 3 when it succeeded with warnings.
  if (run.status !== 0 && run.status !== 3) throw new Error(`qpdf failed: ${run.stderr}`);
  const kb = /maxrss=(\d+)/.exec(run.stderr)?.[1];
  if (kb === undefined) throw new Error(`no maxrss from /usr/bin/time: ${run.stderr}`);
  return { ms, peakMiB: Number(kb) / 1024 };
}

/**
 * The fair peer: what a user would script instead of the endpoint, on the same
 * storage. Fetches the stored inputs from S3 (8 at a time, as the worker reads
 * them), runs qpdf on them, puts the result back, in ms. The result is removed
 * afterwards.
 */
async function qpdfScript(ctx: BenchContext, inputs: Input[], dir: string): Promise<number> {
  const { client, config } = ctx.stack;
  const bucket = config.s3!.bucket;
  const work = mkdtempSync(join(dir, 'script-'));
  const paths = inputs.map((_, i) => join(work, `${i}.pdf`));
  const out = join(work, 'merged.pdf');
  const key = `bench-script/merged-${inputs.length}-${Date.now()}.pdf`;
  const started = performance.now();
  await pool(inputs.length, 8, (i) => client.fGetObject(bucket, inputs[i]!.key!, paths[i]!));
  await new Promise<void>((resolve, reject) => {
    execFile('qpdf', ['--empty', '--pages', ...paths, '--', out], (err) => {
      // qpdf exits 3 when it succeeded with warnings.
      if (err && err.code !== 3) reject(new Error(`qpdf failed: ${err.message}`));
      else resolve();
    });
  });
  await client.fPutObject(bucket, key, out, { 'Content-Type': 'application/pdf' });
  const ms = performance.now() - started;
  await client.removeObject(bucket, key);
  rmSync(work, { recursive: true, force: true });
  return ms;
}

export const merge: Benchmark = {
  id: 'merge',
  title: 'PDF merge',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const counts = ctx.quick ? [5, 10] : [10, 50];
    const rounds = ctx.quick ? 1 : 5;
    const [worker] = await stack.setWorkers(1, ONE_JOB_EACH);
    const pid = worker!.pid;
    const dir = mkdtempSync(join(tmpdir(), 'bench-merge-'));
    // The merge step alone, in a process of its own started like a worker.
    const peer = await Peer.start(stack.env);
    const timings = new JobTimings(stack);
    const pagesOf: number[] = [];
    const table: Table = {
      columns: [
        { key: 'inputs', label: 'inputs' },
        { key: 'pages', label: 'pages' },
        { key: 'keys', label: 'endpoint, stored keys, ms', digits: 0 },
        { key: 'files', label: 'endpoint, uploaded files, ms', digits: 0 },
        { key: 'step', label: 'merge step alone, ms', digits: 0 },
        { key: 'script', label: 'S3 fetch + qpdf + S3 put, ms', digits: 0 },
        { key: 'qpdf', label: 'bare qpdf on local files, ms', digits: 0 },
        { key: 'ratio', label: 'endpoint (keys) ÷ S3 + qpdf', digits: 2 },
        { key: 'bare', label: 'endpoint (keys) ÷ bare qpdf', digits: 2 },
      ],
      rows: [],
    };
    const scale: Table = {
      title:
        'Memory of larger merges (the merge step alone, fresh process; the endpoint takes at most MAX_MERGE_INPUTS, 50 by default)',
      columns: [
        { key: 'inputs', label: 'inputs' },
        { key: 'pages', label: 'pages' },
        { key: 'bytes', label: 'input MiB', digits: 1 },
        { key: 'coldGrowth', label: 'fresh process: growth, MiB', digits: 1 },
        { key: 'coldPerPage', label: 'growth per page, KiB', digits: 0 },
        {
          key: 'bound',
          label: `bound: ${MERGE_FIXED_MIB} MiB + ${MERGE_KIB_PER_PAGE} KiB/page, MiB`,
          digits: 1,
        },
      ],
      rows: [],
    };
    const memory: Table = {
      title: 'Memory',
      columns: [
        { key: 'inputs', label: 'inputs' },
        { key: 'pages', label: 'pages' },
        { key: 'bytes', label: 'input MiB', digits: 2 },
        { key: 'before', label: 'worker RSS before, MiB', digits: 0 },
        { key: 'peak', label: 'worker peak RSS, MiB', digits: 0 },
        { key: 'coldBefore', label: 'fresh process: RSS before, MiB', digits: 0 },
        { key: 'coldGrowth', label: 'fresh process: growth, MiB', digits: 1 },
        { key: 'coldPerPage', label: 'fresh process: growth per page, KiB', digits: 0 },
        { key: 'bound', label: 'bound, MiB', digits: 1 },
        { key: 'qpdfPeak', label: 'qpdf peak RSS, MiB', digits: 0 },
      ],
      rows: [],
    };
    const breakdown: Table = {
      title: "Where the endpoint's time goes (stored keys), ms",
      columns: [
        { key: 'inputs', label: 'inputs' },
        { key: 'apiBefore', label: 'API: form, key lookups, queueing', digits: 0 },
        { key: 'queued', label: 'waiting for the worker', digits: 0 },
        { key: 'worker', label: 'worker: S3 reads, merge, S3 write, record', digits: 0 },
        { key: 'step', label: 'of which the merge step (measured alone)', digits: 0 },
        { key: 'apiAfter', label: 'API: result to answer', digits: 0 },
      ],
      rows: [],
    };
    const chart: { group: string; series: string; median: number; min: number; max: number }[] = [];
    const targets: Target[] = [];
    try {
      for (const count of counts) {
        const inputs = distinctCopies(dir, count);
        const inputBytes = inputs.reduce((n, i) => n + i.data.length, 0);
        await pool(inputs.length, 4, async (i) => {
          const input = inputs[i]!;
          const fd = new FormData();
          fd.append('file', new Blob([input.data]), input.name);
          const res = await fetch(`${stack.url}/media/upload`, {
            method: 'POST',
            headers: stack.auth,
            body: fd,
          });
          if (res.status !== 201) throw new Error(`upload of ${input.name}: ${res.status}`);
          input.key = ((await res.json()) as { data: { key: string } }).data.key;
        });
        const out = join(dir, `qpdf-${count}.pdf`);
        // Warm-up, and the page count both must produce.
        qpdf(inputs, out);
        const pages = await countPages(readFileSync(out));
        const mergedKey = await mergeViaApi(ctx, inputs, 'keys');
        const merged = await fetch(
          `${stack.url}/media/download?media=${encodeURIComponent(mergedKey)}`,
          { headers: stack.auth },
        );
        const mergedPages = await countPages(Buffer.from(await merged.arrayBuffer()));
        if (mergedPages !== pages) throw new Error(`merged ${mergedPages} pages, qpdf ${pages}`);
        await mergeViaApi(ctx, inputs, 'files');
        await peer.call({ op: 'load-pdfs', paths: inputs.map((i) => i.path) });
        await peer.call({ op: 'merge' });

        const keys: number[] = [];
        const files: number[] = [];
        const step: number[] = [];
        const q: number[] = [];
        const script: number[] = [];
        const before: number[] = [];
        const peak: number[] = [];
        const coldBefore: number[] = [];
        const coldGrowth: number[] = [];
        const phases: Phases[] = [];
        const qpdfPeak: number[] = [];
        for (let r = 0; r < rounds; r++) {
          ctx.log(`merge: ${count} inputs, round ${r + 1}/${rounds}`);
          const variants = [
            async () => {
              const rssBefore = rss(pid) / MiB;
              resetPeakRss(pid);
              const measured = await timings.measure('pdf', () => mergeViaApi(ctx, inputs, 'keys'));
              keys.push(measured.ms);
              phases.push(measured.phases);
              const p = peakRss(pid) / MiB;
              before.push(rssBefore);
              peak.push(p);
            },
            async () => {
              const t = performance.now();
              await mergeViaApi(ctx, inputs, 'files');
              files.push(performance.now() - t);
            },
            async () => {
              const reply = await peer.call({ op: 'merge' });
              step.push(reply.ms);
            },
            async () => {
              // The first merge of a fresh process: what a merge costs before the heap
              // has grown to fit (the inputs are in memory before it starts).
              const fresh = await Peer.start(stack.env);
              try {
                await fresh.call({ op: 'load-pdfs', paths: inputs.map((i) => i.path) });
                const reply = await fresh.call({ op: 'merge' });
                coldBefore.push(reply.rssBefore! / MiB);
                coldGrowth.push((reply.peakRss! - reply.rssBefore!) / MiB);
              } finally {
                await fresh.stop();
              }
            },
            async () => {
              script.push(await qpdfScript(ctx, inputs, dir));
            },
            () => {
              const x = qpdf(inputs, out);
              q.push(x.ms);
              qpdfPeak.push(x.peakMiB);
              return Promise.resolve();
            },
          ];
          // A different variant goes first each round.
          for (let v = 0; v < variants.length; v++) await variants[(v + r) % variants.length]!();
        }
        const ratio = stat(ratios(keys, script));
        table.rows.push({
          inputs: String(count),
          pages: String(pages),
          keys: stat(keys),
          files: stat(files),
          step: stat(step),
          script: stat(script),
          qpdf: stat(q),
          ratio,
          bare: stat(ratios(keys, q)),
        });
        breakdown.rows.push({
          inputs: String(count),
          apiBefore: stat(phases.map((p) => p.apiBefore)),
          queued: stat(phases.map((p) => p.queued)),
          worker: stat(phases.map((p) => p.worker)),
          step: stat(step),
          apiAfter: stat(phases.map((p) => p.apiAfter)),
        });
        memory.rows.push({
          inputs: String(count),
          pages: String(pages),
          bytes: inputBytes / MiB,
          before: stat(before),
          peak: stat(peak),
          coldBefore: stat(coldBefore),
          coldGrowth: stat(coldGrowth),
          coldPerPage: stat(coldGrowth.map((g) => (g * 1024) / pages)),
          bound: mergeBound(pages),
          qpdfPeak: stat(qpdfPeak),
        });
        pagesOf.push(pages);
        const group = `${count} inputs, ${pages} pages`;
        chart.push({ group, series: 'POST /media/merge-pdfs (stored keys)', ...stat(keys) });
        chart.push({ group, series: 'POST /media/merge-pdfs (uploaded files)', ...stat(files) });
        chart.push({ group, series: 'merge step alone (pdf-lib)', ...stat(step) });
        chart.push({ group, series: 'S3 fetch + qpdf + S3 put (a script)', ...stat(script) });
        chart.push({ group, series: 'bare qpdf on local files', ...stat(q) });
        const phase = breakdown.rows[breakdown.rows.length - 1]!;
        const ms = (cell: unknown) => (cell as { median: number }).median.toFixed(0);
        targets.push(
          target(`${count} inputs: endpoint time ÷ S3 fetch + qpdf + S3 put`, ratio, '<=', 1, '', {
            digits: 2,
            why: `The script's side reads the ${count} stored inputs from the same bucket (8 at a
time), runs qpdf (${stat(q).median.toFixed(0)} ms on local files) and puts the result
back: ${stat(script).median.toFixed(0)} ms. The endpoint took ${stat(keys).median.toFixed(0)} ms: the API
reads the form, looks the ${count} keys up and queues the job (${ms(phase.apiBefore)} ms);
the worker reads the inputs from S3, merges with pdf-lib (the merge step alone:
${stat(step).median.toFixed(0)} ms), writes the result and its record (${ms(phase.worker)} ms in
all); the API then reads the record and answers (${ms(phase.apiAfter)} ms).`,
          }),
        );
        await stack.clear();
      }
      // Beyond the endpoint's MAX_MERGE_INPUTS: the merge step alone in a fresh process.
      for (const count of ctx.quick ? [100] : [200, 1000]) {
        const inputs = distinctCopies(dir, count);
        const growth: number[] = [];
        let pages = 0;
        for (let r = 0; r < (ctx.quick ? 1 : 3); r++) {
          ctx.log(`merge: ${count} inputs in a fresh process, round ${r + 1}`);
          const fresh = await Peer.start(stack.env);
          try {
            await fresh.call({ op: 'load-pdfs', paths: inputs.map((i) => i.path) });
            const reply = await fresh.call({ op: 'merge' });
            pages = reply.pages!;
            growth.push((reply.peakRss! - reply.rssBefore!) / MiB);
          } finally {
            await fresh.stop();
          }
        }
        const g = stat(growth);
        scale.rows.push({
          inputs: String(count),
          pages: String(pages),
          bytes: inputs.reduce((n, i) => n + i.data.length, 0) / MiB,
          coldGrowth: g,
          coldPerPage: stat(growth.map((x) => (x * 1024) / pages)),
          bound: mergeBound(pages),
        });
        pagesOf.push(pages);
        for (const input of inputs) rmSync(input.path, { force: true });
      }
      const rows = [...memory.rows, ...scale.rows];
      for (const [i, row] of rows.entries()) {
        const pages = pagesOf[i]!;
        targets.push(
          target(
            `${row.inputs as string} inputs (${pages} pages): a fresh process's RSS growth ≤ ${MERGE_FIXED_MIB} MiB + ${MERGE_KIB_PER_PAGE} KiB per page`,
            row.coldGrowth as Stat,
            '<=',
            mergeBound(pages),
            'MiB',
            {
              digits: 1,
              why: `A fresh process's peak RSS during its first merge, over its RSS before it, went
past the bound docs/jobs.md states; look for what the merge now holds per page
(pdf-lib's parsed inputs and copies, the output) before changing the bound.`,
            },
          ),
        );
      }
    } finally {
      await peer.stop();
      await timings.close();
      rmSync(dir, { recursive: true, force: true });
    }

    return {
      id: this.id,
      title: this.title,
      method: `
Inputs: the ${10} readable corpus PDFs (the encrypted, damaged and truncated
ones left out), copied as many times as needed; every copy has a comment
appended after \`%%EOF\`, so all inputs are distinct bytes and each is parsed
on its own. Per round, in a rotating order: \`POST /media/merge-pdfs\` naming
the inputs as stored \`mediaKeys\` (uploaded once beforehand); the same
endpoint with the inputs uploaded as \`files\` parts; the worker's merge step
alone (the worker's PDF adapter on inputs already in memory, in a process of
its own started like a worker); what a user would script instead on the same
storage: the stored inputs fetched from the same bucket with the \`minio\`
client (8 at a time, as the worker reads them), \`qpdf --empty --pages <files>
-- out.pdf\`, and the result put back (the target compares the endpoint with
this); and, as context, bare \`qpdf\` on the same files on local disk (a process
per run, as it is used). ${rounds} round(s). The
endpoint's time runs from the request to the 201 answer: the API takes the
form, queues the job and waits; the worker (one process) reads the inputs
from S3, merges, writes the result and its record. Worker memory is the
worker process's RSS high-water mark, reset before the request (a worker
that has already done other jobs keeps its heap, so its peak hardly moves);
what a merge costs is measured in a fresh process started like a worker, per
round: its RSS high-water mark during its first merge over its RSS before
(inputs already in memory). qpdf's is \`/usr/bin/time\`'s maximum RSS. The
merged PDF's page count is checked against qpdf's.`,
      tables: [table, breakdown, memory, scale],
      charts: [
        {
          id: 'merge',
          title: 'PDF merge time, the endpoint vs S3 + qpdf',
          spec: bars({
            title: 'PDF merge, ms (median, min–max)',
            data: chart,
            yTitle: 'ms',
            format: '.0f',
          }),
        },
      ],
      targets,
    };
  },
};
