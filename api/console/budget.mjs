// Prints the console's first-load JavaScript (what index.html loads: its entry
// script and the chunks it preloads, not the lazily loaded upload chunk),
// gzipped, and fails the build past the budget (150 kB).
import { readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';

export const BUDGET_BYTES = 150 * 1024;
const dist = fileURLToPath(new URL('../../dist/console/', import.meta.url));

/** The JS files index.html loads, and their gzipped bytes. */
export function firstLoad() {
  const html = readFileSync(`${dist}index.html`, 'utf8');
  const files = [...html.matchAll(/(?:src|href)="\/console\/([^"]+\.js)"/g)].map((m) => m[1]);
  const bytes = files.reduce((sum, f) => sum + gzipSync(readFileSync(dist + f)).length, 0);
  return { files, bytes };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { files, bytes } = firstLoad();
  const kb = (bytes / 1024).toFixed(1);
  process.stdout.write(
    `console: first-load JS ${kb} kB gzipped (${files.join(', ')}); budget 150 kB\n`,
  );
  if (files.length === 0 || bytes > BUDGET_BYTES) process.exit(1);
}
