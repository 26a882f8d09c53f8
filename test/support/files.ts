/** Sample files for tests: fixtures in the repository, the team's corpus beside it. */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export const FIXTURES = join(__dirname, '..', 'fixtures');
/**
 * The team's sample files: `../shared/corpus` beside the repository (where CI
 * has it), or MEDIA_CORPUS_DIR.
 */
export const CORPUS =
  process.env.MEDIA_CORPUS_DIR ?? join(__dirname, '..', '..', '..', 'shared', 'corpus');
if (!existsSync(CORPUS)) {
  throw new Error(
    `The sample corpus is not at ${CORPUS}: put the team's shared/ folder beside the repository, or set MEDIA_CORPUS_DIR`,
  );
}

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
