/**
 * The one configuration schema. Parsed once from the environment, validated,
 * typed and cached; a bad value stops start-up with a message naming the
 * variable. Every variable is listed in `.env.example` and the README (a test
 * keeps the three in step).
 */
import { z } from 'zod';

const MB = 1024 * 1024;

/** Every type the service can store (detected from bytes); ACCEPTED_TYPES may narrow it. SVG never. */
export const ACCEPTABLE_TYPES: readonly string[] = [
  'image/jpeg',
  'image/png',
  'image/webp',
  'image/gif',
  'image/avif',
  'image/tiff',
  'image/heic',
  'image/heif',
  'application/pdf',
];

/** Queue names an operator may list in WORKER_QUEUES (see shared/jobs). */
export const QUEUE_NAMES = ['image', 'pdf', 'maintenance'] as const;
export type QueueName = (typeof QUEUE_NAMES)[number];

const emptyToUndefined = (v: unknown): unknown =>
  typeof v === 'string' && v.trim() === '' ? undefined : v;

const optionalString = z.preprocess(emptyToUndefined, z.string().optional());
const optionalUrl = (protocols: readonly string[]) =>
  z.preprocess(
    emptyToUndefined,
    z
      .string()
      .url()
      .refine((v) => protocols.some((p) => v.startsWith(`${p}:`)), {
        message: `must be a ${protocols.join(' or ')} URL`,
      })
      .optional(),
  );
const int = (def: number, min = 1, max = Number.MAX_SAFE_INTEGER) =>
  z.preprocess(emptyToUndefined, z.coerce.number().int().min(min).max(max).default(def));

const concurrency = z.preprocess(
  emptyToUndefined,
  z
    .string()
    .default('2')
    .transform((raw, ctx) => parseConcurrency(raw, ctx)),
);

/** `2` (every queue) or `image=1,pdf=4` (per queue; unnamed queues get 1). */
function parseConcurrency(raw: string, ctx: z.RefinementCtx): Record<QueueName, number> {
  const result = Object.fromEntries(QUEUE_NAMES.map((q) => [q, 1])) as Record<QueueName, number>;
  const fail = (message: string) => {
    ctx.addIssue({ code: 'custom', message });
    return z.NEVER;
  };
  if (/^\d+$/.test(raw.trim())) {
    const n = Number(raw);
    if (n < 1 || n > 64) return fail('must be between 1 and 64');
    for (const q of QUEUE_NAMES) result[q] = n;
    return result;
  }
  for (const entry of raw.split(',')) {
    const [name, value] = entry.split('=').map((s) => s.trim());
    if (!isQueueName(name))
      return fail(`unknown queue "${name ?? ''}" (known: ${QUEUE_NAMES.join(', ')})`);
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1 || n > 64)
      return fail(`concurrency for "${name}" must be an integer between 1 and 64`);
    result[name] = n;
  }
  return result;
}

function isQueueName(v: string | undefined): v is QueueName {
  return (QUEUE_NAMES as readonly string[]).includes(v ?? '');
}

/**
 * Express's `trust proxy` setting: `false` (default: the socket's address
 * counts), `true`, a hop count, or a comma-separated list of addresses,
 * subnets and the names `loopback`, `linklocal`, `uniquelocal`.
 */
export type TrustProxy = boolean | number | string[];

function parseTrustProxy(raw: string, ctx: z.RefinementCtx): TrustProxy {
  const v = raw.trim().toLowerCase();
  if (v === 'false' || v === '0') return false;
  if (v === 'true') return true;
  if (/^\d+$/.test(v)) return Number(v);
  const entries = raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const named = new Set(['loopback', 'linklocal', 'uniquelocal']);
  const bad = entries.filter((e) => !named.has(e) && !/^[0-9A-Fa-f:.]+(\/\d{1,3})?$/.test(e));
  if (bad.length > 0) {
    ctx.addIssue({
      code: 'custom',
      message: `must be true, false, a hop count or a list of addresses/subnets/loopback/linklocal/uniquelocal (not: ${bad.join(', ')})`,
    });
    return z.NEVER;
  }
  return entries;
}

const queues = z.preprocess(
  emptyToUndefined,
  z
    .string()
    .default(QUEUE_NAMES.join(','))
    .transform((raw, ctx) => {
      const names = raw
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean);
      for (const n of names) {
        if (!isQueueName(n)) {
          ctx.addIssue({
            code: 'custom',
            message: `unknown queue "${n}" (known: ${QUEUE_NAMES.join(', ')})`,
          });
          return z.NEVER;
        }
      }
      if (names.length === 0) {
        ctx.addIssue({ code: 'custom', message: 'must name at least one queue' });
        return z.NEVER;
      }
      return [...new Set(names)] as QueueName[];
    }),
);

const variables = z.object({
  NODE_ENV: z.preprocess(
    emptyToUndefined,
    z.enum(['development', 'test', 'production']).default('development'),
  ),
  LOG_LEVEL: z.preprocess(
    emptyToUndefined,
    z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  ),
  PORT: int(3000, 0, 65535),
  WORKER_PORT: int(3001, 0, 65535),
  METRICS_TOKEN: optionalString,
  TRUST_PROXY: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .default('false')
      .transform((raw, ctx) => parseTrustProxy(raw, ctx)),
  ),
  PUBLIC_BASE_URL: optionalUrl(['http', 'https']),
  MONGODB_URI: optionalUrl(['mongodb', 'mongodb+srv']),
  REDIS_URL: optionalUrl(['redis', 'rediss']),
  QUEUE_PREFIX: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .regex(/^[A-Za-z0-9_-]+$/, 'letters, digits, _ and - only')
      .default('media'),
  ),
  S3_ENDPOINT: optionalUrl(['http', 'https']),
  // The endpoint clients see, when it is not S3_ENDPOINT (merged PDFs' `name` is an object address).
  S3_PUBLIC_ENDPOINT: optionalUrl(['http', 'https']),
  S3_REGION: z.preprocess(emptyToUndefined, z.string().default('us-east-1')),
  S3_ACCESS_KEY: optionalString,
  S3_SECRET_KEY: optionalString,
  S3_BUCKET: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, 'must be a valid S3 bucket name')
      .default('media'),
  ),
  // 8 MiB: the part size measured best within the memory targets (docs/performance.md).
  S3_PART_SIZE: int(8 * MB, 5 * MB, 5 * 1024 * MB),
  S3_UPLOAD_CONCURRENCY: int(2, 1, 16),
  DATA_DIR: z.preprocess(emptyToUndefined, z.string().default('./.data')),
  STORAGE_DIR: optionalString,
  MAX_FILE_SIZE: int(100 * MB),
  MAX_FILES: int(20),
  MAX_BASE64_SIZE: int(20 * MB),
  MAX_MERGE_INPUTS: int(50),
  MAX_INPUT_PIXELS: int(100_000_000),
  ACCEPTED_TYPES: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .default(ACCEPTABLE_TYPES.join(','))
      .transform((raw, ctx) => {
        const types = [
          ...new Set(
            raw
              .split(',')
              .map((s) => s.trim().toLowerCase())
              .filter(Boolean),
          ),
        ];
        const unknown = types.filter((t) => !ACCEPTABLE_TYPES.includes(t));
        if (unknown.length || types.length === 0) {
          ctx.addIssue({
            code: 'custom',
            message: `must list types from: ${ACCEPTABLE_TYPES.join(', ')}${unknown.length ? ` (unknown: ${unknown.join(', ')})` : ''}`,
          });
          return z.NEVER;
        }
        return types;
      }),
  ),
  JOB_WAIT_MS: int(30_000, 100),
  WORKER_QUEUES: queues,
  JOB_LOCK_MS: int(30_000, 1_000),
  WORKER_CONCURRENCY: concurrency,
  SHUTDOWN_TIMEOUT_MS: int(25_000, 100),
  DASHBOARD_USER: optionalString,
  DASHBOARD_PASSWORD: optionalString,
  RATE_LIMIT_MAX: int(600, 0),
  RATE_LIMIT_WINDOW_MS: int(60_000, 1_000, 24 * 60 * 60_000),
  AUTH_FAILURE_LIMIT: int(30, 0),
});

const schema = variables.superRefine((env, ctx) => {
  const s3Keys = ['S3_ACCESS_KEY', 'S3_SECRET_KEY'] as const;
  if (env.S3_ENDPOINT) {
    for (const key of s3Keys) {
      if (!env[key]) {
        ctx.addIssue({
          code: 'custom',
          path: [key],
          message: 'is required when S3_ENDPOINT is set',
        });
      }
    }
  }
  if (Boolean(env.DASHBOARD_USER) !== Boolean(env.DASHBOARD_PASSWORD)) {
    ctx.addIssue({
      code: 'custom',
      path: [env.DASHBOARD_USER ? 'DASHBOARD_PASSWORD' : 'DASHBOARD_USER'],
      message:
        'DASHBOARD_USER and DASHBOARD_PASSWORD are set together (or neither, to disable the dashboard)',
    });
  }
  if (env.NODE_ENV === 'production') {
    // Production never falls back to an embedded default (docs/operations.md, "Running without Docker").
    for (const key of ['MONGODB_URI', 'REDIS_URL', 'S3_ENDPOINT'] as const) {
      if (!env[key]) {
        ctx.addIssue({
          code: 'custom',
          path: [key],
          message:
            'is required when NODE_ENV=production (embedded defaults are for development only)',
        });
      }
    }
  }
});

type Parsed = z.infer<typeof schema>;

export interface Config {
  nodeEnv: Parsed['NODE_ENV'];
  logLevel: Parsed['LOG_LEVEL'];
  port: number;
  /** Bearer token GET /metrics requires (API and worker); undefined leaves it open (internal networks only). */
  metricsToken: string | undefined;
  /** Express's `trust proxy`: which forwarded client addresses count (records' `metaData.ipAddress`). */
  trustProxy: TrustProxy;
  /** Base of the `url` field of records; defaults to http://localhost:<port>. */
  publicBaseUrl: string;
  mongodbUri: string | undefined;
  redisUrl: string | undefined;
  queuePrefix: string;
  s3:
    | {
        endpoint: string;
        /** The endpoint as clients see it (object addresses); S3_PUBLIC_ENDPOINT, else `endpoint`. */
        publicEndpoint: string;
        region: string;
        accessKey: string;
        secretKey: string;
        bucket: string;
        /** Bytes per multipart part (S3's minimum is 5 MiB). */
        partSize: number;
        /** Parts of one upload in flight at once. */
        uploadConcurrency: number;
      }
    | undefined;
  bucket: string;
  /** Where `npm start` keeps its embedded services' data and state file (development). */
  dataDir: string;
  /** Root of the file-system object store (used when S3_ENDPOINT is not set); default DATA_DIR/storage. */
  storageDir: string;
  limits: {
    maxFileSize: number;
    maxFiles: number;
    maxBase64Size: number;
    maxMergeInputs: number;
    maxInputPixels: number;
    acceptedTypes: string[];
  };
  jobWaitMs: number;
  worker: {
    queues: QueueName[];
    concurrency: Record<QueueName, number>;
    /** How long a worker's lock on a job lasts without renewal; a dead worker's job is retried after it. */
    lockMs: number;
    /** Port of the worker's health and metrics server (0: any free port). */
    port: number;
  };
  shutdownTimeoutMs: number;
  /** Operator credentials of the Bull dashboard; undefined disables it. */
  dashboard: { user: string; password: string } | undefined;
  /**
   * Cost units per window and API token, and failed authentications per
   * window and client address (counters in Redis, shared by replicas);
   * undefined when RATE_LIMIT_MAX=0.
   */
  rateLimit: { max: number; windowMs: number; authFailures: number } | undefined;
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/** Parses an environment (default: process.env) into a Config, or throws ConfigError. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const result = schema.safeParse(env);
  if (!result.success) {
    throw new ConfigError(
      result.error.issues.map((i) => `${i.path.join('.') || '(environment)'}: ${i.message}`),
    );
  }
  const e = result.data;
  return {
    nodeEnv: e.NODE_ENV,
    logLevel: e.LOG_LEVEL,
    port: e.PORT,
    metricsToken: e.METRICS_TOKEN,
    trustProxy: e.TRUST_PROXY,
    publicBaseUrl: (e.PUBLIC_BASE_URL ?? `http://localhost:${e.PORT}`).replace(/\/+$/, ''),
    mongodbUri: e.MONGODB_URI,
    redisUrl: e.REDIS_URL,
    queuePrefix: e.QUEUE_PREFIX,
    s3: e.S3_ENDPOINT
      ? {
          endpoint: e.S3_ENDPOINT,
          publicEndpoint: (e.S3_PUBLIC_ENDPOINT ?? e.S3_ENDPOINT).replace(/\/+$/, ''),
          region: e.S3_REGION,
          accessKey: e.S3_ACCESS_KEY ?? '',
          secretKey: e.S3_SECRET_KEY ?? '',
          bucket: e.S3_BUCKET,
          partSize: e.S3_PART_SIZE,
          uploadConcurrency: e.S3_UPLOAD_CONCURRENCY,
        }
      : undefined,
    bucket: e.S3_BUCKET,
    dataDir: e.DATA_DIR,
    storageDir: e.STORAGE_DIR ?? `${e.DATA_DIR.replace(/\/+$/, '')}/storage`,
    limits: {
      maxFileSize: e.MAX_FILE_SIZE,
      maxFiles: e.MAX_FILES,
      maxBase64Size: e.MAX_BASE64_SIZE,
      maxMergeInputs: e.MAX_MERGE_INPUTS,
      maxInputPixels: e.MAX_INPUT_PIXELS,
      acceptedTypes: e.ACCEPTED_TYPES,
    },
    jobWaitMs: e.JOB_WAIT_MS,
    worker: {
      queues: e.WORKER_QUEUES,
      concurrency: e.WORKER_CONCURRENCY,
      lockMs: e.JOB_LOCK_MS,
      port: e.WORKER_PORT,
    },
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
    dashboard:
      e.DASHBOARD_USER && e.DASHBOARD_PASSWORD
        ? { user: e.DASHBOARD_USER, password: e.DASHBOARD_PASSWORD }
        : undefined,
    rateLimit:
      e.RATE_LIMIT_MAX > 0
        ? {
            max: e.RATE_LIMIT_MAX,
            windowMs: e.RATE_LIMIT_WINDOW_MS,
            authFailures: e.AUTH_FAILURE_LIMIT,
          }
        : undefined,
  };
}

/** The names of every variable the schema reads (used to keep docs in step). */
export const CONFIG_VARIABLES: readonly string[] = Object.keys(variables.shape);

let cached: Config | undefined;

/** The process-wide configuration, parsed on first use. */
export function getConfig(): Config {
  cached ??= loadConfig();
  return cached;
}
