/**
 * `npm start` as a newcomer meets it: nothing configured, so it starts its
 * embedded Redis, MongoDB (mongod or the stand-in) and file-system storage,
 * runs the API and a worker, creates a development organization and prints a
 * curl line that uploads a file as printed. The operator CLI, run from
 * "another shell" (a separate process told nothing but DATA_DIR), finds the
 * same services through the state file. SIGTERM stops everything it started.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createConnection, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { staleness } from '../../dev/build-if-stale';
import { eventually, GiveUp } from '../support/eventually';
import { sha256 } from '../support/files';
import { mongoUriFor } from '../support/context';
import { freePort } from '../support/services/process';

const run = promisify(execFile);
const root = join(__dirname, '..', '..');
const LAUNCHER = join(root, 'dev', 'launcher.ts');
/** Whether dist/ is a build of the sources as they are (then the launcher needs no build). */
const FROM_DIST = staleness(root) === undefined;

/** The environment of a machine where nothing is configured. */
function bareEnv(overrides: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (
      /^(MONGODB_URI|REDIS_URL|S3_|STORAGE_DIR|DATA_DIR|TEST_|QUEUE_PREFIX|PORT$|WORKER_PORT)/.test(
        key,
      )
    )
      continue;
    env[key] = value;
  }
  return { ...env, NODE_ENV: 'development', LOG_LEVEL: 'info', ...overrides };
}

interface Launched {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function launch(env: NodeJS.ProcessEnv): Launched {
  // The API and the worker from dist/ when it is current, as `npm start` runs them (CI builds
  // it before the tests); else from the sources through tsx (no build).
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', LAUNCHER, ...(FROM_DIST ? [] : ['--from-source'])],
    {
      cwd: root,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  child.stdout.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => resolve(code)),
  );
  return { child, output: () => output, exited };
}

async function waitForOutput(
  l: Launched,
  pattern: RegExp,
  timeoutMs = 90_000,
): Promise<RegExpMatchArray> {
  return eventually(() => {
    const match = l.output().match(pattern);
    if (match) return match;
    if (l.child.exitCode !== null) throw new GiveUp(`launcher exited early:\n${l.output()}`);
    throw new Error(`no ${pattern} within ${timeoutMs} ms:\n${l.output()}`);
  }, timeoutMs);
}

const portOpen = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });

async function cli(dataDir: string, ...args: string[]) {
  // Another shell: the same project, nothing configured but where the data lives.
  const { stdout } = await run('npm', ['run', '--silent', 'cli', '--', ...args], {
    cwd: root,
    env: bareEnv({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' }),
  });
  return JSON.parse(stdout) as { token: string; organization: { slug: string } };
}

/** Processes still running that were started for `dataDir` (their environment names it). */
function processesOf(dataDir: string): string[] {
  const found: string[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    if (Number(pid) === process.pid) continue;
    try {
      const environ = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      if (environ.includes(`DATA_DIR=${dataDir}`))
        found.push(`${pid} ${readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ')}`);
    } catch {
      // gone, or not ours to read
    }
  }
  return found;
}

/** Holds `port` (all interfaces, as the worker listens) with a server that is not the worker; undefined when something else already does. */
async function hold(port: number): Promise<Server | undefined> {
  const server = createServer((socket) => socket.destroy());
  server.listen(port);
  try {
    await once(server, 'listening');
    return server;
  } catch {
    return undefined; // taken already: as good for the test
  }
}

/** WORKER_PORT's default (shared/config/variables.ts). */
const DEFAULT_WORKER_PORT = 3001;

describe('npm start with nothing configured', () => {
  let dataDir: string;
  let port: number;
  let launched: Launched;

  let blocker: Server | undefined;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'media-start-'));
    port = await freePort();
    // WORKER_PORT is not set and its default is taken by another program.
    blocker = await hold(DEFAULT_WORKER_PORT);
    launched = launch(bareEnv({ DATA_DIR: dataDir, PORT: String(port) }));
    await waitForOutput(launched, /Stop with Ctrl-C/);
  }, 120_000);

  afterAll(async () => {
    if (launched.child.exitCode === null) launched.child.kill('SIGKILL');
    blocker?.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('picks a free worker port when WORKER_PORT is not set and its default is taken', async () => {
    const out = launched.output();
    expect(out).toMatch(/port 3001 is taken: the worker listens on \d+/);
    const workerPort = Number(/worker http:\/\/localhost:(\d+)\/readyz/.exec(out)![1]);
    expect(workerPort).not.toBe(DEFAULT_WORKER_PORT);
    const ready = await fetch(`http://127.0.0.1:${workerPort}/readyz`);
    expect(ready.status).toBe(200);
  });

  it('says which embedded service it uses for each and serves with /readyz green', async () => {
    const out = launched.output();
    expect(out).toMatch(/redis\s+embedded Redis server/);
    expect(out).toMatch(/mongodb\s+(embedded mongod|in-process STAND-IN)/);
    if (/STAND-IN/.test(out)) expect(out).toContain(`(data in ${join(dataDir, 'mongo-standin')};`);
    expect(out).toContain(`storage   local file system ${join(dataDir, 'storage')}`);

    const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
    expect(ready.status).toBe(200);
    const body = (await ready.json()) as { checks: Record<string, { ok: boolean }> };
    expect(
      Object.fromEntries(Object.entries(body.checks).map(([name, c]) => [name, c.ok])),
    ).toEqual({ mongodb: true, redis: true, storage: true });
  });

  it('prints a curl line that uploads a file as printed, and a second organization made with the CLI cannot read it', async () => {
    const [, curlLine] = await waitForOutput(launched, /^ {2}(curl .*\/media\/upload)$/m);
    const token = /Bearer (mst_[\w-]+)/.exec(curlLine!)![1]!;
    // The development token expires in 30 days, and the banner says when.
    const printed = /expires (\S+), in 30 days/.exec(launched.output())![1]!;
    const expiresInDays = (Date.parse(printed) - Date.now()) / 86_400_000;
    expect(expiresInDays).toBeGreaterThan(29);
    expect(expiresInDays).toBeLessThanOrEqual(30);
    const tokens = (await cli(dataDir, 'token:list', '--org', 'dev')) as unknown as {
      tokens: { expiresAt: string | null }[];
    };
    expect(tokens.tokens.map((t) => t.expiresAt)).toEqual([printed]);
    const file = /file=@([^"]+)"/.exec(curlLine!)![1]!;
    expect(existsSync(file)).toBe(true);

    // The line exactly as printed, through a shell, as a user pastes it.
    const { stdout } = await run('sh', [
      '-c',
      `${curlLine!} --silent --show-error --fail-with-body`,
    ]);
    const record = (JSON.parse(stdout) as { data: { key: string; bytes: number } }).data;
    const original = await readFile(file);
    expect(record.bytes).toBe(original.length);

    const mine = await fetch(
      `http://127.0.0.1:${port}/media/download?media=${encodeURIComponent(record.key)}`,
      { headers: { Authorization: `Bearer ${token}` } },
    );
    expect(mine.status).toBe(200);
    expect(sha256(Buffer.from(await mine.arrayBuffer()))).toBe(sha256(original));

    // A job: the worker on its picked port takes it.
    const metadata = await fetch(
      `http://127.0.0.1:${port}/media/metadata?mediaKey=${encodeURIComponent(record.key)}`,
      { headers: { Authorization: `Bearer ${token}` } },
    );
    expect(metadata.status).toBe(200);

    // The object is on the local file system under DATA_DIR.
    expect(existsSync(join(dataDir, 'storage', ...record.key.split('/')))).toBe(true);

    const other = await cli(dataDir, 'org:create', '--slug', 'other', '--name', 'Other');
    expect(other.organization.slug).toBe('other');
    const theirs = await fetch(
      `http://127.0.0.1:${port}/media/download?media=${encodeURIComponent(record.key)}`,
      { headers: { Authorization: `Bearer ${other.token}` } },
    );
    expect(theirs.status).toBe(404);
    expect(await theirs.json()).toMatchObject({ statusCode: 404, error: 'MEDIA_NOT_FOUND' });
  }, 60_000);

  it('refuses a second npm start on the same data directory', async () => {
    const second = launch(bareEnv({ DATA_DIR: dataDir, PORT: String(await freePort()) }));
    expect(await second.exited).toBe(1);
    expect(second.output()).toMatch(/npm start is already running with .* \(pid \d+/);
  }, 60_000);

  it('stops the API, the worker and the embedded services on SIGTERM and removes its state file', async () => {
    const state = JSON.parse(await readFile(join(dataDir, 'state.json'), 'utf8')) as {
      env: { REDIS_URL: string };
    };
    const redisPort = Number(new URL(state.env.REDIS_URL).port);
    expect(await portOpen(redisPort)).toBe(true);

    launched.child.kill('SIGTERM');
    expect(await launched.exited).toBe(0);
    expect(await portOpen(port)).toBe(false);
    expect(await portOpen(redisPort)).toBe(false);
    expect(existsSync(join(dataDir, 'state.json'))).toBe(false);
  }, 60_000);
});

it('refuses every embedded default with NODE_ENV=production, naming each variable', async () => {
  const dataDir = await mkdtemp(join(tmpdir(), 'media-start-prod-'));
  try {
    const launched = launch(bareEnv({ NODE_ENV: 'production', DATA_DIR: dataDir }));
    expect(await launched.exited).toBe(1);
    const out = launched.output();
    for (const name of ['MONGODB_URI', 'REDIS_URL', 'S3_ENDPOINT'])
      expect(out).toMatch(new RegExp(`${name}: is required when NODE_ENV=production`));
    // Nothing was started: no state, no embedded data.
    expect(existsSync(join(dataDir, 'state.json'))).toBe(false);
    expect(existsSync(join(dataDir, 'redis'))).toBe(false);
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
}, 60_000);

it('cleans up after an npm start that was killed: its API, worker and redis-server are stopped and the next start serves', async () => {
  const dataDir = await mkdtemp(join(tmpdir(), 'media-start-killed-'));
  const port = await freePort();
  const env = bareEnv({ DATA_DIR: dataDir, PORT: String(port), WORKER_PORT: '0' });
  let second: Launched | undefined;
  try {
    const first = launch(env);
    await waitForOutput(first, /Stop with Ctrl-C/);
    const state = JSON.parse(await readFile(join(dataDir, 'state.json'), 'utf8')) as {
      children: Record<string, { pid: number; startTime: number }>;
    };
    expect(Object.keys(state.children)).toEqual(['api', 'worker', 'redis']);
    first.child.kill('SIGKILL');
    await first.exited;
    // Its children live on (the API still holds the port).
    expect(await portOpen(port)).toBe(true);

    second = launch(env);
    await waitForOutput(second, /Stop with Ctrl-C/);
    expect(second.output()).toMatch(/stopped processes left behind by an earlier npm start/);
    for (const { pid } of Object.values(state.children))
      expect(() => process.kill(pid, 0)).toThrow();
    expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(200);
    second.child.kill('SIGTERM');
    expect(await second.exited).toBe(0);
  } finally {
    if (second && second.child.exitCode === null) second.child.kill('SIGKILL');
    await rm(dataDir, { recursive: true, force: true });
  }
}, 120_000);

it('stops everything, non-zero, naming the worker and the cause, when the worker cannot take WORKER_PORT', async () => {
  const dataDir = await mkdtemp(join(tmpdir(), 'media-start-port-'));
  const port = await freePort();
  const workerPort = await freePort();
  const blocker = (await hold(workerPort))!;
  try {
    const launched = launch(
      bareEnv({ DATA_DIR: dataDir, PORT: String(port), WORKER_PORT: String(workerPort) }),
    );
    expect(await launched.exited).toBe(1);
    const out = launched.output();
    expect(out).toMatch(/the worker process exited \(code 1\): .*EADDRINUSE/);
    expect(out).not.toMatch(/Stop with Ctrl-C/); // never announced as running
    // Nothing left: no API on its port, no process of this start, no state file.
    expect(await portOpen(port)).toBe(false);
    expect(processesOf(dataDir)).toEqual([]);
    expect(existsSync(join(dataDir, 'state.json'))).toBe(false);
  } finally {
    blocker.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}, 120_000);

it('stops everything with exit code 1, saying so, when a child dies after start', async () => {
  const dataDir = await mkdtemp(join(tmpdir(), 'media-start-death-'));
  const port = await freePort();
  try {
    const launched = launch(bareEnv({ DATA_DIR: dataDir, PORT: String(port), WORKER_PORT: '0' }));
    await waitForOutput(launched, /Stop with Ctrl-C/);
    const state = JSON.parse(await readFile(join(dataDir, 'state.json'), 'utf8')) as {
      children: Record<string, { pid: number }>;
    };
    process.kill(state.children.worker!.pid, 'SIGKILL');
    expect(await launched.exited).toBe(1);
    expect(launched.output()).toMatch(/npm start: the worker process exited \(signal SIGKILL\)/);
    expect(await portOpen(port)).toBe(false);
    expect(processesOf(dataDir)).toEqual([]);
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
}, 120_000);

it('makes no development organization in a database given by MONGODB_URI', async () => {
  const dataDir = await mkdtemp(join(tmpdir(), 'media-start-uri-'));
  const port = await freePort();
  // A database the launcher did not start (the harness's MongoDB), empty.
  const mongodbUri = mongoUriFor(`t_launcheruri_${process.pid}_${Date.now()}`);
  try {
    const launched = launch(
      bareEnv({
        DATA_DIR: dataDir,
        PORT: String(port),
        WORKER_PORT: '0',
        MONGODB_URI: mongodbUri,
      }),
    );
    await waitForOutput(launched, /Stop with Ctrl-C/);
    const out = launched.output();
    expect(out).toMatch(/MONGODB_URI is set .*makes no organization/);
    expect(out).not.toMatch(/Created the development organization|mst_/);
    const { stdout } = await run('npm', ['run', '--silent', 'cli', '--', 'org:list'], {
      cwd: root,
      env: bareEnv({ DATA_DIR: dataDir, LOG_LEVEL: 'warn', MONGODB_URI: mongodbUri }),
    });
    expect((JSON.parse(stdout) as { organizations: unknown[] }).organizations).toEqual([]);
    launched.child.kill('SIGTERM');
    expect(await launched.exited).toBe(0);
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
}, 120_000);
