/** The operator CLI run as operators run it: `npm run --silent cli -- …` in the project, as a child process. */
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = join(__dirname, '..', '..');

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs one command with `env` on top of this process's environment; never throws on a non-zero exit. */
export async function runCli(env: NodeJS.ProcessEnv, ...args: string[]): Promise<CliResult> {
  try {
    const { stdout, stderr } = await run('npm', ['run', '--silent', 'cli', '--', ...args], {
      cwd: root,
      env: { ...process.env, ...env, LOG_LEVEL: 'warn' },
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as CliResult;
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

export interface CliSession {
  /** One command, as `runCli()` runs it: its exit code, stdout and stderr; never throws on a non-zero exit. */
  run(...args: string[]): Promise<CliResult>;
  close(): Promise<void>;
}

/**
 * One CLI process (./cli-host.ts, started through tsx as `npm run cli` starts
 * the CLI, with the same environment as `runCli()`) for many commands, one
 * after another: each runs through the CLI's own `runCli()` and answers what
 * its process would (exit code, stdout, stderr) without a process of its own
 * (an npm and a tsx start, a second or more each). For tests of what the
 * commands do; `runCli()` checks the process itself.
 */
export async function cliSession(env: NodeJS.ProcessEnv): Promise<CliSession> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, 'cli-host.ts')], {
    cwd: root,
    env: { ...process.env, ...env, LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = once(child, 'exit');
  const pending = new Map<number, (result: CliResult) => void>();
  let ready!: () => void;
  const started = new Promise<void>((resolve) => (ready = resolve));
  child.on('message', (m: { ready?: true; id?: number } & CliResult) => {
    if (m.ready) return ready();
    pending.get(m.id!)?.({ code: m.code, stdout: m.stdout, stderr: m.stderr });
    pending.delete(m.id!);
  });
  const died = exited.then(() => {
    throw new Error(`the CLI process exited (${child.exitCode ?? child.signalCode}):\n${output}`);
  });
  died.catch(() => undefined);
  await Promise.race([started, died]);
  let next = 0;
  return {
    run(...args) {
      const id = next++;
      const answered = new Promise<CliResult>((resolve) => pending.set(id, resolve));
      child.send({ id, args });
      return Promise.race([answered, died]);
    },
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.disconnect();
      await exited;
    },
  };
}
