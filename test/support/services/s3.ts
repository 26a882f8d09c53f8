/**
 * S3 storage for the tests: S3_ENDPOINT (+ keys) if set; else a MinIO
 * container through testcontainers; else a `minio` binary from the PATH; else
 * OpenStack Swift with its s3api middleware from Debian's packages (the
 * @media/swift-s3 package, dev/swift-s3).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSwift, swiftAvailable } from '@media/swift-s3';
import { dockerAvailable } from './docker';
import { freePort, spawn, stopProcess, waitFor, which } from './process';
import type { ResolvedService, S3Endpoint } from './types';

const MINIO_USER = 'minioadmin';
const MINIO_PASSWORD = 'minioadmin-secret';

export async function resolveS3(): Promise<ResolvedService<S3Endpoint>> {
  const endpoint = process.env.S3_ENDPOINT;
  if (endpoint) {
    const accessKey = process.env.S3_ACCESS_KEY;
    const secretKey = process.env.S3_SECRET_KEY;
    if (!accessKey || !secretKey) {
      throw new Error('S3_ENDPOINT is set but S3_ACCESS_KEY or S3_SECRET_KEY is not');
    }
    return {
      value: { endpoint, accessKey, secretKey, region: process.env.S3_REGION || 'us-east-1' },
      backend: `S3_ENDPOINT (${endpoint})`,
      stop: async () => {},
    };
  }
  if (await dockerAvailable()) {
    const { GenericContainer, Wait } = await import('testcontainers');
    const image = 'minio/minio:RELEASE.2025-04-22T22-12-26Z';
    const container = await new GenericContainer(image)
      .withCommand(['server', '/data'])
      .withEnvironment({ MINIO_ROOT_USER: MINIO_USER, MINIO_ROOT_PASSWORD: MINIO_PASSWORD })
      .withExposedPorts(9000)
      .withWaitStrategy(Wait.forHttp('/minio/health/live', 9000))
      .start();
    const url = `http://${container.getHost()}:${container.getMappedPort(9000)}`;
    return {
      value: {
        endpoint: url,
        accessKey: MINIO_USER,
        secretKey: MINIO_PASSWORD,
        region: 'us-east-1',
      },
      backend: `testcontainers ${image} at ${url}`,
      stop: async () => void (await container.stop()),
    };
  }
  const minio = which('minio');
  if (minio) return startMinioBinary(minio);
  if (swiftAvailable()) {
    const started = Date.now();
    const swift = await startSwift();
    return {
      value: swift,
      backend: `OpenStack Swift s3api (Debian packages) started at ${swift.endpoint} in ${((Date.now() - started) / 1000).toFixed(1)} s`,
      stop: () => swift.stop(),
    };
  }
  throw new Error(
    'No S3 storage for the tests: set S3_ENDPOINT/S3_ACCESS_KEY/S3_SECRET_KEY, run a Docker engine, put a minio binary on the PATH, or install OpenStack Swift (apt-get install swift swift-proxy swift-account swift-container swift-object memcached)',
  );
}

async function startMinioBinary(binary: string): Promise<ResolvedService<S3Endpoint>> {
  const port = await freePort();
  const consolePort = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'media-test-minio-'));
  const child = spawn(
    binary,
    [
      'server',
      dir,
      '--address',
      `127.0.0.1:${port}`,
      '--console-address',
      `127.0.0.1:${consolePort}`,
    ],
    {
      stdio: 'ignore',
      env: { ...process.env, MINIO_ROOT_USER: MINIO_USER, MINIO_ROOT_PASSWORD: MINIO_PASSWORD },
    },
  );
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    await stopProcess(child);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await waitFor('minio', async () => (await fetch(`${url}/minio/health/live`)).ok);
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    value: { endpoint: url, accessKey: MINIO_USER, secretKey: MINIO_PASSWORD, region: 'us-east-1' },
    backend: `minio binary (${binary}) started at ${url}`,
    stop,
  };
}
