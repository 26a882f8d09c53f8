/** The operator CLI run as operators run it: `npm run --silent cli -- …` in the project, as a child process. */
import { execFile } from 'node:child_process';
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
