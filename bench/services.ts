/**
 * Services for benchmarks: the same resolution as the test harness (URLs from
 * the environment, containers, or local processes), so a benchmark runs on any
 * machine the tests run on.
 */
import { randomBytes } from 'node:crypto';
import { resolveMongo } from '../test/support/services/mongo';
import { resolveRedis } from '../test/support/services/redis';
import { resolveS3 } from '../test/support/services/s3';
import type { ResolvedService, S3Endpoint } from '../test/support/services/types';

export interface BenchServices {
  redisUrl: string;
  mongoUri: string;
  s3: S3Endpoint;
  /**
   * The environment of an API or worker on these services with a fresh
   * database, bucket and queue prefix named after `name` (plus a random suffix).
   */
  envFor(name: string, port: number): NodeJS.ProcessEnv;
  describe(): string;
  stop(): Promise<void>;
}

export async function startServices(): Promise<BenchServices> {
  const started: ResolvedService<unknown>[] = [];
  const redis = await resolveRedis();
  started.push(redis);
  const s3 = await resolveS3();
  started.push(s3);
  const mongo = await resolveMongo({ standin: 'process' });
  started.push(mongo);
  return {
    redisUrl: redis.value.url,
    mongoUri: mongo.value.uri,
    s3: s3.value,
    envFor: (name, port) => {
      const suffix = randomBytes(4).toString('hex');
      return {
        ...process.env,
        NODE_ENV: 'development',
        LOG_LEVEL: 'warn',
        PORT: String(port),
        MONGODB_URI: `${mongo.value.uri}/${name.replace(/-/g, '_')}_${suffix}`,
        REDIS_URL: redis.value.url,
        QUEUE_PREFIX: `${name}-${suffix}`,
        S3_ENDPOINT: s3.value.endpoint,
        S3_REGION: s3.value.region,
        S3_ACCESS_KEY: s3.value.accessKey,
        S3_SECRET_KEY: s3.value.secretKey,
        S3_BUCKET: `${name}-${suffix}`,
      };
    },
    describe: () => `redis: ${redis.backend}\ns3: ${s3.backend}\nmongodb: ${mongo.backend}`,
    stop: async () => {
      for (const s of started.reverse()) await s.stop().catch(() => undefined);
    },
  };
}

/** Runs a benchmark's main, printing a failure's stack, then exits (children and services are its to stop). */
export function runBenchmark(main: () => Promise<void>): void {
  // Interrupted: exit through process.exit, so 'exit' handlers stop the children.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => process.exit(signal === 'SIGINT' ? 130 : 143));
  }
  main().then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
}
