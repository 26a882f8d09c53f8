/**
 * `npm start`: the API and one worker together on one machine, for a newcomer
 * or a developer. Development tooling (dev/): it never ships in an image and
 * runs through tsx; the API and the worker run from the production entry
 * points in dist/, which `npm start` builds first only when a source changed
 * since the last build (dev/build-if-stale.ts). Every service that is not
 * configured gets an embedded default, and the log says which
 * (docs/operations.md, "Running without Docker"):
 *
 * - Redis: REDIS_URL, else a `redis-server` from the PATH (data in DATA_DIR/redis);
 * - MongoDB: MONGODB_URI, else a real `mongod` through mongodb-memory-server
 *   (data in DATA_DIR/mongodb), else the in-process wire stand-in (data in
 *   DATA_DIR/mongo-standin, written through after every command);
 * - storage: S3_ENDPOINT, else the local file system (STORAGE_DIR).
 *
 * Outside production it also turns on signed URLs, the Bull dashboard and a
 * development rate limit where nothing is set (dev/dev-defaults.ts), and the
 * banner lists what is on and off.
 *
 * The API and the worker run as child processes of this one, exactly as in
 * production (`npm run start:api`, `npm run start:worker`); this process owns
 * the embedded services, writes DATA_DIR/state.json so the operator CLI finds
 * them, creates a development organization on a database without any, and
 * stops everything on SIGINT/SIGTERM: the API and the worker first (bounded),
 * then the services they use, so nothing is left talking to a service that is
 * gone. With NODE_ENV=production the configuration schema refuses to start
 * without MONGODB_URI, REDIS_URL and S3_ENDPOINT, naming each, so no embedded
 * default is ever used there.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs, promisify } from 'node:util';
import { startMongoStandin } from '@media/mongo-standin';
import { ConfigError, loadConfig, type Config } from '@shared/config';
import { createLogger, type Logger } from '@shared/logger';
import { startMongod } from './embedded/mongo';
import { freePort } from './embedded/process';
import { redisServerBinary, startRedisServer } from './embedded/redis';
import { processStartTime } from '@api/dev-state';
import { bootstrapOrganization, DEV_TOKEN_DAYS, mayBootstrap } from './dev-org';
import { buildIfStale } from './build-if-stale';
import { startEnv, startFlags } from './start-scripts';
import { developmentDefaults, PRODUCTION_RATE_LIMIT, type DevDefaults } from './dev-defaults';
import { describeDeath, freePortPreferring, spawnChild, type Child, type Death } from './children';
import {
  processRef,
  readRunningState,
  removeState,
  statePath,
  stopLeftovers,
  writeState,
} from './embedded/state';

/** The database name the embedded MongoDB gets. */
const DATABASE = 'media';
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
      // Not the API's or the worker's port: they are bound after Redis, and the OS may offer the same one.
      let port = await freePort();
      while (port === config.port || port === config.worker.port) port = await freePort();
      const redis = await startRedisServer({ dir, persist: true, ownProcessGroup: true, port });
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
      const mongod = await startMongod({ dbPath, ownProcessGroup: true });
      if (!('reason' in mongod)) {
        started.stops.push(mongod.stop);
        started.env.MONGODB_URI = `${mongod.uri}/${DATABASE}`;
        started.services.mongodb = `embedded mongod (${mongod.binary}) at ${mongod.uri} (data in ${dbPath})`;
      } else {
        logger.info({ reason: mongod.reason }, 'no mongod available for MongoDB');
        const standinDir = join(dataDir, 'mongo-standin');
        const standin = await startMongoStandin({
          logger: logger.child({ component: 'mongodb' }),
          dataDir: standinDir,
        });
        started.stops.push(() => standin.close());
        started.env.MONGODB_URI = `${standin.uri}/${DATABASE}`;
        started.services.mongodb = `in-process STAND-IN at ${standin.uri} (data in ${standinDir}; development only: install mongod or set MONGODB_URI for a real MongoDB)`;
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

/**
 * The API's and the worker's entry points: the production ones, dist/<role>/main.js
 * (`npm start` builds them first); with --from-source, the .ts sources through tsx
 * (the end-to-end test, which does not build).
 */
function entryPoint(role: 'api' | 'worker', fromSource: boolean): { args: string[] } {
  const file = fromSource ? join(ROOT, role, 'main.ts') : join(ROOT, 'dist', role, 'main.js');
  return { args: [...(fromSource ? ['--import', 'tsx'] : []), '--enable-source-maps', file] };
}

/**
 * After an `npm start` that was killed (its state file left behind), before
 * anything serves: `reconcile --fix --older-than 0`, the operator CLI's own
 * repair. Nothing else uses these embedded services at this moment, so
 * whatever has no record now (an upload cut off by the kill, a job's temporary
 * input whose job is gone) is a leftover, never an upload in flight; jobs still
 * queued keep their inputs. A repair that fails is reported and the start goes on.
 */
async function repairAfterKill(
  env: NodeJS.ProcessEnv,
  fromSource: boolean,
  logger: Logger,
): Promise<void> {
  const cli = fromSource
    ? ['--import', 'tsx', join(ROOT, 'api', 'cli.ts')]
    : [join(ROOT, 'dist', 'api', 'cli.js')];
  try {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [...cli, 'reconcile', '--fix', '--older-than', '0'],
      { env: { ...env, LOG_LEVEL: 'warn' }, timeout: 120_000, maxBuffer: 64 * 1024 * 1024 },
    );
    const report = JSON.parse(stdout) as Record<string, unknown>;
    const found = Object.fromEntries(
      [
        'objectsWithoutRecord',
        'recordsWithoutObject',
        'incompleteUploads',
        'deletesInProgress',
        'usageDrift',
      ].map((name) => [name, Array.isArray(report[name]) ? report[name].length : 0]),
    );
    logger.warn(
      { repaired: found },
      'the previous npm start was killed: reconcile --fix repaired what it left behind',
    );
  } catch (err) {
    logger.warn(
      { err },
      'the previous npm start was killed and the repair after it failed: run `npm run cli -- reconcile` to see what it left',
    );
  }
}

function spawnRole(role: 'api' | 'worker', env: NodeJS.ProcessEnv, fromSource: boolean): Child {
  // Node's flags and malloc's tuning as production's start scripts give them (package.json).
  const script = role === 'api' ? 'start:api' : 'start:worker';
  const { args } = entryPoint(role, fromSource);
  const flags = startFlags(script).filter((flag) => !args.includes(flag));
  return spawnChild(role, [...flags, ...args], { ...startEnv(script), ...env });
}

/** Until `url`/healthz answers; a death of any child first fails the start, naming it and its cause. */
async function waitForHealth(
  what: string,
  url: string,
  children: Child[],
  timeoutMs = 60_000,
): Promise<void> {
  let death: Death | undefined;
  for (const c of children) void c.exited.then((d) => (death ??= d));
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (death) throw new StartError(`${describeDeath(death)} during start-up`);
    try {
      const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1_000) });
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    await sleep(200);
  }
  throw new StartError(`the ${what} did not answer ${url}/healthz within ${timeoutMs / 1000} s`);
}

/** What is on and off, and why (the user's setting or a development default). */
function featureLines(apiUrl: string, config: Config, defaults: DevDefaults): string[] {
  const { generated } = defaults;
  const dashboard = config.dashboard;
  return [
    'Features (on by default in development where you set nothing):',
    config.urlSigning
      ? `  signed URLs  on   POST /media/sign (${generated.signingKey ? `key generated into ${generated.signingKey}` : 'URL_SIGNING_KEYS'})`
      : '  signed URLs  off  (set URL_SIGNING_KEYS)',
    dashboard
      ? `  dashboard    on   ${apiUrl}/admin/queues  user ${dashboard.user}  password ${generated.dashboard ? `${dashboard.password}  (generated into ${generated.dashboard})` : '(DASHBOARD_PASSWORD)'}${dashboard.write ? ', actions allowed' : ', read-only'}`
      : '  dashboard    off  (set DASHBOARD_USER and DASHBOARD_PASSWORD to enable /admin/queues)',
    config.metricsToken
      ? `  metrics      on   ${apiUrl}/metrics (METRICS_TOKEN required)`
      : `  metrics      on   ${apiUrl}/metrics (open: METRICS_TOKEN not set)`,
    config.rateLimit
      ? `  rate limit   on   ${config.rateLimit.max} units per ${config.rateLimit.windowMs / 1000} s per token${generated.rateLimit ? ` (development default; production's is ${PRODUCTION_RATE_LIMIT}; RATE_LIMIT_MAX)` : ' (RATE_LIMIT_MAX)'}`
      : '  rate limit   off  (RATE_LIMIT_MAX=0)',
  ];
}

function banner(
  apiUrl: string,
  services: Started['services'],
  config: Config,
  defaults: DevDefaults,
  org: { slug: string; token: string; expiresAt: string } | undefined,
  bootstrapped: boolean,
): string {
  const lines = [
    '',
    `Media storage service is running at ${apiUrl}`,
    `  storage   ${services.storage}`,
    `  mongodb   ${services.mongodb}`,
    `  redis     ${services.redis}`,
    `  docs      ${apiUrl}/docs   (OpenAPI: ${apiUrl}/docs/openapi.yaml)`,
    `  health    ${apiUrl}/readyz   worker http://localhost:${config.worker.port}/readyz`,
    '',
    ...featureLines(apiUrl, config, defaults),
    `  scanning  ${config.scan.clamdUrl ? `clamd at ${config.scan.clamdUrl}, ${config.scan.defaultPolicy}` : 'off (set CLAMD_URL to scan uploads for malware)'}`,
  ];
  if (org) {
    const file = existsSync(SAMPLE_FILE) ? SAMPLE_FILE : 'path/to/photo.jpg';
    lines.push(
      '',
      `Created the development organization "${org.slug}". Its token (shown once, keep it; expires ${org.expiresAt}, in ${DEV_TOKEN_DAYS} days):`,
      `  ${org.token}`,
      '',
      'Upload a file:',
      `  curl -H "Authorization: Bearer ${org.token}" -F "file=@${file}" ${apiUrl}/media/upload`,
    );
  } else {
    lines.push(
      '',
      bootstrapped
        ? 'Organizations already exist. A new one with its token, from another shell:'
        : 'MONGODB_URI is set (or NODE_ENV=production): npm start makes no organization in a database it did not start. One with its token, from another shell:',
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
    try {
      const build = buildIfStale(ROOT);
      if (build.built)
        process.stderr.write(`npm start: built dist/ in ${(build.ms / 1000).toFixed(1)} s\n`);
    } catch (err) {
      throw new StartError((err as Error).message);
    }
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

  // A state file with no launcher running: the last start was killed, not stopped.
  const killedBefore = existsSync(statePath(dataDir));
  const leftovers = await stopLeftovers(dataDir);
  if (leftovers.length)
    logger.warn({ stopped: leftovers }, 'stopped processes left behind by an earlier npm start');

  const defaults = await developmentDefaults(process.env, dataDir);
  const started = await startServices(config, dataDir, logger);
  const env: NodeJS.ProcessEnv = { ...process.env, ...defaults.env, ...started.env };
  if (!process.env.WORKER_PORT || config.worker.port === 0) {
    // Not configured: the default port when free, else any free one (another
    // program on 3001 would make the worker exit with EADDRINUSE). 0 (any
    // port): chosen here, so the launcher knows where to find the worker.
    const port = await freePortPreferring(config.worker.port);
    if (config.worker.port !== 0 && port !== config.worker.port)
      logger.warn(
        { taken: config.worker.port, port },
        `port ${config.worker.port} is taken: the worker listens on ${port} (set WORKER_PORT to choose)`,
      );
    env.WORKER_PORT = String(port);
  }
  const childConfig = loadConfig(env);
  const apiUrl = `http://localhost:${childConfig.port}`;
  const children: Child[] = [];
  let stopping: Promise<number> | undefined;

  const shutdown = async (code: number): Promise<number> => {
    // The children finish their work within their SHUTDOWN_TIMEOUT_MS (a few
    // seconds in development, dev/dev-defaults.ts); past it and a margin they are killed.
    const grace = childConfig.shutdownTimeoutMs + 3_000;
    await Promise.all(
      children.map(async ({ process: child, exited }) => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), grace);
        await exited;
        clearTimeout(timer);
      }),
    );
    // Only then the services they used: nothing is left retrying a Redis that is gone.
    await stopAll(started.stops, logger);
    await removeState(dataDir);
    logger.info('stopped');
    return code;
  };
  let settle: (code: number) => void = () => {};
  const stopped = new Promise<number>((resolve) => (settle = resolve));
  const stop = (code: number): Promise<number> => {
    if (!stopping) {
      stopping = shutdown(code);
      void stopping.then(settle);
    }
    return stopping;
  };
  // Installed before the children start, and `on`, not `once`: a Ctrl-C during
  // start-up, or a second one (npm passing the signal on) while stopping, must
  // not end this process before its children and services are stopped.
  const onSignal = () => {
    if (!stopping)
      process.stderr.write('\nnpm start: stopping (the API and the worker, then the services)\n');
    void stop(0);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    const bootstrapped = mayBootstrap(process.env.NODE_ENV, Boolean(started.env.MONGODB_URI));
    const org = bootstrapped ? await bootstrapOrganization(childConfig, logger) : undefined;
    // Only on services this start owns (embedded): a shared database or bucket may have uploads in flight.
    if (killedBefore && started.env.MONGODB_URI && started.env.REDIS_URL && started.env.STORAGE_DIR)
      await repairAfterKill(env, fromSource, logger);
    if (stopping) return stopping;
    const api = spawnRole('api', env, fromSource);
    const worker = spawnRole('worker', env, fromSource);
    children.push(api, worker);
    await writeState(dataDir, {
      pid: process.pid,
      pidStartTime: processStartTime(process.pid),
      startedAt: new Date().toISOString(),
      apiUrl,
      env: started.env,
      services: started.services,
      // In stopping order: the processes using the services, then the services.
      children: Object.fromEntries(
        Object.entries({
          api: api.process.pid ?? 0,
          worker: worker.process.pid ?? 0,
          ...started.pids,
        }).map(([name, pid]) => [name, processRef(pid)]),
      ),
    });
    await waitForHealth('API', `http://127.0.0.1:${childConfig.port}`, children);
    await waitForHealth('worker', `http://127.0.0.1:${childConfig.worker.port}`, children);
    if (stopping) return stopping;
    process.stdout.write(
      banner(apiUrl, started.services, childConfig, defaults, org, bootstrapped),
    );
  } catch (err) {
    // Stopped by a signal during start-up: the children's deaths are no failure.
    if (stopping) return stopping;
    await stop(1);
    throw err;
  }

  // A child that dies stops the whole stack, loudly, with exit code 1: nothing
  // restarts it (docs/operations.md, "Running without Docker").
  for (const child of children) {
    void child.exited.then((death) => {
      if (stopping) return;
      logger.error(
        { role: death.role, code: death.code, signal: death.signal, cause: death.cause },
        `${describeDeath(death)}; stopping everything`,
      );
      process.stderr.write(
        `\n!! npm start: ${describeDeath(death)}. Stopping everything (exit code 1).\n\n`,
      );
      void stop(1);
    });
  }
  return stopped;
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
