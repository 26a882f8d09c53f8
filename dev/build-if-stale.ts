/**
 * `npm start`'s build step: `npm run build` (a clean full build, as CI and
 * the Dockerfiles run it) only when dist/ is missing or older than what it is
 * built from, so that a start with nothing changed runs no compiler.
 *
 * dist/ is current when no input (api/, worker/, shared/ but the console's
 * generated client, which the build writes from api/openapi.yaml; the tsconfig files,
 * package-lock.json) was modified after the build began: the build removes
 * dist/ and writes every file anew, so its oldest file tells when it began.
 * A build cut off half-way leaves the entry points or the copied OpenAPI
 * description (written last) missing, which counts as stale too.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const INPUT_DIRS = ['api', 'worker', 'shared'];
const INPUT_FILES = ['tsconfig.json', 'tsconfig.build.json', 'package-lock.json'];
/** What a complete build leaves (the OpenAPI description is copied last). */
const OUTPUTS = ['dist/api/main.js', 'dist/worker/main.js', 'dist/api/openapi.yaml'];
/** Files the build itself writes inside the inputs (the console's client, from api/openapi.yaml). */
const GENERATED = join('api', 'console', 'src', 'generated');

function* files(dir: string): Generator<string> {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const entry of entries) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* files(path);
    else if (entry.isFile()) yield path;
  }
}

const mtime = (path: string): number | undefined => {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return undefined;
  }
};

/** Why dist/ under `root` must be built, or undefined when it is current. */
export function staleness(root: string): string | undefined {
  if (OUTPUTS.some((file) => mtime(join(root, file)) === undefined)) return 'dist/ is incomplete';
  let builtAt = Infinity;
  for (const file of files(join(root, 'dist'))) builtAt = Math.min(builtAt, mtime(file) ?? 0);
  const inputs = [
    ...INPUT_DIRS.flatMap((dir) => [...files(join(root, dir))]),
    ...INPUT_FILES.map((file) => join(root, file)),
  ];
  for (const input of inputs) {
    if (input.startsWith(join(root, GENERATED))) continue;
    if ((mtime(input) ?? 0) > builtAt) return `${input.slice(root.length + 1)} changed`;
  }
  return undefined;
}

/** Builds dist/ when stale; answers what it did, for the log. */
export function buildIfStale(root: string): { built: boolean; reason?: string; ms: number } {
  const started = Date.now();
  const reason = staleness(root);
  if (!reason) return { built: false, ms: Date.now() - started };
  process.stderr.write(`building dist/ (${reason}): npm run build\n`);
  const result = spawnSync('npm', ['run', '--silent', 'build'], { cwd: root, stdio: 'inherit' });
  if (result.status !== 0)
    throw new Error(`npm run build failed (${result.signal ?? `exit code ${result.status}`})`);
  return { built: true, reason, ms: Date.now() - started };
}

// `node --import tsx dev/build-if-stale.ts` (dev/test.sh): the same check on its own.
if (require.main === module) {
  try {
    const build = buildIfStale(join(__dirname, '..'));
    if (!build.built) process.stderr.write('dist/ is current: nothing to build\n');
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exitCode = 1;
  }
}
