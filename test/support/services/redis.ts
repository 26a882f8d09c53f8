/**
 * Redis for the tests: REDIS_URL if set; else a container through
 * testcontainers when a Docker engine answers; else a `redis-server` from the
 * PATH on a free port with a temporary directory.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { redisServerBinary, startRedisServer } from '../../../dev/embedded/redis';
import { dockerAvailable } from './docker';
import type { ResolvedService } from './types';

export async function resolveRedis(): Promise<ResolvedService<{ url: string }>> {
  const fromEnv = process.env.REDIS_URL;
  if (fromEnv) {
    return { value: { url: fromEnv }, backend: `REDIS_URL (${redact(fromEnv)})`, stop: noop };
  }
  if (await dockerAvailable()) {
    const { GenericContainer, Wait } = await import('testcontainers');
    const container = await new GenericContainer('redis:7.4-alpine')
      .withExposedPorts(6379)
      .withWaitStrategy(Wait.forLogMessage('Ready to accept connections'))
      .start();
    const url = `redis://${container.getHost()}:${container.getMappedPort(6379)}`;
    return {
      value: { url },
      backend: `testcontainers redis:7.4-alpine at ${url}`,
      stop: async () => void (await container.stop()),
    };
  }
  if (!redisServerBinary()) {
    throw new Error(
      'No Redis for the tests: set REDIS_URL, run a Docker engine, or install redis-server (apt-get install redis-server)',
    );
  }
  const dir = await mkdtemp(join(tmpdir(), 'media-test-redis-'));
  try {
    const redis = await startRedisServer({ dir, persist: false });
    return {
      value: { url: redis.url },
      backend: `${redis.version} started at ${redis.url}`,
      stop: async () => {
        await redis.stop();
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

const noop = async () => {};
const redact = (url: string) => url.replace(/\/\/[^@/]*@/, '//[redacted]@');
