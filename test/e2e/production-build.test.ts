/**
 * Production code and development tooling apart (docs/architecture.md, "What
 * ships"): the project is built from only what the Dockerfiles copy
 * (package files, tsconfig files, api/, worker/, shared/), the output holds
 * no stand-in, launcher or embedded-service code, and that output on
 * production dependencies alone (`npm ci --omit=dev`, as the images'
 * `npm prune --omit=dev`) serves: `npm run start:api` and
 * `npm run start:worker` answer /healthz and /readyz with the real services
 * under NODE_ENV=production, and the CLI runs.
 *
 * Slow parts: tsc (the build) and `npm ci` (from the local npm cache), run
 * side by side; about a minute in all.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { cp, mkdir, mkdtemp, rename, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { createConnection } from 'mongoose';
import { createS3Client } from '../../shared/storage/s3-client';
import { isolatedEnv, type IsolatedEnv } from '../support/context';
import { eventually, GiveUp } from '../support/eventually';
import { freePort } from '../support/services/process';

const run = promisify(execFile);
const root = join(__dirname, '..', '..');
/** What Dockerfile.api and Dockerfile.worker copy into their build stage. */
const BUILD_INPUTS = [
  'package.json',
  'package-lock.json',
  'tsconfig.json',
  'tsconfig.build.json',
  'api',
  'worker',
  'shared',
];
/**
 * Packages only development tooling uses: none may be installed in production,
 * the workspace packages under dev/ (not even as a link) among them.
 * (typescript is not among them: valibot, a dependency of @bull-board/api, names
 * it as an optional peer, and npm installs it with production dependencies.)
 */
const DEV_ONLY_PACKAGES = [
  '@media/mongo-standin',
  '@media/swift-s3',
  'mingo',
  'mongodb-memory-server-core',
  'tsx',
  'tsconfig-paths',
];
/** Names only dev/ code defines or loads. */
const DEV_CODE = [
  'MongoStandin',
  'mongo-standin',
  'startRedisServer',
  'startMongod',
  'stopLeftovers',
  'writeState',
  'developmentDefaults',
  'buildIfStale',
  'mongodb-memory-server',
  'from-source',
  'require("mingo")',
  'require("bson")',
  'require("tsx")',
];

let tmp: string;
let app: string;

/** Runs npm; a failure's message carries its output. */
async function npm(cwd: string, ...args: string[]): Promise<void> {
  await run('npm', args, {
    cwd,
    env: { ...process.env, NPM_CONFIG_UPDATE_NOTIFIER: 'false' },
    maxBuffer: 16 * 1024 * 1024,
  });
}

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path) : [path];
  });
}

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'media-production-build-'));
  const build = join(tmp, 'build');
  app = join(tmp, 'app');
  await mkdir(build);
  await mkdir(app);
  for (const input of BUILD_INPUTS)
    await cp(join(root, input), join(build, input), { recursive: true });
  // The build uses the development dependencies (tsc, tsc-alias) as the image's build stage does.
  await symlink(realpathSync(join(root, 'node_modules')), join(build, 'node_modules'), 'dir');
  for (const file of ['package.json', 'package-lock.json'])
    await cp(join(root, file), join(app, file));

  const install = async () => {
    try {
      await npm(app, 'ci', '--omit=dev', '--prefer-offline', '--no-audit', '--no-fund');
    } catch {
      // Where npm ci refuses a lock without other platforms' optional packages (npm/cli#9846; .ci/run).
      await npm(
        app,
        'install',
        '--omit=dev',
        '--no-save',
        '--prefer-offline',
        '--no-audit',
        '--no-fund',
      );
    }
  };
  await Promise.all([npm(build, 'run', '--silent', 'build'), install()]);
  await rename(join(build, 'dist'), join(app, 'dist'));
}, 240_000);

afterAll(async () => {
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

describe('the production build (npm run build from what the Dockerfiles copy)', () => {
  it('holds the API, worker and CLI entry points', () => {
    // …and the web console's static files (docs/console.md).
    for (const entry of [
      'api/main.js',
      'worker/main.js',
      'api/cli.js',
      'api/openapi.yaml',
      'console/index.html',
    ])
      expect(existsSync(join(app, 'dist', entry))).toBe(true);
  });

  it('holds no stand-in, launcher or embedded-service code', () => {
    const all = files(join(app, 'dist')).map((path) => relative(join(app, 'dist'), path));
    expect(all.length).toBeGreaterThan(50);
    expect(all.filter((path) => /mongo-standin|embedded|launcher|^dev\//.test(path))).toEqual([]);
    const found: string[] = [];
    for (const path of all.filter((p) => p.endsWith('.js'))) {
      const text = readFileSync(join(app, 'dist', path), 'utf8');
      for (const name of DEV_CODE) if (text.includes(name)) found.push(`${path}: ${name}`);
    }
    expect(found).toEqual([]);
  });
});

describe('the build on production dependencies only (npm ci --omit=dev)', () => {
  let env: IsolatedEnv;
  const children: ChildProcess[] = [];
  /** The API started by `npm run start:api` below. */
  let apiUrl = '';

  beforeAll(() => {
    env = isolatedEnv('prodbuild');
  });

  afterAll(async () => {
    await Promise.all(children.map(stopGroup));
    // The HEIC test leaves its upload and its conversion: removed with the records below.
    const s3 = createS3Client(env.config.s3!);
    const names: string[] = [];
    try {
      const listing = s3.listObjectsV2(env.bucket, '', true) as AsyncIterable<{ name?: string }>;
      for await (const o of listing) if (o.name) names.push(o.name);
    } catch {
      // no bucket: nothing was stored
    }
    if (names.length) await s3.removeObjects(env.bucket, names);
    await s3.removeBucket(env.bucket).catch(() => undefined);
    const db = await createConnection(env.env.MONGODB_URI!).asPromise();
    await db.dropDatabase().catch(() => undefined);
    await db.close();
  }, 60_000);

  it('installs no development-only package; bson only as the MongoDB driver needs it', () => {
    const manifest = JSON.parse(readFileSync(join(app, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    expect(manifest.dependencies).not.toHaveProperty('bson');
    expect(manifest.dependencies).not.toHaveProperty('mingo');
    // lstat: a workspace's link counts even where it points at nothing.
    const installed = (name: string) =>
      lstatSync(join(app, 'node_modules', name), { throwIfNoEntry: false }) !== undefined;
    for (const name of DEV_ONLY_PACKAGES)
      expect({ name, installed: installed(name) }).toEqual({
        name,
        installed: false,
      });
    // bson stays, as the driver's own dependency (mongoose → mongodb → bson), not ours.
    const driver = JSON.parse(
      readFileSync(join(app, 'node_modules', 'mongodb', 'package.json'), 'utf8'),
    ) as { dependencies: Record<string, string> };
    expect(driver.dependencies.bson).toBeDefined();
  });

  it('npm run start:api and npm run start:worker serve /healthz and /readyz with the real services', async () => {
    const port = await freePort();
    const workerPort = await freePort();
    const childEnv: NodeJS.ProcessEnv = {
      ...process.env,
      ...env.env,
      NODE_ENV: 'production',
      LOG_LEVEL: 'warn',
      // Production refuses to serve /metrics and /readyz's details open (docs/operations.md).
      METRICS_TOKEN: 'production-build-metrics-token',
      PORT: String(port),
      PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
      WORKER_PORT: String(workerPort),
    };
    apiUrl = `http://127.0.0.1:${port}`;
    const output: string[] = [];
    for (const script of ['start:api', 'start:worker']) {
      const child = spawn('npm', ['run', '--silent', script], {
        cwd: app,
        env: childEnv,
        stdio: ['ignore', 'pipe', 'pipe'],
        // Its own process group (npm → sh → node), stopped as a whole.
        detached: true,
      });
      child.stdout.on('data', (c: Buffer) => output.push(c.toString()));
      child.stderr.on('data', (c: Buffer) => output.push(c.toString()));
      children.push(child);
    }
    const status = async (url: string) => {
      for (const child of children)
        if (child.exitCode !== null) throw new GiveUp(`exited early:\n${output.join('')}`);
      return (await fetch(url, { signal: AbortSignal.timeout(3_000) })).status;
    };
    for (const base of [`http://127.0.0.1:${port}`, `http://127.0.0.1:${workerPort}`]) {
      await eventually(async () => expect(await status(`${base}/readyz`)).toBe(200), 60_000, 250);
      expect(await status(`${base}/healthz`)).toBe(200);
      const operator = { Authorization: 'Bearer production-build-metrics-token' };
      const ready = (await (await fetch(`${base}/readyz`, { headers: operator })).json()) as {
        checks: Record<string, { ok: boolean }>;
      };
      expect(Object.fromEntries(Object.entries(ready.checks).map(([k, v]) => [k, v.ok]))).toEqual({
        mongodb: true,
        redis: true,
        storage: true,
      });
    }
  }, 90_000);

  it('runs the operator CLI (dist/api/cli.js) as the images do', async () => {
    const { stdout } = await run(
      process.execPath,
      ['dist/api/cli.js', 'org:create', '--slug', 'probe', '--name', 'Probe'],
      { cwd: app, env: { ...process.env, ...env.env, NODE_ENV: 'production', LOG_LEVEL: 'warn' } },
    );
    expect(JSON.parse(stdout)).toMatchObject({ organization: { slug: 'probe' } });
  }, 30_000);

  it('converts a HEIC, decoded on a thread of the built worker (heic-thread.js)', async () => {
    expect(apiUrl).not.toBe('');
    const { stdout } = await run(
      process.execPath,
      ['dist/api/cli.js', 'token:create', '--org', 'probe'],
      { cwd: app, env: { ...process.env, ...env.env, NODE_ENV: 'production', LOG_LEVEL: 'warn' } },
    );
    const auth = { Authorization: `Bearer ${(JSON.parse(stdout) as { token: string }).token}` };
    const body = new FormData();
    body.append(
      'file',
      new Blob([readFileSync(join(root, 'test/fixtures/heic-samplefilehub.heif'))]),
      'sample.heif',
    );
    const uploaded = await fetch(`${apiUrl}/media/upload`, { method: 'POST', headers: auth, body });
    expect(uploaded.status).toBe(201);
    const { key } = ((await uploaded.json()) as { data: { key: string } }).data;
    const converted = await fetch(`${apiUrl}/media/convert`, {
      method: 'POST',
      headers: { ...auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKey: key, format: 'jpeg' }),
    });
    expect([
      converted.status,
      ((await converted.json()) as { data: { mimetype: string } }).data.mimetype,
    ]).toEqual([201, 'image/jpeg']);
  }, 60_000);
});

/** SIGTERM to the process group (npm, its shell, node); SIGKILL what is left after 30 s. */
async function stopGroup(child: ChildProcess): Promise<void> {
  const group = child.pid;
  if (!group) return;
  const signal = (name: NodeJS.Signals | 0): boolean => {
    try {
      process.kill(-group, name);
      return true;
    } catch {
      return false; // the group is gone
    }
  };
  if (!signal('SIGTERM')) return;
  await eventually(() => {
    if (signal(0)) throw new Error('the group is still running');
  }, 30_000).catch(() => undefined); // SIGKILL below
  signal('SIGKILL');
}
