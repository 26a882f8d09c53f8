/**
 * The one configuration schema. Parsed once from the environment, validated,
 * typed and cached; a bad value stops start-up with a message naming the
 * variable. Every variable is listed in `.env.example` and the README (a test
 * keeps the three in step).
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { QUEUE_NAMES, type QueueName } from './jobs';
import { DEFAULT_ACCEPTED_TYPES, KNOWN_MIME_TYPES, type OutputPixelLimits } from './media/formats';
import { parseRenderSizes, type RenderSize } from './media/render-options';
import { parseRenderPresets, renderPresetProblems, type RenderPreset } from './media/render-params';
import { isHashTagged, parseRedisUrl } from './queue/redis-url';

const MB = 1024 * 1024;

/** Every type the service can store (the formats table's); ACCEPTED_TYPES may narrow it. SVG never. */
export const ACCEPTABLE_TYPES = KNOWN_MIME_TYPES;

/** Queue names an operator may list in WORKER_QUEUES: the job map's (shared/jobs). */
export { QUEUE_NAMES, type QueueName };

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
const bool = (def: boolean) =>
  z.preprocess(
    emptyToUndefined,
    z
      .enum(['true', 'false'], { message: 'must be true or false' })
      .default(def ? 'true' : 'false')
      .transform((v) => v === 'true'),
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

/** A parser's result, or its error message as the variable's issue. */
function parsedOrIssue<T>(parse: () => T, ctx: z.RefinementCtx): T {
  try {
    return parse();
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: err instanceof Error ? err.message : String(err) });
    return z.NEVER;
  }
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

/** OTEL_TRACES_SAMPLER values (the OpenTelemetry specification's, minus jaeger_remote and xray). */
export const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;
export type SamplerName = (typeof SAMPLERS)[number];

/** OTEL_EXPORTER_OTLP_HEADERS: `key=value,key2=value2`, values percent-decoded (the specification's format). */
function parseOtlpHeaders(raw: string, ctx: z.RefinementCtx): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const entry of raw.split(',')) {
    if (entry.trim() === '') continue;
    const eq = entry.indexOf('=');
    const key = eq === -1 ? '' : entry.slice(0, eq).trim();
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(key)) {
      // The value may be a credential: never echo it.
      ctx.addIssue({ code: 'custom', message: 'must be a list of key=value pairs' });
      return z.NEVER;
    }
    try {
      headers[key] = decodeURIComponent(entry.slice(eq + 1).trim());
    } catch {
      ctx.addIssue({ code: 'custom', message: `has a badly percent-encoded value for ${key}` });
      return z.NEVER;
    }
  }
  return headers;
}

/** URL_SIGNING_KEYS: comma-separated secrets, the first signs, all verify; each 32+ characters. */
function parseSigningKeys(raw: string, ctx: z.RefinementCtx): string[] {
  const keys = raw
    .split(',')
    .map((k) => k.trim())
    .filter(Boolean);
  // The values are secrets: never echo them, say which position is wrong.
  const short = keys.flatMap((k, i) => (k.length < 32 ? [i + 1] : []));
  if (short.length > 0) {
    ctx.addIssue({
      code: 'custom',
      message: `every key must have at least 32 characters (key ${short.join(', ')} is shorter; make one with: openssl rand -base64 32)`,
    });
    return z.NEVER;
  }
  return keys;
}

/** CORS_ORIGINS: `*`, or comma-separated origins (`https://app.example.com`, no path). */
function parseOrigins(raw: string, ctx: z.RefinementCtx): string[] {
  const origins = raw
    .split(',')
    .map((o) => o.trim().toLowerCase())
    .filter(Boolean);
  const bad = origins.filter((o) => o !== '*' && !/^https?:\/\/[^/\s?#]+$/.test(o));
  if (bad.length > 0) {
    ctx.addIssue({
      code: 'custom',
      message: `must be * or a list of origins such as https://app.example.com (scheme and host, no path; not: ${bad.join(', ')})`,
    });
    return z.NEVER;
  }
  return [...new Set(origins)];
}

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
  // Serve /metrics and /readyz's details without METRICS_TOKEN in production, on purpose.
  METRICS_PUBLIC: bool(false),
  TRUST_PROXY: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .default('false')
      .transform((raw, ctx) => parseTrustProxy(raw, ctx)),
  ),
  PUBLIC_BASE_URL: optionalUrl(['http', 'https']),
  // Checked for shape only (the driver parses it): a replica set's several hosts are no URL.
  MONGODB_URI: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .regex(
        /^mongodb(\+srv)?:\/\/([^@/?#]+@)?[^@/?#,]+(,[^@/?#,]+)*(\/[^?#]*)?(\?[^#]*)?$/,
        'must be a mongodb or mongodb+srv connection string (mongodb://[user:password@]host[:port][,host…][/database][?options])',
      )
      .optional(),
  ),
  // One server (redis://, rediss://) or a Redis Cluster (redis+cluster://host:port,host:port).
  REDIS_URL: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .superRefine((v, ctx) => {
        try {
          parseRedisUrl(v);
        } catch (err) {
          ctx.addIssue({ code: 'custom', message: (err as Error).message });
        }
      })
      .optional(),
  ),
  QUEUE_PREFIX: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .regex(
        /^(\{[A-Za-z0-9_-]+\}|[A-Za-z0-9_-]+)$/,
        'letters, digits, _ and - only, optionally wrapped in {} (a Redis Cluster hash tag)',
      )
      .default('media'),
  ),
  S3_ENDPOINT: optionalUrl(['http', 'https']),
  // The endpoint clients see, when it is not S3_ENDPOINT (merged PDFs' `name` is an object address).
  S3_PUBLIC_ENDPOINT: optionalUrl(['http', 'https']),
  S3_REGION: z.preprocess(emptyToUndefined, z.string().default('us-east-1')),
  S3_ACCESS_KEY: optionalString,
  S3_SECRET_KEY: optionalString,
  S3_SESSION_TOKEN: optionalString,
  // Web identity (EKS IAM roles for service accounts): the projected token and the role to assume.
  AWS_WEB_IDENTITY_TOKEN_FILE: optionalString,
  AWS_ROLE_ARN: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .regex(
        /^arn:aws[a-z-]*:iam::\d{12}:role\/.+$/,
        'must be an IAM role ARN (arn:aws:iam::<account>:role/<name>)',
      )
      .optional(),
  ),
  // Path-style addresses (<endpoint>/<bucket>/<key>); false: virtual-hosted (<bucket>.<endpoint>/<key>).
  S3_PATH_STYLE: bool(true),
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
  // 16 MiB: a body up to it is one PUT, measured 1.6x as fast as a multipart upload on Swift.
  S3_SINGLE_PUT_MAX: int(16 * MB, 0, 5 * 1024 * MB),
  DATA_DIR: z.preprocess(emptyToUndefined, z.string().default('./.data')),
  STORAGE_DIR: optionalString,
  MAX_FILE_SIZE: int(100 * MB),
  MAX_FILES: int(20),
  MAX_BASE64_SIZE: int(20 * MB),
  MAX_MERGE_INPUTS: int(50),
  // Bytes of all of one merge's inputs, checked by the API before queueing and by the worker before reading.
  MAX_MERGE_BYTES: int(256 * MB),
  // An upload whose client sends nothing for this long is cut (408); uploads one token may have in flight per API process.
  UPLOAD_IDLE_TIMEOUT_MS: int(30_000, 100),
  MAX_UPLOADS_IN_FLIGHT: int(8),
  MAX_INPUT_PIXELS: int(100_000_000),
  // The slow encoders' output bounds (renders and conversions), width × height (docs/renders.md).
  MAX_GIF_OUTPUT_PIXELS: int(2048 * 2048, 1),
  MAX_AVIF_OUTPUT_PIXELS: int(4096 * 4096, 1),
  ACCEPTED_TYPES: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .default(DEFAULT_ACCEPTED_TYPES.join(','))
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
  // Renders (GET /media/render): bounds against filling storage with endless sizes.
  RENDER_MAX_WIDTH: int(4096, 1, 16_384),
  RENDER_MAX_HEIGHT: int(4096, 1, 16_384),
  RENDER_SIZES: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .default('')
      .transform((raw, ctx) => parsedOrIssue(() => parseRenderSizes(raw), ctx)),
  ),
  RENDER_PRESETS: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .default('{"thumbnail":{"w":200,"h":200,"fit":"cover"}}')
      .transform((raw, ctx) => parsedOrIssue(() => parseRenderPresets(raw), ctx)),
  ),
  RENDER_REQUIRE_SIGNED: bool(false),
  RENDER_MAX_VARIANTS: int(100, 1, 10_000),
  // A first render's variant up to this size reaches the waiting API through Redis (0: never).
  RENDER_HANDOFF_MAX_BYTES: int(512 * 1024, 0, 16 * MB),
  JOB_WAIT_MS: int(30_000, 100),
  // Job results too large for Redis, kept in storage until read (shared/stored-results.ts): the
  // largest one, an organization's at once, and how long an unread one is kept (at most the hour
  // a completed job is kept: past it, its status URL no longer finds the job).
  RESULT_MAX_BYTES: int(32 * MB, 1024, 1024 * MB),
  RESULTS_MAX_BYTES_PER_ORG: int(256 * MB, 1024, 64 * 1024 * MB),
  RESULT_TTL_MS: int(3_600_000, 1_000, 3_600_000),
  MAX_PENDING_JOBS: int(200, 1),
  JOB_RESERVED_SLOTS: int(1, 0, 64),
  JOB_QUEUED_PER_SLOT: int(2, 1, 100_000),
  WORKER_QUEUES: queues,
  JOB_LOCK_MS: int(30_000, 1_000),
  // Longest a job may run (every queue); past it the job fails with 422 PROCESSING_TIMEOUT.
  JOB_TIMEOUT_MS: int(120_000, 100),
  // A file counted before its record is written (a booking) is given back on its own past this.
  USAGE_BOOKING_TTL_MS: int(10 * 60_000, 1_000),
  WORKER_CONCURRENCY: concurrency,
  SHUTDOWN_TIMEOUT_MS: int(25_000, 100),
  DASHBOARD_USER: optionalString,
  DASHBOARD_PASSWORD: optionalString,
  DASHBOARD_WRITE: bool(false),
  DASHBOARD_AUTH_FAILURE_LIMIT: int(10, 0),
  DASHBOARD_LOCKOUT_MS: int(15 * 60_000, 1_000, 24 * 60 * 60_000),
  RATE_LIMIT_MAX: int(600, 0),
  RATE_LIMIT_WINDOW_MS: int(60_000, 1_000, 24 * 60 * 60_000),
  AUTH_FAILURE_LIMIT: int(30, 0),
  AUTH_LOOKUPS_PER_SECOND: int(100, 0),
  AUTH_CACHE_MS: int(30_000, 0, 60 * 60_000),
  // Signed URLs (docs/api.md, "Signed URLs"): off unless URL_SIGNING_KEYS is set.
  URL_SIGNING_KEYS: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .optional()
      .transform((raw, ctx) => (raw === undefined ? [] : parseSigningKeys(raw, ctx))),
  ),
  URL_SIGNING_MAX_EXPIRES_IN: int(7 * 24 * 3600, 1, 366 * 24 * 3600),
  CORS_ORIGINS: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .optional()
      .transform((raw, ctx) => (raw === undefined ? [] : parseOrigins(raw, ctx))),
  ),
  // Tracing (OpenTelemetry), off unless OTEL_TRACES_EXPORTER is otlp or console.
  OTEL_TRACES_EXPORTER: z.preprocess(
    emptyToUndefined,
    z
      .enum(['none', 'otlp', 'console'], {
        message: 'must be none, otlp or console',
      })
      .default('none'),
  ),
  OTEL_SERVICE_NAME: optionalString,
  OTEL_EXPORTER_OTLP_ENDPOINT: optionalUrl(['http', 'https']),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: optionalUrl(['http', 'https']),
  OTEL_EXPORTER_OTLP_PROTOCOL: z.preprocess(
    emptyToUndefined,
    z
      .enum(['http/protobuf', 'http/json'], {
        message: 'must be http/protobuf or http/json (grpc is not supported: use port 4318)',
      })
      .default('http/protobuf'),
  ),
  OTEL_EXPORTER_OTLP_HEADERS: z.preprocess(
    emptyToUndefined,
    z
      .string()
      .optional()
      .transform((raw, ctx) => (raw === undefined ? {} : parseOtlpHeaders(raw, ctx))),
  ),
  OTEL_TRACES_SAMPLER: z.preprocess(
    emptyToUndefined,
    z
      .enum(SAMPLERS, { message: `must be one of ${SAMPLERS.join(', ')}` })
      .default('parentbased_always_on'),
  ),
  OTEL_TRACES_SAMPLER_ARG: z.preprocess(
    emptyToUndefined,
    z.coerce.number().min(0).max(1).default(1),
  ),
});

const schema = variables.superRefine((env, ctx) => {
  const issue = (path: string, message: string) =>
    ctx.addIssue({ code: 'custom', path: [path], message });
  const within = (what: string, s: { width?: number | null; height?: number | null }) => {
    if ((s.width ?? 0) > env.RENDER_MAX_WIDTH) return `${what} is wider than RENDER_MAX_WIDTH`;
    if ((s.height ?? 0) > env.RENDER_MAX_HEIGHT) return `${what} is taller than RENDER_MAX_HEIGHT`;
    return undefined;
  };
  for (const size of env.RENDER_SIZES) {
    const problem = within(`${size.width ?? ''}x${size.height ?? ''}`, size);
    if (problem) issue('RENDER_SIZES', problem);
  }
  // Each preset read again as the render reads it, with the maxima and the slow formats' bounds.
  const rules = {
    maxWidth: env.RENDER_MAX_WIDTH,
    maxHeight: env.RENDER_MAX_HEIGHT,
    maxOutputPixels: { gif: env.MAX_GIF_OUTPUT_PIXELS, avif: env.MAX_AVIF_OUTPUT_PIXELS },
  };
  for (const problem of renderPresetProblems(env.RENDER_PRESETS, rules)) {
    issue('RENDER_PRESETS', problem);
  }
  if (env.S3_ENDPOINT) {
    // Static keys, or else a web identity (IRSA); keys win when both are there.
    const keys = ['S3_ACCESS_KEY', 'S3_SECRET_KEY'] as const;
    const identity = ['AWS_WEB_IDENTITY_TOKEN_FILE', 'AWS_ROLE_ARN'] as const;
    if (keys.some((k) => env[k])) {
      for (const k of keys) if (!env[k]) issue(k, `is required with ${keys.find((o) => o !== k)}`);
    } else if (identity.some((k) => env[k])) {
      for (const k of identity) {
        if (!env[k]) issue(k, `is required with ${identity.find((o) => o !== k)} (web identity)`);
      }
      if (env.S3_SESSION_TOKEN)
        issue('S3_SESSION_TOKEN', 'goes with S3_ACCESS_KEY and S3_SECRET_KEY');
      const tokenFile = env.AWS_WEB_IDENTITY_TOKEN_FILE;
      const unreadable = tokenFile ? unreadableFile(tokenFile) : undefined;
      if (unreadable) issue('AWS_WEB_IDENTITY_TOKEN_FILE', unreadable);
    } else {
      for (const k of keys) {
        issue(
          k,
          'is required when S3_ENDPOINT is set (or a web identity: AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN)',
        );
      }
    }
  } else if (env.S3_SESSION_TOKEN && !env.S3_ACCESS_KEY) {
    issue('S3_SESSION_TOKEN', 'goes with S3_ACCESS_KEY and S3_SECRET_KEY');
  }
  if (env.REDIS_URL && !isHashTagged(env.QUEUE_PREFIX)) {
    let cluster = false;
    try {
      cluster = parseRedisUrl(env.REDIS_URL).mode === 'cluster';
    } catch {
      // REDIS_URL's own issue says what is wrong with it.
    }
    if (cluster) {
      issue(
        'QUEUE_PREFIX',
        `must be a hash tag such as {${env.QUEUE_PREFIX.replace(/[{}]/g, '')}} when REDIS_URL is a Redis Cluster: BullMQ's multi-key commands need every key of a queue in one slot`,
      );
    }
  }
  if (env.RESULT_MAX_BYTES > env.RESULTS_MAX_BYTES_PER_ORG) {
    issue(
      'RESULT_MAX_BYTES',
      'must not be larger than RESULTS_MAX_BYTES_PER_ORG (one result would not fit)',
    );
  }
  if (Boolean(env.DASHBOARD_USER) !== Boolean(env.DASHBOARD_PASSWORD)) {
    ctx.addIssue({
      code: 'custom',
      path: [env.DASHBOARD_USER ? 'DASHBOARD_PASSWORD' : 'DASHBOARD_USER'],
      message:
        'DASHBOARD_USER and DASHBOARD_PASSWORD are set together (or neither, to disable the dashboard)',
    });
  }
  if (env.METRICS_PUBLIC && env.METRICS_TOKEN) {
    issue(
      'METRICS_PUBLIC',
      'true contradicts METRICS_TOKEN (which closes /metrics); set one of them',
    );
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
  /** One Redis (redis://, rediss://) or a Redis Cluster (redis+cluster://…): shared/queue/redis-url.ts. */
  redisUrl: string | undefined;
  /** Prefix of every BullMQ key; a hash tag ({media}) on a Redis Cluster. */
  queuePrefix: string;
  s3:
    | {
        endpoint: string;
        /** The endpoint as clients see it (object addresses); S3_PUBLIC_ENDPOINT, else `endpoint`. */
        publicEndpoint: string;
        region: string;
        /** Static keys (S3_ACCESS_KEY, S3_SECRET_KEY, S3_SESSION_TOKEN); unset with a web identity. */
        accessKey?: string;
        secretKey?: string;
        sessionToken?: string;
        /** Credentials from STS for the token Kubernetes projects (IRSA), when no static keys are set. */
        webIdentity?: { tokenFile: string; roleArn: string };
        /** Path-style addresses (the default), or virtual-hosted ones (S3_PATH_STYLE=false). */
        pathStyle: boolean;
        bucket: string;
        /** Bytes per multipart part (S3's minimum is 5 MiB). */
        partSize: number;
        /** Parts of one upload in flight at once. */
        uploadConcurrency: number;
        /** A body of unknown length up to this many bytes (or one part) goes as one PUT. */
        singlePutMax: number;
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
    /** Bytes of all inputs of one merge, every occurrence counted (413 over it). */
    maxMergeBytes: number;
    maxInputPixels: number;
    /**
     * Largest GIF and AVIF a render or a conversion encodes, width × height
     * (422 OUTPUT_TOO_LARGE past it; 400 for a `contain` render, whose size
     * the request decides): their encoders cannot be stopped once started.
     */
    maxOutputPixels: OutputPixelLimits;
    /** An upload's body idle (nothing received) this long is cut with 408. */
    uploadIdleTimeoutMs: number;
    /** Uploads one token may have in flight on one API process (429 past it). */
    maxUploadsInFlight: number;
    acceptedTypes: string[];
  };
  /** Renders (GET /media/render): bounds, allowed sizes and presets (docs/renders.md). */
  render: {
    maxWidth: number;
    maxHeight: number;
    /** Sizes a bearer request may ask for; empty: any size within the maxima (unless `requireSigned`). */
    sizes: RenderSize[];
    presets: Record<string, RenderPreset>;
    /** Signed render URLs only: bearer requests may ask for presets and `sizes` only. */
    requireSigned: boolean;
    /** Variants stored per source; a render past it is refused (400). */
    maxVariants: number;
    /**
     * Largest first-render variant the worker hands to the waiting API through
     * Redis (shared/queue/handoff.ts) besides storing it; 0 turns it off.
     */
    handoffMaxBytes: number;
  };
  jobWaitMs: number;
  /**
   * Job results too large for Redis, stored until read or expired
   * (shared/stored-results.ts): the largest one (413 past it), the bytes one
   * organization may have stored at once (429 past it), and how long an
   * unread one is kept before the workers' sweep removes it.
   */
  results: { maxBytes: number; maxBytesPerOrg: number; ttlMs: number };
  /** Unfinished jobs (waiting, delayed, running) one organization may have at once. */
  maxPendingJobs: number;
  /**
   * How long a file counted ahead of its record (a booking) stays counted
   * without its record before it is given back (a writer that died); a writer
   * renews its bookings past half of it before writing the records.
   */
  usageBookingTtlMs: number;
  /**
   * The fair gate (shared/queue/fair-gate.ts): per queue, the slots one
   * organization's heavy jobs leave to others, and the jobs an organization
   * may have released to the workers per live slot.
   */
  fairQueues: { reservedSlots: number; queuedPerSlot: number };
  worker: {
    queues: QueueName[];
    concurrency: Record<QueueName, number>;
    /** How long a worker's lock on a job lasts without renewal; a dead worker's job is retried after it. */
    lockMs: number;
    /** Longest a job may run; past it it fails for good (422 PROCESSING_TIMEOUT) and frees its slot. */
    jobTimeoutMs: number;
    /** Port of the worker's health and metrics server (0: any free port). */
    port: number;
  };
  shutdownTimeoutMs: number;
  /**
   * Operator credentials of the Bull dashboard (undefined disables it), and
   * whether its actions (retry, clean, remove, pause, add…) are allowed:
   * read-only unless DASHBOARD_WRITE=true.
   */
  dashboard:
    | {
        user: string;
        password: string;
        write: boolean;
        /** Failed logins per client address within `lockoutMs` before the address is locked out (0: never). */
        failureLimit: number;
        lockoutMs: number;
      }
    | undefined;
  /**
   * Cost units per window and API token; failed lookups of tokens the API
   * cannot vouch for, per window and client address; such lookups per
   * second across replicas (counters in Redis, shared by replicas);
   * undefined when RATE_LIMIT_MAX=0.
   */
  rateLimit:
    | { max: number; windowMs: number; authFailures: number; authLookupsPerSecond: number }
    | undefined;
  /**
   * How long an API process keeps a token and its organization after reading
   * them (0: not at all); changes reach every replica at once through Redis,
   * and within this bound when Redis is away.
   */
  authCacheMs: number;
  /** OpenTelemetry tracing; undefined (off, no SDK loaded) when OTEL_TRACES_EXPORTER is none or unset. */
  tracing: TracingConfig | undefined;
  /**
   * Signed URLs: the keys (the first signs, every one verifies) and the
   * longest lifetime a URL may be given, in seconds; undefined (signing off)
   * without URL_SIGNING_KEYS.
   */
  urlSigning: { keys: string[]; maxExpiresIn: number } | undefined;
  /** Origins allowed to read answers from browsers (CORS); empty: no CORS headers. `*`: any. */
  corsOrigins: string[];
}

export interface TracingConfig {
  exporter: 'otlp' | 'console';
  /** OTEL_SERVICE_NAME; each process has its own default (media-api, media-worker). */
  serviceName: string | undefined;
  otlp: {
    /** Where spans go: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces. */
    url: string;
    protocol: 'http/protobuf' | 'http/json';
    headers: Record<string, string>;
  };
  sampler: { name: SamplerName; ratio: number };
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/**
 * Variables that hold credentials. Each may be given instead as `<NAME>_FILE`,
 * the path of a file holding the value (Docker and Kubernetes secrets mounted
 * as files), read before validation with its trailing newline trimmed. Both
 * set is refused, and so is a file that cannot be read.
 */
export const SECRET_VARIABLES = [
  'MONGODB_URI',
  'REDIS_URL',
  'S3_ACCESS_KEY',
  'S3_SECRET_KEY',
  'S3_SESSION_TOKEN',
  'METRICS_TOKEN',
  'DASHBOARD_USER',
  'DASHBOARD_PASSWORD',
  'OTEL_EXPORTER_OTLP_HEADERS',
  'URL_SIGNING_KEYS',
] as const;

/** Why a file cannot be read (its error code), or undefined when it can. */
function unreadableFile(path: string): string | undefined {
  try {
    readFileSync(path);
    return undefined;
  } catch (err) {
    return `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? String(err)})`;
  }
}

/**
 * The environment with every `<NAME>_FILE` of a secret variable read into
 * `<NAME>`, the problems found doing so, and which names came from a file.
 */
export function resolveSecretFiles(env: NodeJS.ProcessEnv): {
  env: NodeJS.ProcessEnv;
  problems: string[];
  fromFile: Set<string>;
} {
  const resolved: NodeJS.ProcessEnv = { ...env };
  const problems: string[] = [];
  const fromFile = new Set<string>();
  for (const name of SECRET_VARIABLES) {
    const fileVar = `${name}_FILE`;
    const path = env[fileVar]?.trim();
    if (!path) continue;
    if (env[name]?.trim()) {
      problems.push(`${name}: both ${name} and ${fileVar} are set; set one of them`);
      continue;
    }
    try {
      // One trailing newline (or several: `echo`, editors) is not part of a secret.
      resolved[name] = readFileSync(path, 'utf8').replace(/[\r\n]+$/, '');
      fromFile.add(name);
    } catch (err) {
      problems.push(
        `${fileVar}: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? String(err)})`,
      );
    }
  }
  return { env: resolved, problems, fromFile };
}

/** Parses an environment (default: process.env) into a Config, or throws ConfigError. */
/**
 * What a process that serves /metrics and /readyz (the API, a worker) must
 * have in production: a METRICS_TOKEN, or METRICS_PUBLIC=true saying they are
 * open on purpose (docs/operations.md, "Protecting /metrics"). The CLI serves
 * neither and is not asked.
 */
function openSurfaces(env: NodeJS.ProcessEnv): string[] {
  // Read as the schema reads them (an empty token is no token).
  const open = env.METRICS_PUBLIC === 'true';
  if (env.NODE_ENV !== 'production' || env.METRICS_TOKEN?.trim() || open) return [];
  return [
    'METRICS_TOKEN: is required when NODE_ENV=production: without it /metrics and the details of /readyz are open to anyone who reaches the port (set METRICS_PUBLIC=true to serve them open on purpose, on an internal network only)',
  ];
}

export function loadConfig(
  env: NodeJS.ProcessEnv = process.env,
  options: {
    /** Whether this process serves /metrics and /readyz (not the CLI): then production closes them. */
    servesOperatorSurfaces?: boolean;
  } = {},
): Config {
  const secrets = resolveSecretFiles(env);
  const result = schema.safeParse(secrets.env);
  const surfaces = (options.servesOperatorSurfaces ?? true) ? openSurfaces(secrets.env) : [];
  if (!result.success || secrets.problems.length || surfaces.length) {
    const label = (name: string) =>
      secrets.fromFile.has(name) ? `${name} (from ${name}_FILE)` : name;
    throw new ConfigError([
      ...secrets.problems,
      ...(result.error?.issues ?? []).map(
        (i) => `${label(i.path.join('.')) || '(environment)'}: ${i.message}`,
      ),
      ...surfaces,
    ]);
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
          ...(e.S3_ACCESS_KEY && e.S3_SECRET_KEY
            ? {
                accessKey: e.S3_ACCESS_KEY,
                secretKey: e.S3_SECRET_KEY,
                ...(e.S3_SESSION_TOKEN ? { sessionToken: e.S3_SESSION_TOKEN } : {}),
              }
            : {
                webIdentity: {
                  tokenFile: e.AWS_WEB_IDENTITY_TOKEN_FILE!,
                  roleArn: e.AWS_ROLE_ARN!,
                },
              }),
          pathStyle: e.S3_PATH_STYLE,
          bucket: e.S3_BUCKET,
          partSize: e.S3_PART_SIZE,
          uploadConcurrency: e.S3_UPLOAD_CONCURRENCY,
          singlePutMax: e.S3_SINGLE_PUT_MAX,
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
      maxMergeBytes: e.MAX_MERGE_BYTES,
      maxInputPixels: e.MAX_INPUT_PIXELS,
      maxOutputPixels: { gif: e.MAX_GIF_OUTPUT_PIXELS, avif: e.MAX_AVIF_OUTPUT_PIXELS },
      uploadIdleTimeoutMs: e.UPLOAD_IDLE_TIMEOUT_MS,
      maxUploadsInFlight: e.MAX_UPLOADS_IN_FLIGHT,
      acceptedTypes: e.ACCEPTED_TYPES,
    },
    render: {
      maxWidth: e.RENDER_MAX_WIDTH,
      maxHeight: e.RENDER_MAX_HEIGHT,
      sizes: e.RENDER_SIZES,
      presets: e.RENDER_PRESETS,
      requireSigned: e.RENDER_REQUIRE_SIGNED,
      maxVariants: e.RENDER_MAX_VARIANTS,
      handoffMaxBytes: e.RENDER_HANDOFF_MAX_BYTES,
    },
    jobWaitMs: e.JOB_WAIT_MS,
    results: {
      maxBytes: e.RESULT_MAX_BYTES,
      maxBytesPerOrg: e.RESULTS_MAX_BYTES_PER_ORG,
      ttlMs: e.RESULT_TTL_MS,
    },
    maxPendingJobs: e.MAX_PENDING_JOBS,
    usageBookingTtlMs: e.USAGE_BOOKING_TTL_MS,
    fairQueues: { reservedSlots: e.JOB_RESERVED_SLOTS, queuedPerSlot: e.JOB_QUEUED_PER_SLOT },
    worker: {
      queues: e.WORKER_QUEUES,
      concurrency: e.WORKER_CONCURRENCY,
      lockMs: e.JOB_LOCK_MS,
      jobTimeoutMs: e.JOB_TIMEOUT_MS,
      port: e.WORKER_PORT,
    },
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
    dashboard:
      e.DASHBOARD_USER && e.DASHBOARD_PASSWORD
        ? {
            user: e.DASHBOARD_USER,
            password: e.DASHBOARD_PASSWORD,
            write: e.DASHBOARD_WRITE,
            failureLimit: e.DASHBOARD_AUTH_FAILURE_LIMIT,
            lockoutMs: e.DASHBOARD_LOCKOUT_MS,
          }
        : undefined,
    rateLimit:
      e.RATE_LIMIT_MAX > 0
        ? {
            max: e.RATE_LIMIT_MAX,
            windowMs: e.RATE_LIMIT_WINDOW_MS,
            authFailures: e.AUTH_FAILURE_LIMIT,
            authLookupsPerSecond: e.AUTH_LOOKUPS_PER_SECOND,
          }
        : undefined,
    authCacheMs: e.AUTH_CACHE_MS,
    tracing:
      e.OTEL_TRACES_EXPORTER === 'none'
        ? undefined
        : {
            exporter: e.OTEL_TRACES_EXPORTER,
            serviceName: e.OTEL_SERVICE_NAME,
            otlp: {
              url:
                e.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ??
                `${(e.OTEL_EXPORTER_OTLP_ENDPOINT ?? 'http://localhost:4318').replace(/\/+$/, '')}/v1/traces`,
              protocol: e.OTEL_EXPORTER_OTLP_PROTOCOL,
              headers: e.OTEL_EXPORTER_OTLP_HEADERS,
            },
            sampler: { name: e.OTEL_TRACES_SAMPLER, ratio: e.OTEL_TRACES_SAMPLER_ARG },
          },
    urlSigning:
      e.URL_SIGNING_KEYS.length > 0
        ? { keys: e.URL_SIGNING_KEYS, maxExpiresIn: e.URL_SIGNING_MAX_EXPIRES_IN }
        : undefined,
    corsOrigins: e.CORS_ORIGINS,
  };
}

/** The names of every variable the schema reads (used to keep docs in step). */
export const CONFIG_VARIABLES: readonly string[] = Object.keys(variables.shape);

let cached: Config | undefined;

/** The process-wide configuration, parsed on first use (`options`: loadConfig's, that first time). */
export function getConfig(options?: Parameters<typeof loadConfig>[1]): Config {
  cached ??= loadConfig(process.env, options);
  return cached;
}
