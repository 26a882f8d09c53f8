/**
 * The one configuration schema, read once from the environment: validated,
 * typed and cached; a bad value stops start-up with a message naming the
 * variable, every problem at once. Each variable is declared once, in
 * variables.ts; this module turns the parsed environment into the structured
 * `Config` the code reads (`config.render.maxWidth`, …).
 */
import { checkAcrossVariables, openSurfaces } from './checks';
import { envSchema, type Env } from './schema';
import { resolveSecretFiles } from './secrets';
import { VARIABLES, type VariableName } from './variables';

export { ACCEPTABLE_TYPES, QUEUE_NAMES, SAMPLERS } from './parsers';
export type { QueueName, SamplerName, TrustProxy } from './parsers';
export { resolveSecretFiles, SECRET_VARIABLES } from './secrets';
export type { Env } from './schema';

/** The names of every variable the schema reads, in the table's order. */
export const CONFIG_VARIABLES: readonly VariableName[] = Object.keys(VARIABLES) as VariableName[];

const schema = envSchema.superRefine((env, ctx) =>
  checkAcrossVariables(env, (name, message) =>
    ctx.addIssue({ code: 'custom', path: [name], message }),
  ),
);

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/**
 * Compiles only when `unread` has no property: toConfig destructures every
 * variable of the table, so a variable declared there and read nowhere fails
 * the type check here (and an unused one, the lint).
 */
function everyVariableRead(_unread: Record<string, never>): void {}

/** The structured configuration, from a parsed environment. */
function toConfig(env: Env) {
  const {
    NODE_ENV,
    LOG_LEVEL,
    PORT,
    WORKER_PORT,
    PUBLIC_BASE_URL,
    TRUST_PROXY,
    SHUTDOWN_TIMEOUT_MS,
    DATA_DIR,
    MONGODB_URI,
    REDIS_URL,
    QUEUE_PREFIX,
    S3_ENDPOINT,
    S3_PUBLIC_ENDPOINT,
    S3_REGION,
    S3_ACCESS_KEY,
    S3_SECRET_KEY,
    S3_SESSION_TOKEN,
    AWS_WEB_IDENTITY_TOKEN_FILE,
    AWS_ROLE_ARN,
    S3_PATH_STYLE,
    S3_BUCKET,
    S3_PART_SIZE,
    S3_UPLOAD_CONCURRENCY,
    S3_SINGLE_PUT_MAX,
    S3_STREAM_PARTS,
    STORAGE_DIR,
    STORAGE_PUBLIC_ENDPOINT,
    MAX_FILE_SIZE,
    MAX_FILES,
    MAX_BASE64_SIZE,
    UPLOAD_ON_DUPLICATE,
    MAX_MERGE_INPUTS,
    MAX_MERGE_BYTES,
    ARCHIVE_MAX_ENTRIES,
    ARCHIVE_MAX_BYTES,
    UPLOAD_IDLE_TIMEOUT_MS,
    MAX_UPLOADS_IN_FLIGHT,
    RESUMABLE_MAX_INCOMPLETE,
    RESUMABLE_EXPIRY_MS,
    DIRECT_UPLOAD_SINGLE,
    DIRECT_UPLOAD_PART_SIZE,
    DIRECT_UPLOAD_EXPIRY_MS,
    DIRECT_UPLOAD_MAX_INCOMPLETE,
    RESUMABLE_MAX_PARTS,
    RESUMABLE_LOCK_TTL_MS,
    MAX_INPUT_PIXELS,
    MAX_GIF_OUTPUT_PIXELS,
    MAX_AVIF_OUTPUT_PIXELS,
    ACCEPTED_TYPES,
    RENDER_MAX_WIDTH,
    RENDER_MAX_HEIGHT,
    RENDER_SIZES,
    RENDER_PRESETS,
    RENDER_REQUIRE_SIGNED,
    RENDER_MAX_VARIANTS,
    RENDER_HANDOFF_MAX_BYTES,
    RENDER_SOURCE_CACHE_BYTES,
    JOB_WAIT_MS,
    MAX_PENDING_JOBS,
    JOB_RESERVED_SLOTS,
    JOB_QUEUED_PER_SLOT,
    WORKER_QUEUES,
    WORKER_CONCURRENCY,
    JOB_LOCK_MS,
    JOB_TIMEOUT_MS,
    RESULT_MAX_BYTES,
    RESULTS_MAX_BYTES_PER_ORG,
    RESULT_TTL_MS,
    USAGE_BOOKING_TTL_MS,
    TRASH_RETENTION_S,
    TRASH_PURGE_INTERVAL_MS,
    RESUMABLE_CLEANUP_INTERVAL_MS,
    RATE_LIMIT_MAX,
    RATE_LIMIT_WINDOW_MS,
    AUTH_FAILURE_LIMIT,
    AUTH_LOOKUPS_PER_SECOND,
    AUTH_CACHE_MS,
    REVALIDATION_CACHE_ENTRIES,
    URL_SIGNING_KEYS,
    URL_SIGNING_MAX_EXPIRES_IN,
    CORS_ORIGINS,
    METRICS_TOKEN,
    METRICS_PUBLIC,
    DASHBOARD_USER,
    DASHBOARD_PASSWORD,
    DASHBOARD_WRITE,
    DASHBOARD_AUTH_FAILURE_LIMIT,
    DASHBOARD_LOCKOUT_MS,
    CONSOLE_ENABLED,
    EGRESS_ALLOWED_PORTS,
    EGRESS_ALLOWLIST,
    WEBHOOK_MAX_ENDPOINTS,
    WEBHOOK_TIMEOUT_MS,
    WEBHOOK_RETRY_SCHEDULE,
    WEBHOOK_DISABLE_AFTER_MS,
    WEBHOOK_SECRET_OVERLAP_MS,
    WEBHOOK_CONCURRENCY,
    WEBHOOK_ENDPOINT_CONCURRENCY,
    IMPORT_TIMEOUT_MS,
    IMPORT_CONCURRENCY,
    CLAMD_URL,
    CLAMD_TIMEOUT_MS,
    CLAMD_MAX_BYTES,
    SCAN_POLICY,
    OTEL_TRACES_EXPORTER,
    OTEL_SERVICE_NAME,
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_HEADERS,
    OTEL_TRACES_SAMPLER,
    OTEL_TRACES_SAMPLER_ARG,
    ...unread
  } = env;
  everyVariableRead(unread);
  // METRICS_PUBLIC is read by the checks alone: an open /metrics is the absence of a token.
  void METRICS_PUBLIC;

  return {
    nodeEnv: NODE_ENV,
    logLevel: LOG_LEVEL,
    port: PORT,
    /** Bearer token GET /metrics requires (API and worker); undefined leaves it open (internal networks only). */
    metricsToken: METRICS_TOKEN,
    /** Express's `trust proxy`: which forwarded client addresses count (records' `metaData.ipAddress`). */
    trustProxy: TRUST_PROXY,
    /** Base of the `url` field of records; defaults to http://localhost:<port>. */
    publicBaseUrl: (PUBLIC_BASE_URL ?? `http://localhost:${PORT}`).replace(/\/+$/, ''),
    mongodbUri: MONGODB_URI,
    /** One Redis (redis://, rediss://) or a Redis Cluster (redis+cluster://…): shared/queue/redis-url.ts. */
    redisUrl: REDIS_URL,
    /** Prefix of every BullMQ key; a hash tag ({media}) on a Redis Cluster. */
    queuePrefix: QUEUE_PREFIX,
    s3: S3_ENDPOINT
      ? {
          endpoint: S3_ENDPOINT,
          /** The endpoint as clients see it (object addresses); S3_PUBLIC_ENDPOINT, else `endpoint`. */
          publicEndpoint: (S3_PUBLIC_ENDPOINT ?? S3_ENDPOINT).replace(/\/+$/, ''),
          region: S3_REGION,
          ...s3Credentials(),
          /** Path-style addresses (the default), or virtual-hosted ones (S3_PATH_STYLE=false). */
          pathStyle: S3_PATH_STYLE,
          bucket: S3_BUCKET,
          /** Bytes per multipart part (S3's minimum is 5 MiB). */
          partSize: S3_PART_SIZE,
          /** Parts of one upload in flight at once. */
          uploadConcurrency: S3_UPLOAD_CONCURRENCY,
          /** A body of unknown length up to this many bytes (or one part) goes as one PUT. */
          singlePutMax: S3_SINGLE_PUT_MAX,
          /** A resumable upload's parts streamed to presigned UploadPart URLs as they come. */
          streamParts: S3_STREAM_PARTS,
        }
      : undefined,
    bucket: S3_BUCKET,
    /** Where `npm start` keeps its embedded services' data and state file (development). */
    dataDir: DATA_DIR,
    /** Root of the file-system object store (used when S3_ENDPOINT is not set); default DATA_DIR/storage. */
    storageDir: STORAGE_DIR ?? `${DATA_DIR.replace(/\/+$/, '')}/storage`,
    /** The file-system store's endpoint in object addresses (`file://` when unset: `file:///<bucket>/<key>`). */
    storagePublicEndpoint: STORAGE_PUBLIC_ENDPOINT?.replace(/\/+$/, '') ?? 'file://',
    limits: {
      maxFileSize: MAX_FILE_SIZE,
      maxFiles: MAX_FILES,
      maxBase64Size: MAX_BASE64_SIZE,
      /** An upload's `onDuplicate` when the request names none. */
      onDuplicate: UPLOAD_ON_DUPLICATE,
      maxMergeInputs: MAX_MERGE_INPUTS,
      /** Bytes of all inputs of one merge, every occurrence counted (413 over it). */
      maxMergeBytes: MAX_MERGE_BYTES,
      /** Files and bytes (by their records) of one archive (413 over either). */
      archive: { maxEntries: ARCHIVE_MAX_ENTRIES, maxBytes: ARCHIVE_MAX_BYTES },
      maxInputPixels: MAX_INPUT_PIXELS,
      /**
       * Largest GIF and AVIF a render or a conversion encodes, width × height
       * (422 OUTPUT_TOO_LARGE past it; 400 for a `contain` render, whose size
       * the request decides): their encoders cannot be stopped once started.
       */
      maxOutputPixels: { gif: MAX_GIF_OUTPUT_PIXELS, avif: MAX_AVIF_OUTPUT_PIXELS },
      /** An upload's body idle (nothing received) this long is cut with 408. */
      uploadIdleTimeoutMs: UPLOAD_IDLE_TIMEOUT_MS,
      /** Uploads one token may have in flight on one API process (429 past it). */
      maxUploadsInFlight: MAX_UPLOADS_IN_FLIGHT,
      acceptedTypes: ACCEPTED_TYPES,
      /**
       * Resumable (tus) uploads: in progress per organization, their lifetime,
       * their multipart upload's part count bound, their lock's lifetime, and
       * how often the expired ones are cleaned up.
       */
      resumable: {
        maxIncomplete: RESUMABLE_MAX_INCOMPLETE,
        expiryMs: RESUMABLE_EXPIRY_MS,
        maxParts: RESUMABLE_MAX_PARTS,
        lockTtlMs: RESUMABLE_LOCK_TTL_MS,
        cleanupIntervalMs: RESUMABLE_CLEANUP_INTERVAL_MS,
      },
      /** Direct-to-storage uploads (S3): the single request's kind, part size, lifetime, cap. */
      direct: {
        single: DIRECT_UPLOAD_SINGLE,
        partSize: DIRECT_UPLOAD_PART_SIZE,
        expiryMs: DIRECT_UPLOAD_EXPIRY_MS,
        maxIncomplete: DIRECT_UPLOAD_MAX_INCOMPLETE,
      },
    },
    /** Renders (GET /media/render): bounds, allowed sizes and presets (docs/renders.md). */
    render: {
      maxWidth: RENDER_MAX_WIDTH,
      maxHeight: RENDER_MAX_HEIGHT,
      /** Sizes a bearer request may ask for; empty: any size within the maxima (unless `requireSigned`). */
      sizes: RENDER_SIZES,
      presets: RENDER_PRESETS,
      /** Signed render URLs only: bearer requests may ask for presets and `sizes` only. */
      requireSigned: RENDER_REQUIRE_SIGNED,
      /** Variants stored per source; a render past it is refused (400). */
      maxVariants: RENDER_MAX_VARIANTS,
      /**
       * Largest first-render variant the worker hands to the waiting API through
       * Redis (shared/queue/handoff.ts) besides storing it; 0 turns it off.
       */
      handoffMaxBytes: RENDER_HANDOFF_MAX_BYTES,
      /** Bytes of recently read sources each worker keeps for renders (worker/services/results.service.ts); 0: none. */
      sourceCacheBytes: RENDER_SOURCE_CACHE_BYTES,
    },
    jobWaitMs: JOB_WAIT_MS,
    /**
     * Job results too large for Redis, stored until read or expired
     * (shared/stored-results.ts): the largest one (413 past it), the bytes one
     * organization may have stored at once (429 past it), and how long an
     * unread one is kept before the workers' sweep removes it.
     */
    results: {
      maxBytes: RESULT_MAX_BYTES,
      maxBytesPerOrg: RESULTS_MAX_BYTES_PER_ORG,
      ttlMs: RESULT_TTL_MS,
    },
    /** Unfinished jobs (waiting, delayed, running) one organization may have at once. */
    maxPendingJobs: MAX_PENDING_JOBS,
    /**
     * How long a file counted ahead of its record (a booking) stays counted
     * without its record before it is given back (a writer that died); a writer
     * renews its bookings past half of it before writing the records.
     */
    usageBookingTtlMs: USAGE_BOOKING_TTL_MS,
    /**
     * The trash: seconds a deleted file stays there in an organization
     * without its own retention (0: deletes are final), and how often the
     * purge job runs.
     */
    trash: { retentionS: TRASH_RETENTION_S, purgeIntervalMs: TRASH_PURGE_INTERVAL_MS },
    /**
     * The fair gate (shared/queue/fair-gate.ts): per queue, the slots one
     * organization's heavy jobs leave to others, and the jobs an organization
     * may have released to the workers per live slot.
     */
    fairQueues: { reservedSlots: JOB_RESERVED_SLOTS, queuedPerSlot: JOB_QUEUED_PER_SLOT },
    worker: {
      queues: WORKER_QUEUES,
      /**
       * Per queue; the `webhook` queue's is WEBHOOK_CONCURRENCY and the `import`
       * queue's IMPORT_CONCURRENCY (both wait on the network).
       */
      concurrency: {
        ...WORKER_CONCURRENCY,
        webhook: WEBHOOK_CONCURRENCY,
        import: IMPORT_CONCURRENCY,
      },
      /** How long a worker's lock on a job lasts without renewal; a dead worker's job is retried after it. */
      lockMs: JOB_LOCK_MS,
      /** Longest a job may run; past it it fails for good (422 PROCESSING_TIMEOUT) and frees its slot. */
      jobTimeoutMs: JOB_TIMEOUT_MS,
      /** Port of the worker's health and metrics server (0: any free port). */
      port: WORKER_PORT,
    },
    shutdownTimeoutMs: SHUTDOWN_TIMEOUT_MS,
    /**
     * Malware scanning (shared/scan/): the clamd the workers ask (undefined:
     * scanning is off), its time limit, the largest file sent to it, and the
     * policy of organizations without one of their own.
     */
    scan: {
      clamdUrl: CLAMD_URL,
      timeoutMs: CLAMD_TIMEOUT_MS,
      maxBytes: CLAMD_MAX_BYTES,
      defaultPolicy: SCAN_POLICY,
    },
    /** Whether the API serves the web console's built files at /console. */
    consoleEnabled: CONSOLE_ENABLED,
    /**
     * Operator credentials of the Bull dashboard (undefined disables it), and
     * whether its actions (retry, clean, remove, pause, add…) are allowed:
     * read-only unless DASHBOARD_WRITE=true.
     */
    dashboard:
      DASHBOARD_USER && DASHBOARD_PASSWORD
        ? {
            user: DASHBOARD_USER,
            password: DASHBOARD_PASSWORD,
            write: DASHBOARD_WRITE,
            /** Failed logins per client address within `lockoutMs` before the address is locked out (0: never). */
            failureLimit: DASHBOARD_AUTH_FAILURE_LIMIT,
            lockoutMs: DASHBOARD_LOCKOUT_MS,
          }
        : undefined,
    /**
     * Cost units per window and API token; failed lookups of tokens the API
     * cannot vouch for, per window and client address; such lookups per
     * second across replicas (counters in Redis, shared by replicas);
     * undefined when RATE_LIMIT_MAX=0.
     */
    rateLimit:
      RATE_LIMIT_MAX > 0
        ? {
            max: RATE_LIMIT_MAX,
            windowMs: RATE_LIMIT_WINDOW_MS,
            authFailures: AUTH_FAILURE_LIMIT,
            authLookupsPerSecond: AUTH_LOOKUPS_PER_SECOND,
          }
        : undefined,
    /**
     * How long an API process keeps a token and its organization after reading
     * them (0: not at all); changes reach every replica at once through Redis,
     * and within this bound when Redis is away.
     */
    authCacheMs: AUTH_CACHE_MS,
    /**
     * Keys whose validators an API process keeps for revalidations (0: none),
     * each for at most `authCacheMs` (api/domain/revalidation-cache.ts).
     */
    revalidationCacheEntries: REVALIDATION_CACHE_ENTRIES,
    /** OpenTelemetry tracing; undefined (off, no SDK loaded) when OTEL_TRACES_EXPORTER is none or unset. */
    tracing:
      OTEL_TRACES_EXPORTER === 'none'
        ? undefined
        : {
            exporter: OTEL_TRACES_EXPORTER,
            /** OTEL_SERVICE_NAME; each process has its own default (media-api, media-worker). */
            serviceName: OTEL_SERVICE_NAME,
            otlp: {
              /** Where spans go: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces. */
              url:
                OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ??
                `${(OTEL_EXPORTER_OTLP_ENDPOINT ?? 'http://localhost:4318').replace(/\/+$/, '')}/v1/traces`,
              protocol: OTEL_EXPORTER_OTLP_PROTOCOL,
              headers: OTEL_EXPORTER_OTLP_HEADERS,
            },
            sampler: { name: OTEL_TRACES_SAMPLER, ratio: OTEL_TRACES_SAMPLER_ARG },
          },
    /**
     * Signed URLs: the keys (the first signs, every one verifies) and the
     * longest lifetime a URL may be given, in seconds; undefined (signing off)
     * without URL_SIGNING_KEYS.
     */
    urlSigning:
      URL_SIGNING_KEYS.length > 0
        ? { keys: URL_SIGNING_KEYS, maxExpiresIn: URL_SIGNING_MAX_EXPIRES_IN }
        : undefined,
    /** Origins allowed to read answers from browsers (CORS); empty: no CORS headers. `*`: any. */
    corsOrigins: CORS_ORIGINS,
    /** Where outbound requests may go (shared/egress/): ports besides 80/443, and what the operator opened. */
    egress: { allowedPorts: EGRESS_ALLOWED_PORTS, allowlist: EGRESS_ALLOWLIST },
    /** Webhooks (shared/webhooks/, worker/webhooks/): the cap per organization and how deliveries run. */
    webhooks: {
      maxEndpoints: WEBHOOK_MAX_ENDPOINTS,
      timeoutMs: WEBHOOK_TIMEOUT_MS,
      /** The delay before each attempt of a message (its length is the number of attempts). */
      retrySchedule: WEBHOOK_RETRY_SCHEDULE,
      disableAfterMs: WEBHOOK_DISABLE_AFTER_MS,
      secretOverlapMs: WEBHOOK_SECRET_OVERLAP_MS,
      endpointConcurrency: WEBHOOK_ENDPOINT_CONCURRENCY,
    },
    /** URL imports (POST /media/upload/url, worker/services/import.service.ts): the fetch's whole time. */
    imports: { timeoutMs: IMPORT_TIMEOUT_MS },
  };

  /**
   * Static keys (S3_ACCESS_KEY, S3_SECRET_KEY, S3_SESSION_TOKEN) when both keys
   * are set (the checks refuse one alone), or else credentials from STS for the
   * token Kubernetes projects (a web identity, IRSA).
   */
  function s3Credentials(): {
    accessKey?: string;
    secretKey?: string;
    sessionToken?: string;
    webIdentity?: { tokenFile: string; roleArn: string };
  } {
    if (S3_ACCESS_KEY && S3_SECRET_KEY) {
      return {
        accessKey: S3_ACCESS_KEY,
        secretKey: S3_SECRET_KEY,
        ...(S3_SESSION_TOKEN ? { sessionToken: S3_SESSION_TOKEN } : {}),
      };
    }
    return {
      webIdentity: { tokenFile: AWS_WEB_IDENTITY_TOKEN_FILE!, roleArn: AWS_ROLE_ARN! },
    };
  }
}

/** The structured configuration the code reads (its shape: toConfig above). */
export type Config = ReturnType<typeof toConfig>;
export type TracingConfig = NonNullable<Config['tracing']>;

/** Parses an environment (default: process.env) into a Config, or throws ConfigError. */
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
  return toConfig(result.data);
}

let cached: Config | undefined;

/** The process-wide configuration, parsed on first use (`options`: loadConfig's, that first time). */
export function getConfig(options?: Parameters<typeof loadConfig>[1]): Config {
  cached ??= loadConfig(process.env, options);
  return cached;
}
