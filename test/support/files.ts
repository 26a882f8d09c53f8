/** Sample files for tests, all in the repository (test/fixtures/README.md: sources, licences). */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export const FIXTURES = join(__dirname, '..', 'fixtures');
/** The team's sample corpus, copied into the repository: `images/` and `pdfs/`. */
export const CORPUS = join(FIXTURES, 'corpus');

export const fixture = (name: string): Buffer => readFileSync(join(FIXTURES, name));
export const corpusFile = (path: string): Buffer => readFileSync(join(CORPUS, path));
export const sha256 = (data: Buffer | Uint8Array): string =>
  `sha256:${createHash('sha256').update(data).digest('hex')}`;

/** A multipart form from parts, for fetch. */
export function form(
  parts: (readonly [string, string] | readonly [string, Buffer, string])[],
): FormData {
  const fd = new FormData();
  for (const part of parts) {
    if (part.length === 2) fd.append(part[0], part[1]);
    else fd.append(part[0], new Blob([part[1]]), part[2]);
  }
  return fd;
}
