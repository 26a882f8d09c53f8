/**
 * Redis for the tests: REDIS_URL if set; else a container through
 * testcontainers when a Docker engine answers; else a `redis-server` from the
 * PATH on a free port with a temporary directory.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { dockerAvailable } from './docker';
import { freePort, spawn, stopProcess, versionOf, waitFor, which } from './process';
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
  const binary = which('redis-server');
  if (!binary) {
    throw new Error(
      'No Redis for the tests: set REDIS_URL, run a Docker engine, or install redis-server (apt-get install redis-server)',
    );
  }
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'media-test-redis-'));
  const child = spawn(
    binary,
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--dir',
      dir,
    ],
    { stdio: 'ignore' },
  );
  const url = `redis://127.0.0.1:${port}`;
  const stop = async () => {
    await stopProcess(child);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await waitFor('redis-server', async () => {
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
    value: { url },
    backend: `${versionOf(binary).split(' ').slice(0, 3).join(' ')} started at ${url}`,
    stop,
  };
}

const noop = async () => {};
const redact = (url: string) => url.replace(/\/\/[^@/]*@/, '//[redacted]@');
