/**
 * MongoDB for the tests: MONGODB_URI if set; else a container through
 * testcontainers; else a real `mongod` through mongodb-memory-server (a system
 * binary from MONGOMS_SYSTEM_BINARY or the PATH, or its download where the
 * internet is reachable); else the wire-compatible in-process stand-in
 * (shared/mongo-standin), which speaks the same protocol over TCP.
 */
import { dockerAvailable } from './docker';
import { startMongod } from '../../../shared/embedded/mongo';
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

const noop = async () => {};
const redact = (uri: string) => uri.replace(/\/\/([^@/]+)@/, '//[redacted]@');
