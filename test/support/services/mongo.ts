/**
 * MongoDB for the tests: MONGODB_URI if set; else a container through
 * testcontainers; else a real `mongod` through mongodb-memory-server (a system
 * binary from MONGOMS_SYSTEM_BINARY or the PATH, or its download where the
 * internet is reachable); else the wire-compatible in-process stand-in
 * (shared/mongo-standin), which speaks the same protocol over TCP.
 */
import { dockerAvailable } from './docker';
import { which } from './process';
import type { ResolvedService } from './types';
import { startMongoStandin } from '../../../shared/mongo-standin/server';

export async function resolveMongo(): Promise<ResolvedService<{ uri: string }>> {
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

  const standin = await startMongoStandin();
  return {
    value: { uri: standin.uri },
    backend: `in-process MongoDB wire stand-in at ${standin.uri} (no Docker engine, no mongod; see docs/mongo-standin.md)`,
    stop: () => standin.close(),
  };
}

/** mongodb-memory-server with a local binary, or its download when allowed and reachable. */
async function tryMemoryServer(): Promise<ResolvedService<{ uri: string }> | undefined> {
  const systemBinary = process.env.MONGOMS_SYSTEM_BINARY || which('mongod');
  const downloadAllowed = !['0', 'false', 'off'].includes(
    (process.env.MONGOMS_RUNTIME_DOWNLOAD ?? 'true').toLowerCase(),
  );
  if (!systemBinary && !downloadAllowed) return undefined;
  if (!systemBinary && !(await reachable('fastdl.mongodb.org'))) {
    process.stdout.write(
      '[services] mongod via mongodb-memory-server skipped: no mongod binary and its download host does not resolve\n',
    );
    return undefined;
  }
  try {
    const { MongoMemoryServer } = await import('mongodb-memory-server-core');
    const create = MongoMemoryServer.create(
      systemBinary ? { binary: { systemBinary } } : undefined,
    );
    const timeout = new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error('timed out after 120 s')), 120_000).unref(),
    );
    const server = await Promise.race([create, timeout]);
    const uri = server.getUri().replace(/\/$/, '');
    return {
      value: { uri },
      backend: `mongod via mongodb-memory-server (${systemBinary ?? 'downloaded binary'}) at ${uri}`,
      stop: async () => void (await server.stop()),
    };
  } catch (err) {
    const reason = err instanceof Error ? err.message.split('\n')[0] : String(err);
    process.stdout.write(`[services] mongod via mongodb-memory-server unavailable: ${reason}\n`);
    return undefined;
  }
}

/** Whether a host name resolves (a cheap "is the internet there" check). */
async function reachable(host: string): Promise<boolean> {
  const { lookup } = await import('node:dns/promises');
  try {
    await lookup(host);
    return true;
  } catch {
    return false;
  }
}

const noop = async () => {};
const redact = (uri: string) => uri.replace(/\/\/([^@/]+)@/, '//[redacted]@');
