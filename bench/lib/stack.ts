/**
 * The service under test for the benchmarks: one API process and N worker
 * processes over the services `startServices()` resolved, with one bucket,
 * database, queue prefix and organization for the whole run.
 *
 * `dist` mode starts the compiled entry points with the flags
 * `npm run start:api` / `start:worker` use (what production runs); `tsx`
 * mode starts the TypeScript sources the way the end-to-end tests do (no
 * build step; the quick mode uses it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import type { Client } from 'minio';
import { createDataContext, type DataContext } from '../../api/context';
import { loadConfig, type Config } from '../../shared/config';
import { createLogger } from '../../shared/logger';
import { createRedis, type RedisConnection } from '../../shared/queue/redis';
import { createS3Client } from '../../shared/storage/s3-client';
import { S3ObjectStore } from '../../shared/storage/s3-object-store';
import { startEnv, startFlags } from '../../dev/start-scripts';
import { freePort, stopProcess, waitFor } from '../../test/support/services/process';
import type { BenchServices } from '../services';

const root = join(__dirname, '..', '..');

export type LaunchMode = 'dist' | 'tsx';

export interface ServiceProc {
  name: string;
  child: ChildProcess;
  pid: number;
}

export { startEnv, startFlags };

/** Node's flags for a worker, as `npm run start:worker` gives them (Dockerfile.worker too). */
export const WORKER_NODE_FLAGS = startFlags('start:worker');

/** The command line of an API or worker process in the given mode (as package.json's start scripts). */
function commandFor(mode: LaunchMode, role: 'api' | 'worker', apiFlags?: string[]): string[] {
  if (mode === 'tsx') return ['--import', 'tsx', `${role}/main.ts`];
  return role === 'api'
    ? [...(apiFlags ?? startFlags('start:api')), 'dist/api/main.js']
    : [...WORKER_NODE_FLAGS, 'dist/worker/main.js'];
}

export class Stack {
  readonly url: string;
  readonly workers: ServiceProc[] = [];
  private workerEnv: NodeJS.ProcessEnv = {};
  private apiEnv: { env: NodeJS.ProcessEnv; nodeFlags?: string[] | undefined } = { env: {} };

  private constructor(
    readonly mode: LaunchMode,
    readonly env: NodeJS.ProcessEnv,
    readonly config: Config,
    readonly data: DataContext,
    readonly client: Client,
    readonly store: S3ObjectStore,
    public api: ServiceProc,
    readonly token: string,
    readonly organizationId: number,
    readonly organizationSlug: string,
  ) {
    this.url = `http://127.0.0.1:${config.port}`;
  }

  static async start(
    services: BenchServices,
    mode: LaunchMode,
    extraEnv: NodeJS.ProcessEnv,
  ): Promise<Stack> {
    const port = await freePort();
    const env: NodeJS.ProcessEnv = {
      ...services.envFor('bench', port),
      RATE_LIMIT_MAX: '0',
      // One token plays many clients: no cap on its uploads in flight.
      MAX_UPLOADS_IN_FLIGHT: '1000',
      ...extraEnv,
    };
    const config = loadConfig(env);
    const logger = createLogger({ level: 'warn' });
    const data = await createDataContext(config, logger);
    const { token, organization } = await data.organizations.create('bench', 'Bench');
    const client = createS3Client(config.s3!);
    const store = new S3ObjectStore({
      client,
      bucket: config.s3!.bucket,
      region: config.s3!.region,
      publicEndpoint: config.s3!.publicEndpoint,
      logger,
      partSize: config.s3!.partSize,
      singlePutMax: config.s3!.singlePutMax,
      queueSize: config.s3!.uploadConcurrency,
    });
    await store.init();
    const api = spawnService('api', mode, env);
    const stack = new Stack(
      mode,
      env,
      config,
      data,
      client,
      store,
      api,
      token.token,
      organization.id,
      organization.slug,
    );
    await waitFor(
      'API',
      async () => {
        if (api.child.exitCode !== null) throw new Error(`API exited (${api.child.exitCode})`);
        return (await fetch(`${stack.url}/readyz`)).ok;
      },
      60_000,
      100,
    );
    return stack;
  }

  get auth(): Record<string, string> {
    return { Authorization: `Bearer ${this.token}` };
  }

  /**
   * Runs the API with `env` on top of the stack's environment (restarted when
   * it differs), and with `nodeFlags` instead of `npm run start:api`'s when given.
   */
  async setApiEnv(env: NodeJS.ProcessEnv, nodeFlags?: string[]): Promise<void> {
    const wanted = { env, nodeFlags };
    if (JSON.stringify(wanted) === JSON.stringify(this.apiEnv)) return;
    this.apiEnv = wanted;
    await stopProcess(this.api.child, 10_000);
    this.api = spawnService('api', this.mode, { ...this.env, ...env }, nodeFlags);
    await waitFor(
      'API',
      async () => {
        if (this.api.child.exitCode !== null) throw new Error('API exited');
        return (await fetch(`${this.url}/readyz`)).ok;
      },
      60_000,
      100,
    );
  }

  /**
   * Runs exactly `n` worker processes with `env` on top of the stack's
   * environment; workers whose environment differs are replaced.
   */
  async setWorkers(n: number, env: NodeJS.ProcessEnv = {}): Promise<ServiceProc[]> {
    if (JSON.stringify(env) !== JSON.stringify(this.workerEnv)) {
      await this.stopWorkers(0);
      this.workerEnv = env;
    }
    await this.stopWorkers(n);
    const started: { proc: ServiceProc; port: number }[] = [];
    while (this.workers.length < n) {
      const port = await freePort();
      const proc = spawnService(`worker ${this.workers.length + 1}`, this.mode, {
        ...this.env,
        ...env,
        WORKER_PORT: String(port),
      });
      this.workers.push(proc);
      started.push({ proc, port });
    }
    for (const { proc, port } of started) {
      await waitFor(
        proc.name,
        async () => {
          if (proc.child.exitCode !== null) throw new Error(`${proc.name} exited`);
          return (await fetch(`http://127.0.0.1:${port}/readyz`)).ok;
        },
        60_000,
        100,
      );
    }
    return this.workers;
  }

  private async stopWorkers(keep: number): Promise<void> {
    const extra = this.workers.splice(keep);
    await Promise.all(extra.map((w) => stopProcess(w.child, 10_000)));
  }

  /** Removes every object and record so far (between benchmarks: keeps the store's disk small). */
  async clear(): Promise<void> {
    const keys: string[] = [];
    for await (const o of this.store.list('')) keys.push(o.key);
    for (let i = 0; i < keys.length; i += 500) await this.store.removeMany(keys.slice(i, i + 500));
    await this.data.models.Media.deleteMany({});
  }

  /** Stops the processes and removes the bucket, the database and the queue keys. */
  async stop(): Promise<void> {
    await this.stopWorkers(0);
    await stopProcess(this.api.child, 10_000);
    await this.clear().catch(() => undefined);
    await this.client.removeBucket(this.config.s3!.bucket).catch(() => undefined);
    await this.data.connection.dropDatabase().catch(() => undefined);
    await this.data.close();
    const redis = createRedis(this.config.redisUrl!, 'producer', createLogger({ level: 'warn' }));
    try {
      await redis.ping().catch(() => once(redis, 'ready'));
      await deleteKeys(redis, `${this.config.queuePrefix}:*`);
    } finally {
      redis.disconnect();
    }
  }
}

/** Deletes every key matching `pattern` (SCAN, a thousand at a time). */
export async function deleteKeys(redis: RedisConnection, pattern: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    if (keys.length) await redis.del(...keys);
  } while (cursor !== '0');
}

/** Every API and worker process started, killed if the benchmark exits without stopping them. */
const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

function spawnService(
  name: string,
  mode: LaunchMode,
  env: NodeJS.ProcessEnv,
  apiFlags?: string[],
): ServiceProc {
  const role = name === 'api' ? 'api' : 'worker';
  const child = spawn(process.execPath, commandFor(mode, role, apiFlags), {
    cwd: root,
    env: { ...startEnv(role === 'api' ? 'start:api' : 'start:worker'), ...env },
    // Its log (LOG_LEVEL warn: warnings and errors only) goes to the bench's stderr.
    stdio: ['ignore', 2, 2],
  });
  if (child.pid === undefined) throw new Error(`could not start ${name}`);
  running.add(child);
  child.once('exit', () => running.delete(child));
  return { name, child, pid: child.pid };
}
