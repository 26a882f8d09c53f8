/**
 * MongoDB for the tests: MONGODB_URI if set; else a container through
 * testcontainers; else a real `mongod` through mongodb-memory-server (a system
 * binary from MONGOMS_SYSTEM_BINARY or the PATH, or its download where the
 * internet is reachable); else the wire-compatible in-process stand-in
 * (the @media/mongo-standin package, dev/mongo-standin), which speaks the same
 * protocol over TCP.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { startMongoStandin } from '@media/mongo-standin';
import { dockerAvailable } from './docker';
import { startMongod } from '../../../dev/embedded/mongo';
import type { ResolvedService } from './types';
import { stopProcess } from './process';

export interface ResolveMongoOptions {
  /**
   * Where the stand-in runs when it is the fallback: inside this process (the
   * tests), or as its own process like a mongod (the benchmarks, so that the
   * database's CPU is not the benchmark client's).
   */
  standin?: 'in-process' | 'process';
}

export async function resolveMongo(
  options: ResolveMongoOptions = {},
): Promise<ResolvedService<{ uri: string }>> {
  const fromEnv = process.env.MONGODB_URI;
  if (fromEnv) {
    return { value: { uri: fromEnv }, backend: `MONGODB_URI (${redact(fromEnv)})`, stop: noop };
  }
  if (await dockerAvailable()) {
    const { GenericContainer, Wait } = await import('testcontainers');
    const image = 'mongo:7.0';
    const container = await new GenericContainer(image)
      .withExposedPorts(27017)
      .withWaitStrategy(Wait.forLogMessage(/Waiting for connections/))
      .start();
    const uri = `mongodb://${container.getHost()}:${container.getMappedPort(27017)}`;
    return {
      value: { uri },
      backend: `testcontainers ${image} at ${uri}`,
      stop: async () => void (await container.stop()),
    };
  }
  const memoryServer = await tryMemoryServer();
  if (memoryServer) return memoryServer;

  if (options.standin === 'process') return startStandinProcess();
  const standin = await startMongoStandin();
  return {
    value: { uri: standin.uri },
    backend: `in-process MongoDB wire stand-in at ${standin.uri} (no Docker engine, no mongod; see dev/mongo-standin/README.md)`,
    stop: () => standin.close(),
  };
}

/** mongodb-memory-server with a local binary, or its download when allowed and reachable. */
async function tryMemoryServer(): Promise<ResolvedService<{ uri: string }> | undefined> {
  const mongod = await startMongod();
  if ('reason' in mongod) {
    process.stdout.write(`[services] mongod via mongodb-memory-server skipped: ${mongod.reason}\n`);
    return undefined;
  }
  return {
    value: { uri: mongod.uri },
    backend: `mongod via mongodb-memory-server (${mongod.binary}) at ${mongod.uri}`,
    stop: mongod.stop,
  };
}

/** The `mongo-standin` command as a child process on a free port; its first line of output is its URI. */
async function startStandinProcess(): Promise<ResolvedService<{ uri: string }>> {
  const command = require.resolve('@media/mongo-standin/bin/mongo-standin.js');
  const child = spawn(
    process.execPath,
    [command, '--port', '0'],
    // The IPC channel ties its life to this process's: it stops when the channel closes.
    {
      env: { ...process.env, LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
    },
  );
  const lines = createInterface({ input: child.stdout! });
  const [uri] = (await Promise.race([
    once(lines, 'line'),
    once(child, 'exit').then(([code]) => {
      throw new Error(`the MongoDB stand-in exited (${String(code)}) before printing its URI`);
    }),
  ])) as [string];
  child.unref();
  child.channel?.unref();
  return {
    value: { uri },
    backend: `MongoDB wire stand-in process (pid ${child.pid}) at ${uri} (no Docker engine, no mongod; see dev/mongo-standin/README.md)`,
    stop: () => stopProcess(child),
  };
}

const noop = async () => {};
const redact = (uri: string) => uri.replace(/\/\/([^@/]+)@/, '//[redacted]@');
