/**
 * A real `mongod` through mongodb-memory-server, when one can be had: a binary
 * from MONGOMS_SYSTEM_BINARY or the PATH, or mongodb-memory-server's download
 * where its host resolves (and MONGOMS_RUNTIME_DOWNLOAD is not off). Used by
 * `npm start` (data kept under DATA_DIR/mongodb) and by the test harness
 * (in memory). Callers fall back to the wire stand-in when this returns
 * `{ reason }`.
 */
import { lookup } from 'node:dns/promises';
import { mkdir } from 'node:fs/promises';
import type { MongoMemoryServer as MemoryServer } from 'mongodb-memory-server-core';
import { which } from './process';

export interface EmbeddedMongod {
  uri: string;
  /** Which binary: a path or "downloaded binary". */
  binary: string;
  stop: () => Promise<void>;
}

export interface MongodOptions {
  /** Keep the data here across restarts (wiredTiger); default: in memory, removed on stop. */
  dbPath?: string;
  /** Give up after this long (a first download can be slow). */
  timeoutMs?: number;
  /**
   * Its own process group (npm start): a Ctrl-C in the terminal then reaches
   * the launcher only, which stops mongod after the processes using it.
   */
  ownProcessGroup?: boolean;
}

export const MONGOD_DOWNLOAD_HOST = 'fastdl.mongodb.org';

export async function startMongod(
  options: MongodOptions = {},
): Promise<EmbeddedMongod | { reason: string }> {
  const systemBinary = process.env.MONGOMS_SYSTEM_BINARY || which('mongod');
  const downloadAllowed = !['0', 'false', 'off'].includes(
    (process.env.MONGOMS_RUNTIME_DOWNLOAD ?? 'true').toLowerCase(),
  );
  if (!systemBinary && !downloadAllowed)
    return { reason: 'no mongod binary and MONGOMS_RUNTIME_DOWNLOAD is off' };
  if (!systemBinary && !(await resolves(MONGOD_DOWNLOAD_HOST)))
    return { reason: `no mongod binary and ${MONGOD_DOWNLOAD_HOST} does not resolve` };
  let MongoMemoryServer: typeof MemoryServer;
  try {
    // A development dependency: loaded only here, so production images never need it.
    ({ MongoMemoryServer } = await import('mongodb-memory-server-core'));
  } catch {
    return { reason: 'mongodb-memory-server-core is not installed (npm install)' };
  }
  if (options.dbPath) await mkdir(options.dbPath, { recursive: true });
  const timeoutMs = options.timeoutMs ?? 120_000;
  let timer: NodeJS.Timeout | undefined;
  try {
    const create = MongoMemoryServer.create({
      ...(systemBinary ? { binary: { systemBinary } } : {}),
      ...(options.ownProcessGroup ? { spawn: { detached: true } } : {}),
      ...(options.dbPath
        ? { instance: { dbPath: options.dbPath, storageEngine: 'wiredTiger' as const } }
        : {}),
    });
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs);
    });
    const server = await Promise.race([create, timeout]);
    return {
      uri: server.getUri().replace(/\/$/, ''),
      binary: systemBinary ?? 'downloaded binary',
      // A persistent dbPath is kept; an in-memory one is removed.
      stop: async () => void (await server.stop({ doCleanup: !options.dbPath })),
    };
  } catch (err) {
    return { reason: err instanceof Error ? (err.message.split('\n')[0] ?? '') : String(err) };
  } finally {
    clearTimeout(timer);
  }
}

/** Whether a host name resolves (a cheap "is the internet there" check). */
async function resolves(host: string): Promise<boolean> {
  try {
    await lookup(host);
    return true;
  } catch {
    return false;
  }
}
