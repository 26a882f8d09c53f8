/**
 * A `redis-server` from the PATH on a free loopback port: the embedded Redis
 * of `npm start` (data kept under DATA_DIR/redis) and of the test harness
 * (a temporary directory, nothing persisted).
 */
import { mkdir } from 'node:fs/promises';
import { Redis } from 'ioredis';
import { freePort, spawn, stopProcess, versionOf, waitFor, which } from './process';

export interface EmbeddedRedis {
  url: string;
  /** e.g. "Redis server v=7.0.15". */
  version: string;
  pid: number | undefined;
  stop: () => Promise<void>;
}

export interface RedisServerOptions {
  /** The data directory (created if missing). */
  dir: string;
  /** Keep data across restarts (append-only file); off for tests. */
  persist: boolean;
  /** Default: a free port. */
  port?: number;
  /**
   * Its own process group (npm start): a Ctrl-C in the terminal then reaches
   * the launcher only, which stops Redis after the processes using it.
   */
  ownProcessGroup?: boolean;
}

/** The redis-server binary on the PATH, or undefined. */
export const redisServerBinary = (): string | undefined => which('redis-server');

export async function startRedisServer(options: RedisServerOptions): Promise<EmbeddedRedis> {
  const binary = redisServerBinary();
  if (!binary) throw new Error('redis-server is not on the PATH');
  await mkdir(options.dir, { recursive: true });
  const port = options.port ?? (await freePort());
  const persistence = options.persist
    ? ['--appendonly', 'yes', '--appendfsync', 'everysec']
    : ['--save', '', '--appendonly', 'no'];
  const child = spawn(
    binary,
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      options.dir,
      // BullMQ needs every key kept (docs/operations.md, "When Redis goes away": queues are not a cache).
      '--maxmemory-policy',
      'noeviction',
      ...persistence,
    ],
    { stdio: 'ignore', detached: options.ownProcessGroup ?? false },
  );
  const url = `redis://127.0.0.1:${port}`;
  const stop = () => stopProcess(child);
  try {
    await waitFor('redis-server', async () => {
      if (child.exitCode !== null) throw new Error(`redis-server exited (${child.exitCode})`);
      const client = new Redis(url, {
        // (probe errors are expected until the server is up)
        lazyConnect: true,
        maxRetriesPerRequest: 0,
        retryStrategy: () => null,
      });
      client.on('error', () => undefined);
      try {
        await client.connect();
        return (await client.ping()) === 'PONG';
      } finally {
        client.disconnect();
      }
    });
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    url,
    version: versionOf(binary).split(' ').slice(0, 3).join(' '),
    pid: child.pid,
    stop,
  };
}
