/**
 * The one hook between production code and the development launcher: the
 * operator CLI, run from another shell beside a running `npm start`, takes
 * the addresses of that launcher's embedded services from its state file,
 * DATA_DIR/state.json (docs/operations.md, "The CLI beside npm start").
 *
 * Narrow on purpose:
 * - only the variables in DEV_STATE_VARIABLES are taken (the ones the launcher
 *   writes); anything else in the file is ignored;
 * - a variable already set (non-empty), or given as `<NAME>_FILE`, wins over the file;
 * - NODE_ENV=production ignores the file altogether;
 * - a file whose launcher is gone (its `pid` no longer runs, or runs with
 *   another start time than `pidStartTime` records: the pid was reused) is ignored.
 *
 * It imports no launcher code: the file's format is the contract (`pid`, a
 * number; `env`, an object of strings; any other field is not read), and
 * test/unit/dev-state.test.ts checks it against what the launcher writes.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

/** What the CLI may take from the state file: where the embedded Redis, MongoDB and file store are. */
export const DEV_STATE_VARIABLES = ['MONGODB_URI', 'REDIS_URL', 'STORAGE_DIR'] as const;

/** DATA_DIR's default (shared/config/variables.ts). */
const DEFAULT_DATA_DIR = './.data';

export const devStatePath = (dataDir: string): string => resolve(join(dataDir, 'state.json'));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists but belongs to someone else.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * A process's start time in clock ticks since boot (field 22 of
 * /proc/<pid>/stat), or undefined where it cannot be read (no such process, or
 * no /proc). With the pid it names one process: a pid reused later has
 * another start time. The launcher records it beside each pid it writes.
 */
export function processStartTime(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces or ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[19]); // field 22 = 20th after the name and the state
    return Number.isSafeInteger(ticks) ? ticks : undefined;
  } catch {
    return undefined;
  }
}

/** Whether `pid` runs and, when its start time was recorded, is still that process. */
export function sameProcess(pid: number, startTime: unknown): boolean {
  if (!alive(pid)) return false;
  if (typeof startTime !== 'number') return true;
  const now = processStartTime(pid);
  return now === undefined || now === startTime;
}

/**
 * Fills the allowed variables that are not set in `env` from a running
 * `npm start` under DATA_DIR (default ./.data). Returns the names it set
 * (none when no `npm start` runs there, or under NODE_ENV=production).
 */
export function adoptDevState(env: NodeJS.ProcessEnv = process.env): string[] {
  // Production never uses what a development `npm start` left behind.
  if (env.NODE_ENV === 'production') return [];
  let state: unknown;
  try {
    state = JSON.parse(readFileSync(devStatePath(env.DATA_DIR || DEFAULT_DATA_DIR), 'utf8'));
  } catch {
    return []; // no file, or unreadable
  }
  if (typeof state !== 'object' || state === null) return [];
  const {
    pid,
    pidStartTime,
    env: vars,
  } = state as { pid?: unknown; pidStartTime?: unknown; env?: unknown };
  if (typeof pid !== 'number' || !Number.isInteger(pid) || pid <= 0) return [];
  if (!sameProcess(pid, pidStartTime)) return [];
  if (typeof vars !== 'object' || vars === null) return [];
  const adopted: string[] = [];
  for (const name of DEV_STATE_VARIABLES) {
    const value = (vars as Record<string, unknown>)[name];
    if (typeof value === 'string' && value && !env[name] && !env[`${name}_FILE`]) {
      env[name] = value;
      adopted.push(name);
    }
  }
  return adopted;
}
