/**
 * What `npm start` trusts in its state file. A recorded pid
 * names a process only together with its start time (/proc/<pid>/stat): a
 * reused pid is neither signalled as a leftover nor taken for a running
 * launcher (by the launcher or by the CLI). The development organization is
 * made only on a database the launcher started, never under production.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { adoptDevState, processStartTime } from '../../api/dev-state';
import { mayBootstrap } from '../../dev/dev-org';
import {
  readRunningState,
  stopLeftovers,
  writeState,
  type ProcessRef,
  type RunningState,
} from '../../dev/embedded/state';

let dataDir: string;
let victim: ChildProcess;

beforeEach(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'media-launcher-state-'));
  // A process whose command line looks like one the launcher starts (…/main.js).
  victim = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', '/srv/other/main.js'], {
    stdio: 'ignore',
  });
  await once(victim, 'spawn');
});
afterEach(async () => {
  if (victim.exitCode === null && victim.signalCode === null) {
    victim.kill('SIGKILL');
    await once(victim, 'exit');
  }
  await rm(dataDir, { recursive: true, force: true });
});

const running = (p: ChildProcess) => p.exitCode === null && p.signalCode === null;
/** A pid that ran and has exited. */
const gonePid = () => spawnSync(process.execPath, ['-e', '']).pid;

const state = (
  pid: number,
  children: Record<string, ProcessRef>,
  pidStartTime?: number,
): RunningState => ({
  pid,
  ...(pidStartTime === undefined ? {} : { pidStartTime }),
  startedAt: new Date().toISOString(),
  apiUrl: 'http://localhost:3000',
  env: { REDIS_URL: 'redis://127.0.0.1:6399' },
  services: { mongodb: 'embedded', redis: 'embedded', storage: 'local' },
  children,
});

describe('leftovers of a launcher that was killed', () => {
  it('reads a start time from /proc for a running process, none for a gone one', () => {
    expect(processStartTime(victim.pid!)).toEqual(expect.any(Number));
    expect(processStartTime(process.pid)).toBeLessThanOrEqual(processStartTime(victim.pid!)!);
    expect(processStartTime(gonePid())).toBeUndefined();
  });

  it('a recorded pid now used by another process (other start time) is left alone', async () => {
    const startTime = processStartTime(victim.pid!)!;
    await writeState(
      dataDir,
      state(gonePid(), { api: { pid: victim.pid!, startTime: startTime - 1 } }),
    );
    expect(await stopLeftovers(dataDir)).toEqual([]);
    expect(running(victim)).toBe(true);
    expect(() => process.kill(victim.pid!, 0)).not.toThrow();
  });

  it('a pid recorded without a start time (an older state file) is left alone', async () => {
    await writeState(dataDir, {
      ...state(gonePid(), {}),
      children: { api: victim.pid! } as unknown as Record<string, ProcessRef>,
    });
    expect(await stopLeftovers(dataDir)).toEqual([]);
    expect(() => process.kill(victim.pid!, 0)).not.toThrow();
  });

  it('the same process (pid and start time) is stopped', async () => {
    const startTime = processStartTime(victim.pid!)!;
    await writeState(dataDir, state(gonePid(), { api: { pid: victim.pid!, startTime } }));
    const exited = once(victim, 'exit');
    expect(await stopLeftovers(dataDir)).toEqual(['api']);
    await exited;
    expect(victim.signalCode).toBe('SIGTERM');
  });
});

describe('a launcher whose pid was reused', () => {
  it('is not taken for a running launcher, by the next npm start or by the CLI', async () => {
    const own = processStartTime(process.pid)!;
    // The "launcher" pid runs, but it is another process than the one recorded.
    await writeState(dataDir, state(process.pid, {}, own + 1));
    expect(readRunningState(dataDir)).toBeUndefined();
    expect(adoptDevState({ DATA_DIR: dataDir })).toEqual([]);
    // Control: the same pid with its own start time is the running launcher.
    await writeState(dataDir, state(process.pid, {}, own));
    expect(readRunningState(dataDir)?.pid).toBe(process.pid);
    expect(adoptDevState({ DATA_DIR: dataDir })).toEqual(['REDIS_URL']);
  });
});

describe('the first-start development organization', () => {
  it('is made only on a database the launcher started, never under NODE_ENV=production', () => {
    expect(mayBootstrap('development', true)).toBe(true);
    expect(mayBootstrap(undefined, true)).toBe(true);
    expect(mayBootstrap('development', false)).toBe(false); // MONGODB_URI given
    expect(mayBootstrap('production', true)).toBe(false);
    expect(mayBootstrap('production', false)).toBe(false);
  });
});
