/**
 * The state file of a running `npm start` (DATA_DIR/state.json): which
 * embedded services it started and where, so the operator CLI run from
 * another shell talks to the same Redis, MongoDB and storage. The launcher
 * writes and reads it; the CLI reads only `pid` and the allow-listed
 * variables of `env`, through its own reader (api/dev-state.ts).
 */
import { readFileSync } from 'node:fs';
import { rm, writeFile, rename } from 'node:fs/promises';
import { join, resolve } from 'node:path';

export interface RunningState {
  /** The launcher's process id (the state is stale once it is gone). */
  pid: number;
  startedAt: string;
  apiUrl: string;
  /**
   * Variables a process needs to use the same services: MONGODB_URI, REDIS_URL,
   * STORAGE_DIR (only those the launcher set; the CLI takes no others, api/dev-state.ts).
   */
  env: Record<string, string>;
  /** What each service is, for people. */
  services: Record<'mongodb' | 'redis' | 'storage', string>;
  /** Processes it started (api, worker, redis-server), to clean up after a launcher that was killed. */
  children: Record<string, number>;
}

export const statePath = (dataDir: string): string => resolve(join(dataDir, 'state.json'));

export async function writeState(dataDir: string, state: RunningState): Promise<void> {
  const file = statePath(dataDir);
  const temp = `${file}.${process.pid}.tmp`;
  await writeFile(temp, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
  await rename(temp, file);
}

export async function removeState(dataDir: string): Promise<void> {
  await rm(statePath(dataDir), { force: true });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists but belongs to someone else.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function readState(dataDir: string): RunningState | undefined {
  try {
    const state = JSON.parse(readFileSync(statePath(dataDir), 'utf8')) as RunningState;
    return typeof state.pid === 'number' && typeof state.env === 'object' ? state : undefined;
  } catch {
    return undefined;
  }
}

/** The state of a `npm start` that is still running, or undefined (no file, unreadable, or stale). */
export function readRunningState(dataDir: string): RunningState | undefined {
  const state = readState(dataDir);
  return state && alive(state.pid) ? state : undefined;
}

/**
 * After a launcher that was killed (SIGKILL, a crash) its children may live
 * on: a redis-server on the data directory, an API holding the port. Stops
 * those still running (checking each pid's command line, so a recycled pid is
 * left alone) and returns their names.
 */
export async function stopLeftovers(dataDir: string): Promise<string[]> {
  const state = readState(dataDir);
  if (!state || alive(state.pid)) return [];
  const stopped: string[] = [];
  for (const [name, pid] of Object.entries(state.children ?? {})) {
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    } catch {
      continue; // gone (or no /proc: nothing we can check safely)
    }
    if (!/redis-server|main\.(js|ts)/.test(cmdline)) continue;
    try {
      process.kill(pid, 'SIGTERM');
    } catch {
      continue;
    }
    for (let i = 0; i < 100 && alive(pid); i++) await new Promise((r) => setTimeout(r, 100));
    if (alive(pid)) process.kill(pid, 'SIGKILL');
    stopped.push(name);
  }
  await removeState(dataDir);
  return stopped;
}
