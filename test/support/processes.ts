/**
 * The real API and worker processes for end-to-end tests, with an environment
 * of the test's own: from dist/ when it is current (built from the sources as
 * they are, as CI builds it before the tests: half the CPU of a start through
 * tsx, and the tests start dozens), else from the TypeScript entry points
 * through tsx.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { staleness } from '../../dev/build-if-stale';
import { eventually, GiveUp } from './eventually';
import { freePort } from './services/process';

const root = join(__dirname, '..', '..');
/** Whether dist/ holds a build of the sources as they are (checked once per test file). */
const fromDist = staleness(root) === undefined;

/** How to run `entry` (`api/main.ts`): its build in dist/ when current, else through tsx. */
export function entryArgs(entry: string): string[] {
  return fromDist
    ? ['--enable-source-maps', join('dist', entry.replace(/\.ts$/, '.js'))]
    : ['--import', 'tsx', entry];
}

export interface ServiceProcess {
  child: ChildProcess;
  /** Everything the process logged (JSON lines). */
  logs: string[];
  url?: string;
  /** Resolves when the process has logged a line matching `pattern`. */
  waitForLog(pattern: RegExp, timeoutMs?: number): Promise<string>;
  kill(signal: NodeJS.Signals): Promise<number | null>;
}

function start(entry: string, env: NodeJS.ProcessEnv): ServiceProcess {
  const child = spawn(process.execPath, entryArgs(entry), {
    cwd: root,
    env: {
      ...process.env,
      ...env,
      LOG_LEVEL: 'info', // the tests read the processes' logs
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: string[] = [];
  const waiters: { pattern: RegExp; resolve: (line: string) => void }[] = [];
  const onLine = (line: string) => {
    logs.push(line);
    for (const w of [...waiters]) {
      if (w.pattern.test(line)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(line);
      }
    }
  };
  let buffer = '';
  const onData = (chunk: Buffer) => {
    buffer += chunk.toString();
    const lines = buffer.split('\n');
    buffer = lines.pop() ?? '';
    lines.forEach(onLine);
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  return {
    child,
    logs,
    waitForLog(pattern, timeoutMs = 30_000) {
      const seen = logs.find((l) => pattern.test(l));
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () =>
            reject(
              new Error(
                `no log line matching ${String(pattern)} after ${timeoutMs} ms:\n${logs.slice(-20).join('\n')}`,
              ),
            ),
          timeoutMs,
        );
        waiters.push({
          pattern,
          resolve: (line) => {
            clearTimeout(timer);
            resolve(line);
          },
        });
      });
    },
    async kill(signal) {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      const exited = once(child, 'exit');
      child.kill(signal);
      const [code] = (await exited) as [number | null];
      return code;
    },
  };
}

export async function startApiProcess(env: NodeJS.ProcessEnv): Promise<ServiceProcess> {
  const port = await freePort();
  const proc = start('api/main.ts', {
    ...env,
    PORT: String(port),
    PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
  });
  proc.url = `http://127.0.0.1:${port}`;
  await eventually(
    async () => {
      if (proc.child.exitCode !== null) {
        throw new GiveUp(`the API process exited early:\n${proc.logs.join('\n')}`);
      }
      const res = await fetch(`${proc.url}/healthz`);
      if (!res.ok) throw new Error(`the API process answers /healthz ${res.status}`);
    },
    60_000,
    200,
  );
  return proc;
}

export async function startWorkerProcess(env: NodeJS.ProcessEnv): Promise<ServiceProcess> {
  // The ops server takes any free port unless the test chose one.
  const proc = start('worker/main.ts', { WORKER_PORT: '0', ...env });
  await proc.waitForLog(/"msg":"worker started"/, 60_000);
  return proc;
}
