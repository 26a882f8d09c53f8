/**
 * Jest global setup for the integration tier: resolves Redis, S3 storage and
 * MongoDB once per run (see services/*.ts for the order of preference), prints
 * one line per service naming the backend it chose, and hands the endpoints to
 * the test workers through TEST_* environment variables. Each test file then
 * takes its own bucket, queue prefix and database (see context.ts), recorded
 * in TEST_ENV_REGISTRY for the teardown to reconcile.
 */
import { subscribe } from 'node:diagnostics_channel';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolveMongo } from './services/mongo';
import { resolveRedis } from './services/redis';
import { resolveS3 } from './services/s3';
import type { ResolvedService } from './services/types';

declare global {
  var __MEDIA_TEST_SERVICES__: ResolvedService<unknown>[] | undefined;
  var __MEDIA_TEST_SOCKETS__: WeakMap<object, string> | undefined;
}

/**
 * TEST_TRACE_HANDLES=1: records the stack that opened each client socket of
 * the run's own process (cheap: a diagnostics channel), so the teardown can
 * say which test left a connection open. On a 2-core machine jest runs the
 * tests in its own process, and one client left open (a Redis client
 * reconnecting forever once the services stop) keeps the run alive.
 */
function traceSockets(): void {
  const stacks = new WeakMap<object, string>();
  globalThis.__MEDIA_TEST_SOCKETS__ = stacks;
  subscribe('net.client.socket', (message) => {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 60;
    const holder = { stack: '' };
    Error.captureStackTrace(holder);
    Error.stackTraceLimit = limit;
    stacks.set((message as { socket: object }).socket, holder.stack);
  });
}

export default async function globalSetup(): Promise<void> {
  if (process.env.TEST_TRACE_HANDLES) traceSockets();
  const started: ResolvedService<unknown>[] = [];
  globalThis.__MEDIA_TEST_SERVICES__ = started;
  const line = (name: string, backend: string) =>
    process.stdout.write(`[services] ${name}: ${backend}\n`);
  process.stdout.write('\n');
  try {
    // Resolved one after another so a failure names its service and the
    // others already started are torn down by the teardown below.
    const redis = await resolveRedis();
    started.push(redis);
    line('redis', redis.backend);

    const s3 = await resolveS3();
    started.push(s3);
    line('s3', s3.backend);

    const mongo = await resolveMongo();
    started.push(mongo);
    line('mongodb', mongo.backend);

    process.env.TEST_REDIS_URL = redis.value.url;
    process.env.TEST_MONGODB_URI = mongo.value.uri;
    process.env.TEST_S3_ENDPOINT = s3.value.endpoint;
    process.env.TEST_S3_REGION = s3.value.region;
    process.env.TEST_S3_ACCESS_KEY = s3.value.accessKey;
    process.env.TEST_S3_SECRET_KEY = s3.value.secretKey;
    // Where test workers record the environments they make (reconciled by the teardown).
    process.env.TEST_ENV_REGISTRY = mkdtempSync(join(tmpdir(), 'media-test-envs-'));
    process.env.TEST_BACKENDS = JSON.stringify({
      redis: redis.backend,
      s3: s3.backend,
      mongodb: mongo.backend,
    });
  } catch (err) {
    await stopAll(started);
    throw err;
  }
}

export async function stopAll(services: ResolvedService<unknown>[]): Promise<void> {
  for (const service of services.reverse()) {
    try {
      await service.stop();
    } catch (err) {
      process.stderr.write(`[services] failed to stop ${service.backend}: ${String(err)}\n`);
    }
  }
  services.length = 0;
}
