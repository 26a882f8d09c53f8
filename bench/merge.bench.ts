/**
 * PDF merge benchmark: the adapter's `mergePdfs` (pdf-lib) beside
 * `qpdf --empty --pages <files…> -- out.pdf` on the same inputs.
 *
 * Inputs: `--copies` distinct copies of every readable corpus PDF, in rounds
 * (copy 0 of each file, then copy 1, …). A copy is the original with a comment
 * appended after `%%EOF`, so every input's bytes differ and nothing is parsed
 * once for two inputs.
 *
 * Prints, per tool, the median wall time over `--rounds` and the peak RSS:
 *  - mergePdfs in this process (warm: after one unmeasured run);
 *  - mergePdfs in a fresh Node process per round, so its peak RSS is the
 *    merge's own; the baseline (RSS high-water mark after loading the modules
 *    and reading the inputs, before merging) is shown beside it;
 *  - qpdf, its peak RSS from `/usr/bin/time -f %M` when that exists.
 *
 * Run: npx tsx bench/merge.bench.ts [--rounds 5] [--copies 10]
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { countPages, mergePdfs } from '../shared/media/pdf.adapter';

const CORPUS = join(__dirname, '..', '..', 'shared', 'corpus', 'pdfs');
/** Corpus files pdf-lib cannot merge as they are (encrypted, damaged). */
const UNREADABLE = new Set([
  'libreoffice-writer-password.pdf',
  'unreadablemetadata.pdf',
  'truncated-pdflatex-4-pages.pdf',
]);
const MB = 1024 * 1024;
const out = (line: string) => process.stdout.write(`${line}\n`);

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '5' },
    copies: { type: 'string', default: '10' },
    child: { type: 'string' },
  },
});

interface ChildReport {
  ms: number;
  baselineKb: number;
  peakKb: number;
  pages: number;
  bytes: number;
}

/** Child mode: merge the files listed in `<dir>/list.json` once and report on stdout. */
async function child(dir: string): Promise<void> {
  const files = JSON.parse(readFileSync(join(dir, 'list.json'), 'utf8')) as string[];
  const inputs = files.map((name) => ({ name, data: readFileSync(join(dir, name)) }));
  const baselineKb = process.resourceUsage().maxRSS;
  const start = performance.now();
  const result = await mergePdfs(inputs);
  const ms = performance.now() - start;
  const report: ChildReport = {
    ms,
    baselineKb,
    peakKb: process.resourceUsage().maxRSS,
    pages: result.pages,
    bytes: result.data.length,
  };
  out(JSON.stringify(report));
}

function prepare(dir: string, copies: number): string[] {
  const originals = readdirSync(CORPUS)
    .filter((f) => f.endsWith('.pdf') && !UNREADABLE.has(f))
    .sort();
  const files: string[] = [];
  for (let k = 0; k < copies; k++) {
    for (const name of originals) {
      const copy = `${k}-${name}`;
      const data = readFileSync(join(CORPUS, name));
      writeFileSync(join(dir, copy), Buffer.concat([data, Buffer.from(`\n%bench copy ${k}\n`)]));
      files.push(copy);
    }
  }
  writeFileSync(join(dir, 'list.json'), JSON.stringify(files));
  return files;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};
const ms = (x: number) => `${x.toFixed(0)} ms`;
const mb = (kb: number) => `${(kb / 1024).toFixed(0)} MB`;
const size = (bytes: number) => `${(bytes / MB).toFixed(2)} MB`;

function runQpdf(dir: string, files: string[], target: string): { ms: number; peakKb?: number } {
  const args = ['--empty', '--pages', ...files.map((f) => join(dir, f)), '--', target];
  const haveTime = existsSync('/usr/bin/time');
  const start = performance.now();
  const run = haveTime
    ? spawnSync('/usr/bin/time', ['-f', 'maxrss=%M', 'qpdf', ...args], { encoding: 'utf8' })
    : spawnSync('qpdf', args, { encoding: 'utf8' });
  const elapsed = performance.now() - start;
  if (run.error) throw run.error;
  if (run.status !== 0 && run.status !== 3) throw new Error(`qpdf failed: ${run.stderr}`);
  const peak = /maxrss=(\d+)/.exec(run.stderr)?.[1];
  return { ms: elapsed, peakKb: peak === undefined ? undefined : Number(peak) };
}

async function main(): Promise<void> {
  const rounds = Number(values.rounds);
  const copies = Number(values.copies);
  const dir = mkdtempSync(join(tmpdir(), 'merge-bench-'));
  try {
    const files = prepare(dir, copies);
    const inputs = files.map((name) => ({ name, data: readFileSync(join(dir, name)) }));
    const inputBytes = inputs.reduce((n, i) => n + i.data.length, 0);

    // In-process, warm.
    const first = await mergePdfs(inputs);
    const warm: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const start = performance.now();
      await mergePdfs(inputs);
      warm.push(performance.now() - start);
    }

    // A fresh process per round.
    const children: ChildReport[] = [];
    for (let r = 0; r < rounds; r++) {
      const run = spawnSync(process.execPath, ['--import', 'tsx', __filename, '--child', dir], {
        encoding: 'utf8',
        cwd: join(__dirname, '..'),
      });
      if (run.status !== 0) throw new Error(`child failed: ${run.stderr}`);
      const line = run.stdout.trim().split('\n').pop() ?? '';
      children.push(JSON.parse(line) as ChildReport);
    }

    // qpdf on the same files.
    const qpdfOut = join(dir, 'qpdf-out.pdf');
    const qpdf: { ms: number; peakKb?: number }[] = [];
    for (let r = 0; r < rounds; r++) qpdf.push(runQpdf(dir, files, qpdfOut));
    const qpdfBytes = readFileSync(qpdfOut);
    const qpdfPages = await countPages(qpdfBytes);

    const peaks = qpdf.map((q) => q.peakKb).filter((k): k is number => k !== undefined);
    const rows: string[][] = [
      ['tool', 'time (median)', 'peak RSS', 'RSS before merge', 'output'],
      [
        'mergePdfs, in-process, warm',
        ms(median(warm)),
        '-',
        '-',
        `${first.pages} pages, ${size(first.data.length)}`,
      ],
      [
        'mergePdfs, fresh process',
        ms(median(children.map((c) => c.ms))),
        mb(median(children.map((c) => c.peakKb))),
        mb(median(children.map((c) => c.baselineKb))),
        `${children[0]!.pages} pages, ${size(children[0]!.bytes)}`,
      ],
      [
        'qpdf --empty --pages',
        ms(median(qpdf.map((q) => q.ms))),
        peaks.length ? mb(median(peaks)) : 'n/a',
        '-',
        `${qpdfPages} pages, ${size(qpdfBytes.length)}`,
      ],
    ];
    const widths = rows[0]!.map((_, c) => Math.max(...rows.map((row) => row[c]!.length)));
    out(
      `inputs: ${files.length} PDFs (${copies} distinct copies of ${files.length / copies} corpus files), ` +
        `${size(inputBytes)}; ${rounds} rounds; node ${process.version}`,
    );
    for (const row of rows)
      out(
        row
          .map((cell, c) => cell.padEnd(widths[c]!))
          .join('  ')
          .trimEnd(),
      );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const run = values.child === undefined ? main() : child(values.child);
run.catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exitCode = 1;
});
