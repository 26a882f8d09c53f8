/**
 * The state file of a running `npm start` (DATA_DIR/state.json): which
 * embedded services it started and where, so the operator CLI run from
 * another shell talks to the same Redis, MongoDB and storage. The launcher
 * writes and reads it; the CLI reads only `pid`, `pidStartTime` and the
 * allow-listed variables of `env`, through its own reader (api/dev-state.ts).
 *
 * Every pid is recorded with its start time (/proc/<pid>/stat): after a
 * reboot or long enough, a pid is reused by an unrelated process, which is
 * then neither taken for a running launcher nor signalled as a leftover.
 */
import { readFileSync } from 'node:fs';
import { rm, writeFile, rename } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { processStartTime, sameProcess } from '@api/dev-state';

export interface RunningState {
  /** The launcher's process id (the state is stale once it is gone). */
  pid: number;
  /** Its start time (clock ticks since boot), where /proc tells it. */
  pidStartTime?: number;
  startedAt: string;
  apiUrl: string;
  /**
   * Variables a process needs to use the same services: MONGODB_URI, REDIS_URL,
   * STORAGE_DIR (only those the launcher set; the CLI takes no others, api/dev-state.ts).
   */
  env: Record<string, string>;
  /** What each service is, for people. */
  services: Record<'mongodb' | 'redis' | 'storage', string>;
  /**
   * Processes it started (api, worker, redis-server), to clean up after a
   * launcher that was killed: each pid with its start time (null where /proc
   * could not tell it: such a process is never signalled).
   */
  children: Record<string, ProcessRef>;
}

export interface ProcessRef {
  pid: number;
  startTime: number | null;
}

/** A process this one started, named by its pid and its start time. */
export const processRef = (pid: number): ProcessRef => ({
  pid,
  startTime: processStartTime(pid) ?? null,
});

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

/** The process `ref` names is still running: same pid, same recorded start time. */
function stillThere(ref: unknown): ref is ProcessRef {
  if (typeof ref !== 'object' || ref === null) return false; // a bare pid: cannot be checked
  const { pid, startTime } = ref as Partial<ProcessRef>;
  if (typeof pid !== 'number' || !Number.isInteger(pid) || pid <= 0) return false;
  if (typeof startTime !== 'number') return false;
  return alive(pid) && processStartTime(pid) === startTime;
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
  return state && sameProcess(state.pid, state.pidStartTime) ? state : undefined;
}

/**
 * After a launcher that was killed (SIGKILL, a crash) its children may live
 * on: a redis-server on the data directory, an API holding the port. Stops
 * those still running and returns their names. A recorded pid is signalled
 * only when it still names the same process: its start time matches the one
 * recorded, and its command line is one the launcher starts. A reused pid
 * (another program, after a reboot or a wrap-around) is left alone, and so
 * is a pid recorded without a start time.
 */
export async function stopLeftovers(dataDir: string): Promise<string[]> {
  const state = readState(dataDir);
  if (!state || sameProcess(state.pid, state.pidStartTime)) return [];
  // The processes that use the services (the API, the worker) together, then the
  // services (redis-server): nothing is left talking to a service that is gone.
  const leftovers: { name: string; ref: ProcessRef; service: boolean }[] = [];
  for (const [name, ref] of Object.entries(state.children ?? {})) {
    if (!stillThere(ref)) continue;
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${ref.pid}/cmdline`, 'utf8');
    } catch {
      continue; // gone (or no /proc: nothing we can check safely)
    }
    if (!/redis-server|main\.(js|ts)/.test(cmdline)) continue;
    leftovers.push({ name, ref, service: /redis-server/.test(cmdline) });
  }
  const stopped = new Set<string>();
  for (const wave of [leftovers.filter((l) => !l.service), leftovers.filter((l) => l.service)]) {
    await Promise.all(
      wave.map(async ({ name, ref }) => {
        const { pid, startTime } = ref;
        try {
          if (!stillThere(ref)) return; // ended meanwhile: nothing to signal
          process.kill(pid, 'SIGTERM');
        } catch {
          return;
        }
        const same = () => alive(pid) && processStartTime(pid) === startTime;
        for (let i = 0; i < 100 && same(); i++) await new Promise((r) => setTimeout(r, 100));
        if (same()) process.kill(pid, 'SIGKILL');
        stopped.add(name);
      }),
    );
  }
  await removeState(dataDir);
  // In the state file's order (the order they were recorded in).
  return leftovers.map((l) => l.name).filter((name) => stopped.has(name));
}
