/**
 * qpdf repair: rewrites a PDF pdf-lib could not parse, as a child process with
 * a wall-clock limit, a bounded stderr and a bounded output size, an empty
 * environment and, where util-linux's `prlimit` is installed, bounded address
 * space and CPU time (`prlimit --as=… --cpu=… -- qpdf …`; without it only the
 * wall clock bounds qpdf, and a warning says so once). No shell is involved;
 * the bytes go through a private temporary directory that is always removed.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, isAbsolute, join } from 'node:path';

/** How qpdf is bounded besides the wall clock. */
export interface QpdfBounds {
  /** Address space of the qpdf process, bytes (prlimit --as). */
  memoryBytes: number;
  /** What `prlimit` to use (looked up on the PATH unless absolute; null: none). */
  prlimitCommand?: string | null;
}

/** An executable on the PATH (or as given when absolute), resolved once per name; null when missing. */
const resolved = new Map<string, string | null>();
export function resolveExecutable(command: string): string | null {
  if (resolved.has(command)) return resolved.get(command)!;
  const candidates = isAbsolute(command)
    ? [command]
    : (process.env.PATH ?? '')
        .split(delimiter)
        .filter(Boolean)
        .map((dir) => join(dir, command));
  const found =
    candidates.find((path) => {
      try {
        accessSync(path, constants.X_OK);
        return true;
      } catch {
        return false;
      }
    }) ?? null;
  resolved.set(command, found);
  return found;
}

/** qpdf's stderr kept for the log (warnings can be many; the rest is dropped). */
const MAX_QPDF_STDERR = 16 * 1024;

export type RepairOutcome =
  | { ok: true; data: Buffer; warnings: string }
  | {
      ok: false;
      reason: 'not-installed' | 'encrypted' | 'failed' | 'timeout' | 'output-too-large';
      detail: string;
    };

/**
 * Rewrites `data` with qpdf, which reconstructs damaged cross-reference tables
 * and stream lengths. Stream data is copied as is (`--stream-data=preserve`):
 * faster, and no decompression of possibly hostile streams. Objects nothing
 * refers to are kept (`--preserve-unreferenced`): when the page-tree root is
 * what the damage destroyed, the orphaned pages are all that is left to
 * rebuild a tree from (they are only read, never copied unless they become
 * pages). qpdf needs a
 * seekable input, so the bytes go through a private temporary directory that
 * is always removed. No shell is involved.
 */
export async function repairWithQpdf(
  data: Buffer,
  command: string,
  timeoutMs: number,
  bounds: QpdfBounds = { memoryBytes: 512 * 1024 * 1024 },
  onUnbounded?: () => void,
): Promise<RepairOutcome> {
  const qpdf = resolveExecutable(command);
  if (!qpdf) return { ok: false, reason: 'not-installed', detail: `${command} not found` };
  const prlimit =
    bounds.prlimitCommand === null ? null : resolveExecutable(bounds.prlimitCommand ?? 'prlimit');
  if (!prlimit) onUnbounded?.();
  const dir = await mkdtemp(join(tmpdir(), 'pdf-repair-'));
  try {
    const source = join(dir, 'in.pdf');
    const target = join(dir, 'out.pdf');
    await writeFile(source, data, { mode: 0o600 });
    const qpdfArgs = ['--stream-data=preserve', '--preserve-unreferenced', source, target];
    const cpuSeconds = Math.max(1, Math.ceil(timeoutMs / 1000));
    const run = prlimit
      ? await runQpdf(
          prlimit,
          [`--as=${bounds.memoryBytes}`, `--cpu=${cpuSeconds}`, '--', qpdf, ...qpdfArgs],
          timeoutMs,
        )
      : await runQpdf(qpdf, qpdfArgs, timeoutMs);

    if (run.spawnError === 'ENOENT') {
      return { ok: false, reason: 'not-installed', detail: `${command} not found` };
    }
    if (run.spawnError) return { ok: false, reason: 'failed', detail: run.spawnError };
    if (run.timedOut) {
      return { ok: false, reason: 'timeout', detail: `no result within ${timeoutMs} ms` };
    }
    // 0: success; 3: succeeded with warnings (the usual outcome of a repair).
    if (run.code !== 0 && run.code !== 3) {
      const encrypted = /invalid password/i.test(run.stderr);
      return {
        ok: false,
        reason: encrypted ? 'encrypted' : 'failed',
        detail: run.stderr || `exit ${run.code ?? run.signal}`,
      };
    }
    const size = (await stat(target)).size;
    if (size > 2 * data.length + 1024 * 1024) {
      return { ok: false, reason: 'output-too-large', detail: `${size} bytes from ${data.length}` };
    }
    return { ok: true, data: await readFile(target), warnings: run.stderr };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

interface QpdfRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
  timedOut: boolean;
  spawnError?: string;
}

function runQpdf(command: string, args: string[], timeoutMs: number): Promise<QpdfRun> {
  return new Promise((resolve) => {
    // An empty environment: qpdf needs none, and nothing of the worker's (secrets) reaches it.
    const child = spawn(command, args, {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: {},
      windowsHide: true,
    });
    let stderr = '';
    let timedOut = false;
    let spawnError: string | undefined;
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => {
      if (stderr.length < MAX_QPDF_STDERR)
        stderr += chunk.slice(0, MAX_QPDF_STDERR - stderr.length);
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    const done = (code: number | null, signal: NodeJS.Signals | null) => {
      clearTimeout(timer);
      resolve({ code, signal, stderr: stderr.trim(), timedOut, spawnError });
    };
    child.on('error', (e: NodeJS.ErrnoException) => {
      spawnError = e.code ?? e.message;
      if (child.pid === undefined) done(null, null); // never started (no 'close' guaranteed)
    });
    // After the process exits and its stderr is drained, so the temporary
    // directory is removed only once qpdf is gone.
    child.on('close', done);
  });
}
