/**
 * The state file of a running `npm start` (DATA_DIR/state.json): which
 * embedded services it started and where, so the operator CLI run from
 * another shell talks to the same Redis, MongoDB and storage.
 */
import { readFileSync } from 'node:fs';
import { rm, writeFile, rename } from 'node:fs/promises';
import { join, resolve } from 'node:path';

export interface RunningState {
  /** The launcher's process id (the state is stale once it is gone). */
  pid: number;
  startedAt: string;
  apiUrl: string;
  /** Variables a process needs to use the same services (MONGODB_URI, REDIS_URL, STORAGE_DIR…). */
  env: Record<string, string>;
  /** What each service is, for people. */
  services: Record<'mongodb' | 'redis' | 'storage', string>;
}

export const DEFAULT_DATA_DIR = './.data';

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

/** The state of a `npm start` that is still running, or undefined (no file, unreadable, or stale). */
export function readRunningState(dataDir: string): RunningState | undefined {
  let state: RunningState;
  try {
    state = JSON.parse(readFileSync(statePath(dataDir), 'utf8')) as RunningState;
  } catch {
    return undefined;
  }
  if (typeof state.pid !== 'number' || typeof state.env !== 'object' || !alive(state.pid))
    return undefined;
  return state;
}

/**
 * Fills the variables that are not set in `env` from a running `npm start`
 * under DATA_DIR (default ./.data). Explicit settings always win. Returns the
 * state used, or undefined when none is running.
 */
export function adoptRunningState(env: NodeJS.ProcessEnv = process.env): RunningState | undefined {
  // Production never uses what a development `npm start` left behind.
  if (env.NODE_ENV === 'production') return undefined;
  const state = readRunningState(env.DATA_DIR || DEFAULT_DATA_DIR);
  if (!state) return undefined;
  for (const [key, value] of Object.entries(state.env)) {
    if (!env[key]) env[key] = value;
  }
  return state;
}
