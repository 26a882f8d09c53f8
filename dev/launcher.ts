/**
 * `npm start`: the API and one worker together on one machine, for a newcomer
 * or a developer. Development tooling (dev/): it never ships in an image and
 * runs through tsx; `npm start` builds dist/ first, and the API and the worker
 * run from the production entry points there. Every service that is not configured gets an embedded
 * default, and the log says which (docs/operations.md, "Running without Docker"):
 *
 * - Redis: REDIS_URL, else a `redis-server` from the PATH (data in DATA_DIR/redis);
 * - MongoDB: MONGODB_URI, else a real `mongod` through mongodb-memory-server
 *   (data in DATA_DIR/mongodb), else the in-process wire stand-in (records in
 *   memory only: a loud warning says so);
 * - storage: S3_ENDPOINT, else the local file system (STORAGE_DIR).
 *
 * The API and the worker run as child processes of this one, exactly as in
 * production (`npm run start:api`, `npm run start:worker`); this process owns
 * the embedded services, writes DATA_DIR/state.json so the operator CLI finds
 * them, creates a development organization on a database without any, and
 * stops everything on SIGINT/SIGTERM. With NODE_ENV=production the
 * configuration schema refuses to start without MONGODB_URI, REDIS_URL and
 * S3_ENDPOINT, naming each, so no embedded default is ever used there.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { createDataContext } from '@api/context';
import { ConfigError, loadConfig, type Config } from '@shared/config';
import { createLogger, type Logger } from '@shared/logger';
import { startMongod } from './embedded/mongo';
import { redisServerBinary, startRedisServer } from './embedded/redis';
import { readRunningState, removeState, stopLeftovers, writeState } from './embedded/state';
import { startMongoStandin } from './mongo-standin/server';

/** The database name the embedded MongoDB gets. */
const DATABASE = 'media';
const DEV_ORG = { slug: 'dev', name: 'Development' };
/** The project's root (this file is dev/launcher.ts, run through tsx). */
const ROOT = resolve(__dirname, '..');
/** A file the printed curl line can upload as it is. */
const SAMPLE_FILE = join(ROOT, 'test', 'fixtures', 'Canon_40D.jpg');

class StartError extends Error {}

interface Started {
  env: Record<string, string>;
  /** Processes started here (for the state file). */
  pids: Record<string, number>;
  services: Record<'mongodb' | 'redis' | 'storage', string>;
  stops: (() => Promise<void>)[];
}

const redact = (url: string) => url.replace(/\/\/[^@/]*@/, '//[redacted]@');

async function startServices(config: Config, dataDir: string, logger: Logger): Promise<Started> {
  const started: Started = {
    env: {},
    pids: {},
    services: { mongodb: '', redis: '', storage: '' },
    stops: [],
  };
  try {
    if (config.redisUrl) {
      started.services.redis = `REDIS_URL ${redact(config.redisUrl)}`;
    } else {
      if (!redisServerBinary()) {
        throw new StartError(
          'REDIS_URL is not set and no redis-server is on the PATH: install Redis (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) or set REDIS_URL.',
        );
      }
      const dir = join(dataDir, 'redis');
      const redis = await startRedisServer({ dir, persist: true });
      started.stops.push(redis.stop);
      started.env.REDIS_URL = redis.url;
      if (redis.pid) started.pids.redis = redis.pid;
      started.services.redis = `embedded ${redis.version} at ${redis.url} (data in ${dir})`;
    }
    logger.info({ redis: started.services.redis }, 'Redis');

    if (config.mongodbUri) {
      started.services.mongodb = `MONGODB_URI ${redact(config.mongodbUri)}`;
    } else {
      const dbPath = join(dataDir, 'mongodb');
      const mongod = await startMongod({ dbPath });
      if (!('reason' in mongod)) {
        started.stops.push(mongod.stop);
        started.env.MONGODB_URI = `${mongod.uri}/${DATABASE}`;
        started.services.mongodb = `embedded mongod (${mongod.binary}) at ${mongod.uri} (data in ${dbPath})`;
      } else {
        logger.info({ reason: mongod.reason }, 'no mongod available for MongoDB');
        const standin = await startMongoStandin({ logger: logger.child({ component: 'mongodb' }) });
        started.stops.push(() => standin.close());
        started.env.MONGODB_URI = `${standin.uri}/${DATABASE}`;
        started.services.mongodb = `in-process STAND-IN at ${standin.uri}: records live in memory and are LOST when npm start stops`;
        process.stderr.write(
          [
            '',
            '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!',
            '!! MongoDB: no MONGODB_URI and no mongod, so the in-process STAND-IN runs.  !!',
            '!! Records live in memory and are LOST when `npm start` stops (the files  !!',
            '!! stay on disk without their records). For data that lasts, set          !!',
            '!! MONGODB_URI or install mongod. Development only (docs/mongo-standin.md)  !!',
            '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!',
            '',
          ].join('\n'),
        );
      }
    }
    logger.info({ mongodb: started.services.mongodb }, 'MongoDB');

    if (config.s3) {
      started.services.storage = `S3 ${config.s3.endpoint} bucket ${config.s3.bucket}`;
    } else {
      const root = resolve(config.storageDir);
      await mkdir(root, { recursive: true });
      started.env.STORAGE_DIR = root;
      started.services.storage = `local file system ${root} (S3_ENDPOINT not set)`;
    }
    logger.info({ storage: started.services.storage }, 'storage');
    return started;
  } catch (err) {
    await stopAll(started.stops, logger);
    throw err;
  }
}

async function stopAll(stops: (() => Promise<void>)[], logger: Logger): Promise<void> {
  for (const stop of [...stops].reverse()) {
    await stop().catch((err: unknown) => logger.warn({ err }, 'stopping a service failed'));
  }
}

/** The development organization and token, when the database has no organization at all. */
async function bootstrapOrganization(
  config: Config,
  logger: Logger,
): Promise<{ slug: string; token: string } | undefined> {
  const data = await createDataContext(config, logger);
  try {
    if ((await data.organizations.count()) > 0) return undefined;
    const { organization, token } = await data.organizations.create(
      DEV_ORG.slug,
      DEV_ORG.name,
      'npm start',
    );
    logger.info(
      { organization: organization.slug, tokenId: token.tokenId },
      'created a development organization',
    );
    return { slug: organization.slug, token: token.token };
  } finally {
    await data.close();
  }
}

/**
 * The API's and the worker's entry points: the production ones, dist/<role>/main.js
 * (`npm start` builds them first); with --from-source, the .ts sources through tsx
 * (the end-to-end test, which does not build).
 */
function entryPoint(role: 'api' | 'worker', fromSource: boolean): { args: string[] } {
  const file = fromSource ? join(ROOT, role, 'main.ts') : join(ROOT, 'dist', role, 'main.js');
  return { args: [...(fromSource ? ['--import', 'tsx'] : []), '--enable-source-maps', file] };
}

function spawnRole(
  role: 'api' | 'worker',
  env: NodeJS.ProcessEnv,
  fromSource: boolean,
): ChildProcess {
  const { args } = entryPoint(role, fromSource);
  return spawn(process.execPath, role === 'api' ? ['--max-semi-space-size=2', ...args] : args, {
    env: { MALLOC_ARENA_MAX: '2', ...env },
    stdio: ['ignore', 'inherit', 'inherit'],
    // Its own process group: Ctrl-C reaches this process only, which then
    // stops the children once, in order (a second signal would make them quit at once).
    detached: true,
  });
}

async function waitForApi(url: string, child: ChildProcess, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new StartError(
        `the API exited during start-up (${child.exitCode ?? child.signalCode})`,
      );
    try {
      const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1_000) });
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    await sleep(200);
  }
  throw new StartError(`the API did not answer ${url}/healthz within ${timeoutMs / 1000} s`);
}

function banner(
  apiUrl: string,
  services: Started['services'],
  config: Config,
  org: { slug: string; token: string } | undefined,
): string {
  const lines = [
    '',
    `Media storage service is running at ${apiUrl}`,
    `  storage   ${services.storage}`,
    `  mongodb   ${services.mongodb}`,
    `  redis     ${services.redis}`,
    `  docs      ${apiUrl}/docs   (OpenAPI: ${apiUrl}/docs/openapi.yaml)`,
    `  health    ${apiUrl}/readyz   metrics ${apiUrl}/metrics`,
    config.dashboard
      ? `  dashboard ${apiUrl}/admin/queues (user ${config.dashboard.user}${config.dashboard.write ? ', actions allowed' : ', read-only'})`
      : '  dashboard off (set DASHBOARD_USER and DASHBOARD_PASSWORD to enable /admin/queues)',
  ];
  if (org) {
    const file = existsSync(SAMPLE_FILE) ? SAMPLE_FILE : 'path/to/photo.jpg';
    lines.push(
      '',
      `Created the development organization "${org.slug}". Its token (shown once, keep it):`,
      `  ${org.token}`,
      '',
      'Upload a file:',
      `  curl -H "Authorization: Bearer ${org.token}" -F "file=@${file}" ${apiUrl}/media/upload`,
    );
  } else {
    lines.push(
      '',
      'Organizations already exist. A new one with its token, from another shell:',
      '  npm run --silent cli -- org:create --slug acme --name "Acme"',
    );
  }
  lines.push('', 'Stop with Ctrl-C.', '');
  return lines.join('\n');
}

async function main(): Promise<number> {
  let fromSource: boolean;
  try {
    ({
      values: { 'from-source': fromSource },
    } = parseArgs({ options: { 'from-source': { type: 'boolean', default: false } } }));
  } catch (err) {
    throw new StartError(
      `${(err as Error).message}\nusage: node --import tsx dev/launcher.ts [--from-source]`,
    );
  }
  if (!fromSource) {
    for (const role of ['api', 'worker'] as const) {
      const file = entryPoint(role, false).args.at(-1)!;
      if (!existsSync(file))
        throw new StartError(`${file} is missing: run \`npm run build\` first (npm start does).`);
    }
  }
  const config = loadConfig(process.env);
  const logger = createLogger({ level: config.logLevel, name: 'start' });
  const dataDir = resolve(config.dataDir);
  await mkdir(dataDir, { recursive: true });
  const running = readRunningState(dataDir);
  if (running) {
    throw new StartError(
      `npm start is already running with ${dataDir} (pid ${running.pid}, ${running.apiUrl}); stop it first or set DATA_DIR to another directory.`,
    );
  }

  const leftovers = await stopLeftovers(dataDir);
  if (leftovers.length)
    logger.warn({ stopped: leftovers }, 'stopped processes left behind by an earlier npm start');

  const started = await startServices(config, dataDir, logger);
  const env: NodeJS.ProcessEnv = { ...process.env, ...started.env };
  const childConfig = loadConfig(env);
  const apiUrl = `http://localhost:${childConfig.port}`;
  const children: ChildProcess[] = [];
  let stopping = false;

  const shutdown = async (code: number): Promise<number> => {
    stopping = true;
    const grace = config.shutdownTimeoutMs + 5_000;
    await Promise.all(
      children.map(async (child) => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = new Promise<void>((done) => child.once('exit', () => done()));
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), grace);
        await exited;
        clearTimeout(timer);
      }),
    );
    await stopAll(started.stops, logger);
    await removeState(dataDir);
    logger.info('stopped');
    return code;
  };

  try {
    const org = await bootstrapOrganization(childConfig, logger);
    const api = spawnRole('api', env, fromSource);
    const worker = spawnRole('worker', env, fromSource);
    children.push(api, worker);
    await writeState(dataDir, {
      pid: process.pid,
      startedAt: new Date().toISOString(),
      apiUrl,
      env: started.env,
      services: started.services,
      // In stopping order: the processes using the services, then the services.
      children: { api: api.pid ?? 0, worker: worker.pid ?? 0, ...started.pids },
    });
    await waitForApi(`http://127.0.0.1:${childConfig.port}`, api);
    process.stdout.write(banner(apiUrl, started.services, childConfig, org));
  } catch (err) {
    await shutdown(1);
    throw err;
  }

  return new Promise<number>((done) => {
    const stop = (code: number) => {
      if (stopping) return;
      void shutdown(code).then(done);
    };
    process.once('SIGINT', () => stop(0));
    process.once('SIGTERM', () => stop(0));
    for (const [role, child] of [
      ['api', children[0]],
      ['worker', children[1]],
    ] as const) {
      child?.once('exit', (code, signal) => {
        if (stopping) return;
        logger.error({ role, code, signal }, `the ${role} process exited; stopping everything`);
        stop(1);
      });
    }
  });
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(
      `${err instanceof ConfigError || err instanceof StartError ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exitCode = 1;
  },
);
