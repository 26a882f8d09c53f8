/**
 * What an integration test file needs to reach the services the global setup
 * resolved, with names of its own: every call to `isolatedEnv()` gives a
 * fresh bucket, queue prefix and database, so files (and tests) running in
 * parallel never see each other's data.
 */
import { randomBytes } from 'node:crypto';
import { appendFileSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConnectionString } from 'mongodb-connection-string-url';
import { createConnection, type Connection } from 'mongoose';
import {
  ReconcileService,
  type JobInputs,
  type ReconcileReport,
} from '../../api/services/reconcile.service';
import { loadConfig, type Config } from '../../shared/config';
import { createModels, type Models } from '../../shared/db/models';
import { MediaDeletion } from '../../shared/media-deletion';
import { MediaRestore } from '../../shared/media-restore';
import { createRepositories } from '../../shared/repositories';
import { createLogger } from '../../shared/logger';
import { BullJobQueue } from '../../shared/queue/job-queue';
import type { ObjectStore } from '../../shared/storage/object-store';
import { createS3Client } from '../../shared/storage/s3-client';
import { S3ObjectStore } from '../../shared/storage/s3-object-store';
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
    // Deletes are immediate and final in tests (the interface's behaviour); the trash's
    // own tests ask for a retention (test/integration/api/trash.test.ts).
    TRASH_RETENTION_S: '0',
    ...overrides,
  };
  const isolated = { env, config: loadConfig(env), bucket, queuePrefix, dbName };
  // Registered under the names it really uses (an override may point at another environment's).
  registerEnv({
    name,
    bucket: env.S3_BUCKET ?? bucket,
    dbName: new ConnectionString(env.MONGODB_URI ?? mongoUriFor(dbName)).pathname.slice(1),
    queuePrefix: env.QUEUE_PREFIX ?? queuePrefix,
  });
  return isolated;
}

/*
 * Every isolated environment of a run is reconciled at its end (the global
 * teardown), so a test that leaves an object without a record, a record
 * without its object or an open multipart upload fails the run. The jest
 * workers are separate processes: each appends the environments it makes to
 * a file in TEST_ENV_REGISTRY (a directory the global setup made), and
 * helpers that wipe an environment when a file is done (startApi's close)
 * first record what they would have wiped in the same directory.
 */

/** One environment as the registry keeps it. */
export interface RegisteredEnv {
  name: string;
  bucket: string;
  dbName: string;
  queuePrefix: string;
  /** The test file that made it. */
  testPath: string | null;
}

/** What a reconciliation found in one environment. */
export interface EnvFinding {
  env: RegisteredEnv;
  /** When it was found: when its helper closed it, or at the end of the run. */
  when: 'close' | 'teardown';
  report?: ReconcileReport;
  /** Records left in a database whose bucket is gone. */
  recordsWithoutBucket?: number;
}

function registryDir(): string | undefined {
  return process.env.TEST_ENV_REGISTRY || undefined;
}

function currentTestPath(): string | null {
  const state = (globalThis as { expect?: { getState?: () => { testPath?: string } } }).expect;
  return state?.getState?.().testPath ?? null;
}

function registerEnv(env: Omit<RegisteredEnv, 'testPath'>): void {
  const dir = registryDir();
  if (!dir) return;
  const entry: RegisteredEnv = { ...env, testPath: currentTestPath() };
  appendFileSync(join(dir, `envs-${process.pid}.jsonl`), `${JSON.stringify(entry)}\n`);
}

/**
 * Reconciles a store and its records as they are, sparing nothing and fixing
 * nothing. (The cutoff is a minute ahead: storage may round an object's time
 * up to the next second.)
 */
export function reconcileNow(store: ObjectStore, models: Models, jobs: JobInputs | undefined) {
  const { media, usage, events, folders } = createRepositories(models);
  const logger = createLogger({ level: 'silent' });
  const deletion = new MediaDeletion({ media, usage, store, events, logger });
  const restore = new MediaRestore({ media, folders, events });
  return new ReconcileService({ store, media, usage, deletion, restore, jobs }).run({
    olderThanMs: 0,
    now: new Date(Date.now() + 60_000),
    fix: false,
    // Tests that clean their database by hand leave the usage counters behind on purpose;
    // this check is about objects and records.
    checkUsage: false,
  });
}

/**
 * For helpers that wipe an environment when a test file is done: reconciles
 * it first and records what it found for the global teardown, which fails the
 * run. Never throws (the wipe must go on).
 */
export async function recordOrphansBeforeWipe(
  env: Pick<IsolatedEnv, 'bucket' | 'dbName' | 'queuePrefix'>,
  store: ObjectStore,
  models: Models,
  jobs?: JobInputs,
): Promise<void> {
  const dir = registryDir();
  if (!dir) return;
  const entry: RegisteredEnv = {
    name: env.bucket,
    bucket: env.bucket,
    dbName: env.dbName,
    queuePrefix: env.queuePrefix,
    testPath: currentTestPath(),
  };
  let finding: EnvFinding;
  try {
    const report = await reconcileNow(store, models, jobs);
    if (report.clean) return;
    finding = { env: entry, when: 'close', report };
  } catch (err) {
    // Storage or MongoDB cut by the test itself: the end of the run looks again.
    process.stderr.write(
      `[reconcile] could not reconcile ${env.bucket} on close: ${String(err)}\n`,
    );
    return;
  }
  writeFileSync(
    join(dir, `finding-${env.bucket}-${uniqueSuffix(3)}.json`),
    JSON.stringify(finding),
  );
}

/**
 * Reconciles every environment the run's test files made (global teardown):
 * what their helpers recorded when wiping them, and whatever is still in their
 * buckets and databases now.
 */
export async function reconcileRegisteredEnvs(dir: string): Promise<EnvFinding[]> {
  const files = readdirSync(dir);
  const findings: EnvFinding[] = files
    .filter((f) => f.startsWith('finding-'))
    .map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')) as EnvFinding);
  const envs = new Map<string, RegisteredEnv>();
  for (const f of files.filter((name) => name.startsWith('envs-'))) {
    for (const line of readFileSync(join(dir, f), 'utf8').split('\n')) {
      if (!line) continue;
      const env = JSON.parse(line) as RegisteredEnv;
      envs.set(`${env.bucket} ${env.dbName}`, env);
    }
  }
  if (envs.size === 0) return findings;

  const s3 = s3Endpoint();
  const client = createS3Client(s3);
  const base: Connection = await createConnection(mongoUriFor('admin')).asPromise();
  try {
    for (const env of envs.values()) {
      const db = base.useDb(env.dbName, { useCache: false });
      const models = createModels(db);
      if (!(await client.bucketExists(env.bucket))) {
        const records = await models.Media.countDocuments().exec();
        if (records > 0) findings.push({ env, when: 'teardown', recordsWithoutBucket: records });
        continue;
      }
      const store = new S3ObjectStore({
        client,
        bucket: env.bucket,
        region: s3.region,
        publicEndpoint: s3.endpoint,
        logger: createLogger({ level: 'silent' }),
      });
      const queue = new BullJobQueue(
        { redisUrl: redisUrl(), queuePrefix: env.queuePrefix },
        createLogger({ level: 'silent' }),
      );
      try {
        const report = await reconcileNow(store, models, queue);
        if (!report.clean) findings.push({ env, when: 'teardown', report });
      } finally {
        await queue.close();
      }
    }
  } finally {
    await base.close();
  }
  return findings;
}

/** A few lines per finding, for the end of the run. */
export function describeFindings(findings: EnvFinding[]): string {
  return findings
    .map((f) => {
      const where = `${f.env.testPath ?? '(unknown file)'}: bucket ${f.env.bucket}, database ${f.env.dbName} (found at ${f.when})`;
      if (f.recordsWithoutBucket) {
        return `${where}\n  ${f.recordsWithoutBucket} media record(s) left in a database whose bucket is gone`;
      }
      const r = f.report!;
      const lines = [
        ...r.objectsWithoutRecord.map(
          (o) => `  object without record: ${o.key}${o.temporary ? ' (temporary input)' : ''}`,
        ),
        ...r.recordsWithoutObject.map((o) => `  record without object: #${o.id} ${o.key}`),
        ...r.incompleteUploads.map((u) => `  open multipart upload: ${u.key} (${u.uploadId})`),
      ];
      return `${where}\n${lines.join('\n')}`;
    })
    .join('\n');
}
