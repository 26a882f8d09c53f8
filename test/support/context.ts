/**
 * What an integration test file needs to reach the services the global setup
 * resolved, with names of its own: every call to `isolatedEnv()` gives a
 * fresh bucket, queue prefix and database, so files (and tests) running in
 * parallel never see each other's data.
 */
import { randomBytes } from 'node:crypto';
import { ConnectionString } from 'mongodb-connection-string-url';
import { loadConfig, type Config } from '../../shared/config';
import type { S3Endpoint } from './services/types';

function required(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(
      `${name} is not set: integration tests must run under the jest "integration" project, whose global setup resolves the services`,
    );
  }
  return value;
}

/** A short random suffix, lower-case so it is valid in bucket names. */
export function uniqueSuffix(bytes = 5): string {
  return randomBytes(bytes).toString('hex');
}

/** `prefix-<random>`, lower-case, valid as an S3 bucket, queue prefix or database name. */
export function uniqueName(prefix: string): string {
  return `${prefix.toLowerCase().replace(/[^a-z0-9-]/g, '-')}-${uniqueSuffix()}`;
}

export function redisUrl(): string {
  return required('TEST_REDIS_URL');
}

export function s3Endpoint(): S3Endpoint {
  return {
    endpoint: required('TEST_S3_ENDPOINT'),
    region: required('TEST_S3_REGION'),
    accessKey: required('TEST_S3_ACCESS_KEY'),
    secretKey: required('TEST_S3_SECRET_KEY'),
  };
}

/** A full MongoDB URI for the resolved backend, pointing at database `dbName`. */
export function mongoUriFor(dbName: string): string {
  const cs = new ConnectionString(required('TEST_MONGODB_URI'));
  cs.pathname = `/${dbName}`;
  return cs.toString();
}

export function backends(): Record<'redis' | 's3' | 'mongodb', string> {
  return JSON.parse(required('TEST_BACKENDS')) as Record<'redis' | 's3' | 'mongodb', string>;
}

export interface IsolatedEnv {
  /** Environment variables for `loadConfig` or for a child process. */
  env: NodeJS.ProcessEnv;
  config: Config;
  bucket: string;
  queuePrefix: string;
  dbName: string;
}

/** Configuration pointing at the test services with a fresh bucket, queue prefix and database. */
export function isolatedEnv(name = 'test', overrides: NodeJS.ProcessEnv = {}): IsolatedEnv {
  const suffix = uniqueSuffix();
  const base =
    name
      .toLowerCase()
      .replace(/[^a-z0-9]/g, '')
      .slice(0, 20) || 'test';
  const bucket = `t-${base}-${suffix}`;
  const queuePrefix = `t-${base}-${suffix}`;
  const dbName = `t_${base}_${suffix}`;
  const s3 = s3Endpoint();
  const env: NodeJS.ProcessEnv = {
    NODE_ENV: 'test',
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'silent',
    PORT: '0',
    MONGODB_URI: mongoUriFor(dbName),
    REDIS_URL: redisUrl(),
    QUEUE_PREFIX: queuePrefix,
    S3_ENDPOINT: s3.endpoint,
    S3_REGION: s3.region,
    S3_ACCESS_KEY: s3.accessKey,
    S3_SECRET_KEY: s3.secretKey,
    S3_BUCKET: bucket,
    ...overrides,
  };
  return { env, config: loadConfig(env), bucket, queuePrefix, dbName };
}
