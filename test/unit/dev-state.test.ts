/**
 * The CLI's hook into a running `npm start` (api/dev-state.ts): it reads the
 * state file the launcher writes, takes only the allow-listed service
 * addresses, never overrides what is set, and is off under
 * NODE_ENV=production or when the launcher is gone.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { adoptDevState, DEV_STATE_VARIABLES, devStatePath } from '../../api/dev-state';
import { statePath, writeState, type RunningState } from '../../dev/embedded/state';

let dataDir: string;

beforeEach(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'media-dev-state-'));
});
afterEach(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

/** A state file as the launcher writes it, for a launcher that runs (this process). */
const launcherState = (env: Record<string, string>, pid = process.pid): RunningState => ({
  pid,
  startedAt: new Date().toISOString(),
  apiUrl: 'http://localhost:3000',
  env,
  services: { mongodb: 'embedded', redis: 'embedded', storage: 'local' },
  children: { api: { pid: 1, startTime: 1 }, worker: { pid: 2, startTime: 2 } },
});

const SERVICES = {
  MONGODB_URI: 'mongodb://127.0.0.1:38123/media',
  REDIS_URL: 'redis://127.0.0.1:41237',
  STORAGE_DIR: '/srv/media/.data/storage',
};

describe('the CLI hook into a running npm start (api/dev-state.ts)', () => {
  it("reads the launcher's state file where the launcher writes it", () => {
    expect(devStatePath(dataDir)).toBe(statePath(dataDir));
    expect([...DEV_STATE_VARIABLES].sort()).toEqual(Object.keys(SERVICES).sort());
  });

  it('takes the service addresses the launcher wrote', async () => {
    await writeState(dataDir, launcherState(SERVICES));
    const env: NodeJS.ProcessEnv = { DATA_DIR: dataDir };
    expect(adoptDevState(env).sort()).toEqual(['MONGODB_URI', 'REDIS_URL', 'STORAGE_DIR']);
    expect(env).toEqual({ DATA_DIR: dataDir, ...SERVICES });
  });

  it('takes no variable outside the allow-list', async () => {
    await writeState(
      dataDir,
      launcherState({
        REDIS_URL: SERVICES.REDIS_URL,
        NODE_ENV: 'development',
        NODE_OPTIONS: '--require /tmp/evil.js',
        PATH: '/tmp/evil',
        METRICS_TOKEN: 'from-the-file',
        S3_ENDPOINT: 'http://127.0.0.1:9000',
        QUEUE_PREFIX: 'other',
        LOG_LEVEL: 'trace',
      }),
    );
    const env: NodeJS.ProcessEnv = { DATA_DIR: dataDir };
    expect(adoptDevState(env)).toEqual(['REDIS_URL']);
    expect(env).toEqual({ DATA_DIR: dataDir, REDIS_URL: SERVICES.REDIS_URL });
  });

  it('never overrides a variable that is set', async () => {
    await writeState(dataDir, launcherState(SERVICES));
    const env: NodeJS.ProcessEnv = { DATA_DIR: dataDir, MONGODB_URI: 'mongodb://db.example/x' };
    expect(adoptDevState(env).sort()).toEqual(['REDIS_URL', 'STORAGE_DIR']);
    expect(env.MONGODB_URI).toBe('mongodb://db.example/x');
  });

  it('never sets a variable given as <NAME>_FILE (a secret read from a file)', async () => {
    await writeState(dataDir, launcherState(SERVICES));
    const env: NodeJS.ProcessEnv = { DATA_DIR: dataDir, REDIS_URL_FILE: '/run/secrets/redis' };
    expect(adoptDevState(env).sort()).toEqual(['MONGODB_URI', 'STORAGE_DIR']);
    expect(env.REDIS_URL).toBeUndefined();
  });

  it('is ignored under NODE_ENV=production', async () => {
    await writeState(dataDir, launcherState(SERVICES));
    const env: NodeJS.ProcessEnv = { DATA_DIR: dataDir, NODE_ENV: 'production' };
    expect(adoptDevState(env)).toEqual([]);
    expect(env).toEqual({ DATA_DIR: dataDir, NODE_ENV: 'production' });
  });

  it('is ignored when its launcher no longer runs, or when it is not a state file', async () => {
    const gone = spawnSync(process.execPath, ['-e', '']).pid;
    await writeState(dataDir, launcherState(SERVICES, gone));
    expect(adoptDevState({ DATA_DIR: dataDir })).toEqual([]);

    for (const text of [
      'not json',
      'null',
      '[]',
      JSON.stringify({ env: SERVICES }),
      JSON.stringify({ pid: String(process.pid), env: SERVICES }),
      JSON.stringify({ pid: process.pid, env: 'MONGODB_URI=x' }),
      JSON.stringify({ pid: process.pid, env: { MONGODB_URI: 42, REDIS_URL: '' } }),
    ]) {
      await writeFile(statePath(dataDir), text);
      const env: NodeJS.ProcessEnv = { DATA_DIR: dataDir };
      expect({ text, adopted: adoptDevState(env) }).toEqual({ text, adopted: [] });
      expect(env).toEqual({ DATA_DIR: dataDir });
    }
    expect(adoptDevState({ DATA_DIR: join(dataDir, 'missing') })).toEqual([]);
  });

  it('imports no launcher code: Node built-ins only', () => {
    const source = readFileSync(join(__dirname, '..', '..', 'api', 'dev-state.ts'), 'utf8');
    const imports = [...source.matchAll(/^import .* from '([^']+)';$/gm)].map((m) => m[1]);
    expect(imports.length).toBeGreaterThan(0);
    for (const from of imports) expect(from).toMatch(/^node:/);
    expect(source).not.toMatch(/require\(|import\(/);
  });
});
