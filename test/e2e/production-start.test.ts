/**
 * Operator surfaces are closed in production unless opened on purpose: the
 * real API and worker processes (from dist/ when it is current, else through
 * tsx: test/support/processes.ts) with NODE_ENV=production
 * and every service configured refuse to start without METRICS_TOKEN, naming
 * it and METRICS_PUBLIC (exit code 1, nothing listening); the CLI, which
 * serves neither, is not asked; with METRICS_PUBLIC=true the API starts and
 * serves /metrics and /readyz's details open, as asked.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { isolatedEnv } from '../support/context';
import { entryArgs, startApiProcess, type ServiceProcess } from '../support/processes';

const root = join(__dirname, '..', '..');

/** Runs an entry point to its end (it is expected to stop by itself): exit code and output. */
async function runToExit(entry: string, env: NodeJS.ProcessEnv, args: string[] = []) {
  const child = spawn(process.execPath, [...entryArgs(entry), ...args], {
    cwd: root,
    env: { ...process.env, ...env, LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr.on('data', (c: Buffer) => (output += c.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  const [code] = (await once(child, 'exit')) as [number | null];
  clearTimeout(timer);
  return { code, output };
}

const production = (): NodeJS.ProcessEnv => {
  const { env } = isolatedEnv('e2eprodstart');
  delete env.METRICS_TOKEN;
  return { ...env, NODE_ENV: 'production', PORT: '0', WORKER_PORT: '0' };
};

it.each([
  ['API', 'api/main.ts'],
  ['worker', 'worker/main.ts'],
])(
  'the %s refuses to start in production without METRICS_TOKEN, naming it and METRICS_PUBLIC',
  async (_, entry) => {
    const { code, output } = await runToExit(entry, production());
    expect(code).toBe(1);
    expect(output).toMatch(/METRICS_TOKEN: is required when NODE_ENV=production/);
    expect(output).toMatch(/METRICS_PUBLIC=true/);
  },
  90_000,
);

it('the CLI, which serves neither, runs in production without METRICS_TOKEN', async () => {
  const { code, output } = await runToExit('api/cli.ts', production(), [
    'org:create',
    '--slug',
    'prodcli',
    '--name',
    'Prod CLI',
  ]);
  expect([code, output]).toEqual([0, expect.stringContaining('"slug":"prodcli"')]);
}, 90_000);

describe('with METRICS_PUBLIC=true', () => {
  let api: ServiceProcess | undefined;
  afterAll(async () => {
    await api?.kill('SIGTERM');
  });

  it('the API starts, and serves /metrics and the details of /readyz open, as asked', async () => {
    api = await startApiProcess({ ...production(), METRICS_PUBLIC: 'true' });
    const metrics = await fetch(`${api.url!}/metrics`);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toContain('http_request_duration_seconds');
    const ready = (await (await fetch(`${api.url!}/readyz`)).json()) as { checks?: unknown };
    expect(ready.checks).toBeDefined();
  }, 90_000);
});
