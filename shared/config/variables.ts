/**
 * Every environment variable the service reads, declared once: its section,
 * its kind of value (parser and default), what it does, and whether it is a
 * credential (then it may come from `<NAME>_FILE`). The schema, the parsed
 * type, `.env.example` and docs/configuration.md are derived from this table
 * (`npm run config:docs` rewrites the two files; a unit test fails when they
 * are stale). Checks across variables live in checks.ts; the structured
 * `Config` the code reads is built in index.ts.
 *
 * Descriptions are markdown, links relative to docs/.
 */
import { DEFAULT_ACCEPTED_TYPES } from '../media/formats';
import { parseRenderSizes } from '../media/render-options';
import { parseRenderPresets } from '../media/render-params';
import { parseAllowlist, parsePorts, parseRetrySchedule } from '../egress/parsers';
import { parseRedisUrl } from '../queue/redis-url';
import { boolean, decimal, integer, oneOf, parsed, text, url, type Kind } from './define';
import {
  ACCEPTABLE_TYPES,
  QUEUE_NAMES,
  SAMPLERS,
  parseAcceptedTypes,
  parseConcurrency,
  parseOrigins,
  parseOtlpHeaders,
  parseQueues,
  parseSigningKeys,
  parseTrustProxy,
} from './parsers';

const MB = 1024 * 1024;
const MINUTE = 60_000;
const DAY_MS = 24 * 60 * MINUTE;

/** Sections of the reference, in its order: a title and what the section is about. */
export const SECTIONS = {
  server: {
    title: 'Processes',
    about: 'How each process runs: environment, logs, ports, addresses, shutdown.',
  },
  services: {
    title: 'MongoDB and Redis',
    about:
      'Where records and queues live. Unset outside production, `npm start` runs embedded ones ([operations.md](operations.md#running-without-docker-npm-start)).',
  },
  storage: {
    title: 'Object storage',
    about:
      'Where the bytes live: an S3-compatible service, or a local directory in development ([storage.md](storage.md)).',
  },
  limits: {
    title: 'Uploads and limits',
    about: 'What one request may send. Sizes are in bytes.',
  },
  renders: {
    title: 'Renders',
    about:
      'Bounds of `GET /media/render`, against filling storage with endless sizes ([renders.md](renders.md)).',
  },
  jobs: {
    title: 'Jobs and workers',
    about:
      'How long the API waits for the workers, what one organization may have queued, which queues a worker takes ([jobs.md](jobs.md)).',
  },
  access: {
    title: 'Authentication, rate limits, signed URLs and CORS',
    about: 'Who may call, how often, and from where ([api.md](api.md#rate-limits)).',
  },
  operator: {
    title: 'Operator surfaces',
    about:
      '`/metrics`, the details of `/readyz` and the Bull dashboard ([operations.md](operations.md#protecting-metrics)).',
  },
  egress: {
    title: 'Outbound requests and webhooks',
    about:
      'Where the service may connect to (webhook deliveries), and how webhooks are delivered ([operations.md](operations.md#outbound-requests-and-webhooks)).',
  },
  scanning: {
    title: 'Malware scanning',
    about:
      'Every stored file scanned by `clamd`; off unless `CLAMD_URL` is set ([operations.md](operations.md#malware-scanning)).',
  },
  tracing: {
    title: 'Tracing',
    about:
      "OpenTelemetry's standard variables; off unless `OTEL_TRACES_EXPORTER` is `otlp` or `console` ([operations.md](operations.md#tracing)).",
  },
} as const;

export type SectionId = keyof typeof SECTIONS;

/** One variable of the table. */
export interface Variable<T> {
  readonly section: SectionId;
  readonly value: Kind<T>;
  /** What it does: one or a few sentences of markdown. */
  readonly doc: string;
  /** A credential: may be given instead as `<NAME>_FILE`, the path of a file holding it. */
  readonly secret?: true;
  /** What applies when it is unset, when that is not its default value (markdown). */
  readonly unset?: string;
}

export const VARIABLES = {
  // Processes
  NODE_ENV: {
    section: 'server',
    value: oneOf(['development', 'test', 'production'], { default: 'development' }),
    doc: '`production` requires `MONGODB_URI`, `REDIS_URL` and `S3_ENDPOINT` (it never runs on an embedded default), and `METRICS_TOKEN` or `METRICS_PUBLIC=true`.',
  },
  LOG_LEVEL: {
    section: 'server',
    value: oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
      default: 'info',
    }),
    doc: 'The pino level of every process. The API logs each request at `info` (a 5xx at `error`, except the 501 of a feature switched off: a refusal, at `info`): above `info` those lines are neither written nor built.',
  },
  PORT: {
    section: 'server',
    value: integer({ default: 3000, min: 0, max: 65535 }),
    doc: 'Port of the API.',
  },
  WORKER_PORT: {
    section: 'server',
    value: integer({ default: 3001, min: 0, max: 65535 }),
    doc: "Port of a worker's health and metrics server (`/healthz`, `/readyz`, `/metrics`); `0`: any free port.",
  },
  PUBLIC_BASE_URL: {
    section: 'server',
    value: url(['http', 'https']),
    unset: '`http://localhost:<PORT>`',
    doc: 'Base of the `url` field of records (a trailing slash is dropped).',
  },
  TRUST_PROXY: {
    section: 'server',
    value: parsed({
      parse: parseTrustProxy,
      default: 'false',
      type: '`true`, `false`, a hop count, or a comma-separated list of addresses, subnets, `loopback`, `linklocal`, `uniquelocal`',
    }),
    doc: "Express's `trust proxy`: which forwarded client addresses count for records' `metaData.ipAddress`. `false`: the socket's address. Limits and lockouts count the right-most untrusted hop (with `true`: the right-most `X-Forwarded-For` entry, which the proxy appended), IPv6 by /64 ([operations.md](operations.md#client-addresses-behind-proxies-trust_proxy)).",
  },
  SHUTDOWN_TIMEOUT_MS: {
    section: 'server',
    value: integer({ default: 25_000, min: 100, unit: 'ms' }),
    doc: 'How long a process may take to finish its work in flight after SIGTERM.',
  },
  DATA_DIR: {
    section: 'server',
    value: text({ default: './.data', type: 'directory' }),
    doc: "Where `npm start` keeps its embedded services' data (Redis, mongod or the MongoDB stand-in), the signing key and dashboard credentials it generates, and its state file (development; [development.md](development.md)).",
  },

  // MongoDB and Redis
  MONGODB_URI: {
    section: 'services',
    value: text({
      // Checked for shape only (the driver parses it): a replica set's several hosts are no URL.
      pattern: [
        /^mongodb(\+srv)?:\/\/([^@/?#]+@)?[^@/?#,]+(,[^@/?#,]+)*(\/[^?#]*)?(\?[^#]*)?$/,
        'must be a mongodb or mongodb+srv connection string (mongodb://[user:password@]host[:port][,host…][/database][?options])',
      ],
      type: 'MongoDB connection string',
    }),
    secret: true,
    doc: "MongoDB connection string, such as `mongodb://127.0.0.1:27017/media`; a replica set's works as it is: `mongodb://db-0:27017,db-1:27017,db-2:27017/media?replicaSet=rs0` ([operations.md](operations.md#mongodb-replica-sets)).",
  },
  REDIS_URL: {
    section: 'services',
    value: text({ check: parseRedisUrl, type: 'Redis URL' }),
    secret: true,
    doc: 'Redis connection string (`redis://127.0.0.1:6379`, `rediss://` for TLS), or a Redis Cluster by its seed nodes: `redis+cluster://[user:password@]host:port,host:port` (`rediss+cluster://` for TLS; [operations.md](operations.md#redis-cluster)).',
  },
  QUEUE_PREFIX: {
    section: 'services',
    value: text({
      default: 'media',
      pattern: [
        /^(\{[A-Za-z0-9_-]+\}|[A-Za-z0-9_-]+)$/,
        'letters, digits, _ and - only, optionally wrapped in {} (a Redis Cluster hash tag)',
      ],
      type: 'letters, digits, `_` and `-`, optionally in `{}`',
    }),
    doc: "Prefix of every BullMQ key (and of the rate limiter's) in Redis. On a Redis Cluster it must be a hash tag such as `{media}`, so each queue's keys share a slot.",
  },

  // Object storage
  S3_ENDPOINT: {
    section: 'storage',
    value: url(['http', 'https']),
    unset: 'local files under `STORAGE_DIR` (refused in production)',
    doc: 'S3-compatible endpoint (MinIO, AWS S3, Swift s3api), such as `http://127.0.0.1:9000`.',
  },
  S3_PUBLIC_ENDPOINT: {
    section: 'storage',
    value: url(['http', 'https']),
    unset: '`S3_ENDPOINT`',
    doc: "The endpoint as clients see it, when it is not `S3_ENDPOINT`: a merged PDF's `name` is `<endpoint>/<bucket>/<key>`, and the presigned URLs of direct-to-storage uploads point at it (signed for its host; [direct-uploads.md](direct-uploads.md)).",
  },
  S3_REGION: {
    section: 'storage',
    value: text({ default: 'us-east-1' }),
    doc: 'S3 region.',
  },
  S3_ACCESS_KEY: {
    section: 'storage',
    value: text(),
    secret: true,
    doc: 'S3 access key: with `S3_ENDPOINT`, required unless a web identity is given (`AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`).',
  },
  S3_SECRET_KEY: {
    section: 'storage',
    value: text(),
    secret: true,
    doc: 'S3 secret key, with `S3_ACCESS_KEY`.',
  },
  S3_SESSION_TOKEN: {
    section: 'storage',
    value: text(),
    secret: true,
    doc: 'Session token of temporary keys (STS), with `S3_ACCESS_KEY` and `S3_SECRET_KEY`.',
  },
  AWS_WEB_IDENTITY_TOKEN_FILE: {
    section: 'storage',
    value: text({ type: 'file path' }),
    doc: "Web identity (EKS IAM roles for service accounts; EKS's webhook sets it): the projected token exchanged with STS for `AWS_ROLE_ARN`'s credentials, used when `S3_ACCESS_KEY` and `S3_SECRET_KEY` are not set ([operations.md](operations.md#s3-credentials-and-addressing)).",
  },
  AWS_ROLE_ARN: {
    section: 'storage',
    value: text({
      pattern: [
        /^arn:aws[a-z-]*:iam::\d{12}:role\/.+$/,
        'must be an IAM role ARN (arn:aws:iam::<account>:role/<name>)',
      ],
      type: 'IAM role ARN',
    }),
    doc: 'The IAM role the web identity assumes (EKS sets it).',
  },
  S3_PATH_STYLE: {
    section: 'storage',
    value: boolean(true),
    doc: 'Path-style addresses (`<endpoint>/<bucket>/<key>`); `false`: virtual-hosted (`<bucket>.<endpoint>/<key>`).',
  },
  S3_BUCKET: {
    section: 'storage',
    value: text({
      default: 'media',
      pattern: [/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, 'must be a valid S3 bucket name'],
      type: 'S3 bucket name',
    }),
    doc: 'The bucket, created on start when missing.',
  },
  S3_PART_SIZE: {
    section: 'storage',
    value: integer({ default: 8 * MB, min: 5 * MB, max: 5 * 1024 * MB, unit: 'bytes' }),
    doc: 'Bytes per multipart part when streaming uploads; an upload holds at most (`S3_UPLOAD_CONCURRENCY` + 1) parts in memory. 8 MiB measured best within the memory targets ([performance.md](performance.md#choosing-the-part-size)).',
  },
  S3_UPLOAD_CONCURRENCY: {
    section: 'storage',
    value: integer({ default: 2, min: 1, max: 16 }),
    doc: 'Parts of one upload sent at once.',
  },
  S3_SINGLE_PUT_MAX: {
    section: 'storage',
    value: integer({ default: 16 * MB, min: 0, max: 5 * 1024 * MB, unit: 'bytes' }),
    doc: 'An upload (whose length is known only at its end) of up to this many bytes is sent as one PUT once it has all come in (a body between one part and this bound is held whole); a larger one as a multipart upload of `S3_PART_SIZE` parts. One PUT of 10 MiB was 1.6 times as fast as two parts on Swift ([performance.md](performance.md#choosing-the-part-size)).',
  },
  S3_STREAM_PARTS: {
    section: 'storage',
    value: boolean(true),
    doc: "A resumable upload's part is sent to the store while its PATCH brings it, to a presigned UploadPart URL (an unsigned payload; over HTTP its MD5 is checked against the ETag the store answers, and a store whose ETag is not the MD5 gets the part again, signed). `false`: each part is sent signed once whole, for a store or bucket policy that refuses presigned requests ([resumable-uploads.md](resumable-uploads.md#a-patchs-parts-streamed)).",
  },
  STORAGE_DIR: {
    section: 'storage',
    value: text({ type: 'directory' }),
    unset: '`DATA_DIR/storage`',
    doc: 'Local file-system storage, used when `S3_ENDPOINT` is not set (development only).',
  },
  STORAGE_PUBLIC_ENDPOINT: {
    section: 'storage',
    value: url(['http', 'https']),
    unset: '`file://`: addresses `file:///<bucket>/<key>`',
    doc: "The file-system store's endpoint as clients see it, as `S3_PUBLIC_ENDPOINT` is S3's: a merged PDF's `name` is `<endpoint>/<bucket>/<key>`, never the server's own path.",
  },

  // Uploads and limits
  MAX_FILE_SIZE: {
    section: 'limits',
    value: integer({ default: 100 * MB, unit: 'bytes' }),
    doc: 'Largest accepted file.',
  },
  MAX_FILES: {
    section: 'limits',
    value: integer({ default: 20 }),
    doc: 'Files per upload request.',
  },
  MAX_BASE64_SIZE: {
    section: 'limits',
    value: integer({ default: 20 * MB, unit: 'bytes' }),
    doc: 'Largest decoded base64 (data URL) upload.',
  },
  UPLOAD_ON_DUPLICATE: {
    section: 'limits',
    value: oneOf(['allow', 'reject', 'reuse'], { default: 'allow' }),
    doc: 'What an upload whose bytes (SHA-256) the organization already stores does when the request names no `onDuplicate`: `allow` stores it again, `reject` answers 409 `DUPLICATE`, `reuse` answers the existing record.',
  },
  MAX_MERGE_INPUTS: {
    section: 'limits',
    value: integer({ default: 50 }),
    doc: 'Inputs of one PDF merge.',
  },
  MAX_MERGE_BYTES: {
    section: 'limits',
    value: integer({ default: 256 * MB, unit: 'bytes' }),
    doc: 'Bytes of all inputs of one PDF merge, every occurrence counted: the API refuses more with `413 PAYLOAD_TOO_LARGE` before queueing (stored inputs by their records, uploaded ones as they stream); the worker checks stored sizes again before reading.',
  },
  ARCHIVE_MAX_ENTRIES: {
    section: 'limits',
    value: integer({ default: 10_000, min: 1 }),
    doc: 'Files of one archive (`POST /media/archive`): a selection of more is refused with `413 TOO_MANY_FILES` before any byte is sent.',
  },
  ARCHIVE_MAX_BYTES: {
    section: 'limits',
    value: integer({ default: 20 * 1024 * MB, min: 1, unit: 'bytes' }),
    doc: 'Bytes of all files of one archive, by their records: a selection of more is refused with `413 PAYLOAD_TOO_LARGE` before any byte is sent.',
  },
  UPLOAD_IDLE_TIMEOUT_MS: {
    section: 'limits',
    value: integer({ default: 30_000, min: 100, unit: 'ms' }),
    doc: 'An upload (`multipart/form-data` body) whose client sends nothing for this long is cut: `408 REQUEST_TIMEOUT`, connection closed, nothing kept.',
  },
  MAX_UPLOADS_IN_FLIGHT: {
    section: 'limits',
    value: integer({ default: 8 }),
    doc: 'Multipart uploads (`/media/upload`, `/media/upload/multiple`, `/media/merge-pdfs`) one token may have in flight on one API process; past it `429 TOO_MANY_UPLOADS` with `Retry-After`.',
  },
  RESUMABLE_MAX_INCOMPLETE: {
    section: 'limits',
    value: integer({ default: 100, min: 1 }),
    doc: 'Resumable (tus) uploads one organization may have in progress (created, not finished, not expired); past it the creation is refused with `429 TOO_MANY_INCOMPLETE_UPLOADS`.',
  },
  RESUMABLE_EXPIRY_MS: {
    section: 'limits',
    value: integer({ default: 24 * 60 * 60 * 1000, min: 1000, unit: 'ms' }),
    doc: 'How long a resumable (tus) upload may take from its creation (`Upload-Expires`); after it the upload answers `410`, and the `media.expire-resumable` job (every `RESUMABLE_CLEANUP_INTERVAL_MS`) aborts its multipart upload and removes its temporary objects; a day later it answers `404`.',
  },
  RESUMABLE_MAX_PARTS: {
    section: 'limits',
    value: integer({ default: 10_000, min: 2, max: 10_000 }),
    doc: "Parts one resumable (tus) upload's multipart upload may have (S3's limit is 10,000): its part size is `S3_PART_SIZE`, or more when `Upload-Length` (or, for a deferred length, `MAX_FILE_SIZE`) divided by this is larger. Lower it only to test the part size's growth.",
  },
  RESUMABLE_LOCK_TTL_MS: {
    section: 'limits',
    value: integer({ default: 10_000, min: 2_000, max: 60_000, unit: 'ms' }),
    doc: "How long a resumable upload's lock outlives the API process holding it (renewed every second while a PATCH streams): the longest a client waits, after the process serving its PATCH died, before another process takes its upload.",
  },
  DIRECT_UPLOAD_SINGLE: {
    section: 'limits',
    value: oneOf(['post', 'put'], { default: 'post' }),
    doc: "What a direct-to-storage upload (`POST /media/upload/direct`, S3 only) of at most one part (`DIRECT_UPLOAD_PART_SIZE`) gets: `post`, a presigned POST policy (the store itself holds the client to the declared size, type and key: AWS S3, MinIO), or `put`, a presigned PUT (the size is checked at completion: stores without POST policies, such as OpenStack Swift's s3api). A larger file always gets presigned multipart part URLs ([direct-uploads.md](direct-uploads.md)).",
  },
  DIRECT_UPLOAD_PART_SIZE: {
    section: 'limits',
    value: integer({ default: 16 * MB, min: 5 * MB, max: 5 * 1024 * MB, unit: 'bytes' }),
    doc: "Bytes per part of a direct-to-storage multipart upload (S3's limits: 5 MiB to 5 GiB); a file of more than 10,000 such parts gets larger parts. A file of at most one part is sent in one request (`DIRECT_UPLOAD_SINGLE`).",
  },
  DIRECT_UPLOAD_EXPIRY_MS: {
    section: 'limits',
    value: integer({
      default: 60 * 60 * 1000,
      min: 1000,
      max: 7 * 24 * 60 * 60 * 1000,
      unit: 'ms',
    }),
    doc: 'How long a direct-to-storage upload may take from its request to its completion: its presigned URLs expire with it (S3 signs for 7 days at most), and an upload not completed by then is removed (its object or multipart upload, its quota booking) by the `upload.expire-direct` job, which runs every minute on the `maintenance` queue.',
  },
  DIRECT_UPLOAD_MAX_INCOMPLETE: {
    section: 'limits',
    value: integer({ default: 100, min: 1 }),
    doc: 'Direct-to-storage uploads one organization may have requested and not completed (nor expired); past it a request is refused with `429 TOO_MANY_INCOMPLETE_UPLOADS`.',
  },
  MAX_INPUT_PIXELS: {
    section: 'limits',
    value: integer({ default: 100_000_000 }),
    doc: 'Largest decoded image, in pixels (against decompression bombs).',
  },
  MAX_GIF_OUTPUT_PIXELS: {
    section: 'limits',
    value: integer({ default: 2048 * 2048 }),
    doc: 'Largest GIF a render or a conversion encodes, in pixels (width × height; the default is 2048 × 2048); past it `422 OUTPUT_TOO_LARGE` (`400` for a `contain` render, whose size is its box). GIF and AVIF encoders cannot be stopped once started: the bound keeps one within about a second ([renders.md](renders.md#slow-encoders)). A `contain` preset of `RENDER_PRESETS` over it is refused at start.',
  },
  MAX_AVIF_OUTPUT_PIXELS: {
    section: 'limits',
    value: integer({ default: 4096 * 4096 }),
    doc: 'Largest AVIF a render or a conversion encodes, in pixels (width × height; the default is 4096 × 4096), as `MAX_GIF_OUTPUT_PIXELS` for GIF; `format=auto` picks WebP (or JPEG) instead of AVIF past it.',
  },
  ACCEPTED_TYPES: {
    section: 'limits',
    value: parsed({
      parse: parseAcceptedTypes,
      default: DEFAULT_ACCEPTED_TYPES.join(','),
      type: 'comma-separated MIME types',
    }),
    doc: `Accepted types, detected from the bytes: any of ${ACCEPTABLE_TYPES.map((t) => `\`${t}\``).join(', ')}. SVG is never accepted.`,
  },

  // Renders
  RENDER_MAX_WIDTH: {
    section: 'renders',
    value: integer({ default: 4096, min: 1, max: 16_384 }),
    doc: 'Largest width a render may ask for (past it: `400` naming it).',
  },
  RENDER_MAX_HEIGHT: {
    section: 'renders',
    value: integer({ default: 4096, min: 1, max: 16_384 }),
    doc: 'Largest height a render may ask for (past it: `400` naming it).',
  },
  RENDER_SIZES: {
    section: 'renders',
    value: parsed({
      parse: parseRenderSizes,
      default: '',
      type: 'comma-separated sizes `<w>x<h>`, either side optional',
    }),
    unset: 'empty (any size within the maxima)',
    doc: 'Sizes a bearer render may ask for, such as `200x200,400x,x300`; past them: `400`. Each must be within `RENDER_MAX_WIDTH` and `RENDER_MAX_HEIGHT`.',
  },
  RENDER_PRESETS: {
    section: 'renders',
    value: parsed({
      parse: (raw) => parseRenderPresets(raw),
      default: '{"thumbnail":{"w":200,"h":200,"fit":"cover"}}',
      type: 'JSON object: name → `w`, `h`, `fit`, `format`, `q`, `metadata`',
    }),
    doc: 'Named render presets, asked for with `preset=<name>` and always allowed. Each is read as a render reads its options (`jpg` for `jpeg`, any case, sizes as text or numbers): what a render would refuse is refused at start, in its words, such as a size over `RENDER_MAX_WIDTH` or `RENDER_MAX_HEIGHT`, or a `contain` preset in GIF or AVIF over `MAX_GIF_OUTPUT_PIXELS` or `MAX_AVIF_OUTPUT_PIXELS`.',
  },
  RENDER_REQUIRE_SIGNED: {
    section: 'renders',
    value: boolean(false),
    doc: 'Signed render URLs only: bearer renders may ask for presets and `RENDER_SIZES` only.',
  },
  RENDER_MAX_VARIANTS: {
    section: 'renders',
    value: integer({ default: 100, min: 1, max: 10_000 }),
    doc: "Variants stored per source file; a render of a new variant past it is refused (`400`). Their bytes count against the organization's quota ([renders.md](renders.md#quotas-and-usage)).",
  },
  RENDER_HANDOFF_MAX_BYTES: {
    section: 'renders',
    value: integer({ default: 512 * 1024, min: 0, max: 16 * MB, unit: 'bytes' }),
    doc: 'Largest first-render variant the worker also hands to the waiting API through Redis (kept 10 s), so the first answer needs no read back from storage; larger ones are read from storage. `0` turns it off ([renders.md](renders.md#a-variant-is-rendered-once)).',
  },
  RENDER_SOURCE_CACHE_BYTES: {
    section: 'renders',
    value: integer({ default: 64 * MB, min: 0, max: 4096 * MB, unit: 'bytes' }),
    doc: 'Bytes of recently read sources each worker keeps in memory for renders (an LRU; a source larger than a quarter of it is not kept), so a burst of widths of one image reads it from storage once. `0` turns it off ([renders.md](renders.md#the-source-cache)).',
  },

  // Jobs and workers
  JOB_WAIT_MS: {
    section: 'jobs',
    value: integer({ default: 30_000, min: 100, unit: 'ms' }),
    doc: 'How long the API waits for a job before answering `504` with the job id.',
  },
  MAX_PENDING_JOBS: {
    section: 'jobs',
    value: integer({ default: 200, min: 1 }),
    doc: 'Jobs one organization may have waiting or running at once; past it `429 TOO_MANY_JOBS` with `Retry-After`.',
  },
  JOB_RESERVED_SLOTS: {
    section: 'jobs',
    value: integer({ default: 1, min: 0, max: 64 }),
    doc: "Per queue, worker slots one organization's heavy jobs (long renders, conversions, merges) leave free for other organizations ([jobs.md](jobs.md#fair-queues)).",
  },
  JOB_QUEUED_PER_SLOT: {
    section: 'jobs',
    value: integer({ default: 2, min: 1, max: 100_000 }),
    doc: 'Per queue, jobs one organization may have handed to the workers per live worker slot; its others wait, in order, until its earlier ones end ([jobs.md](jobs.md#fair-queues)).',
  },
  WORKER_QUEUES: {
    section: 'jobs',
    value: parsed({
      parse: parseQueues,
      default: QUEUE_NAMES.join(','),
      type: `comma-separated queue names: ${QUEUE_NAMES.map((q) => `\`${q}\``).join(', ')}`,
    }),
    doc: 'Queues a worker takes (`maintenance`: folder deletes and event dispatch; `webhook`: webhook deliveries; `scan`: malware scans, when `CLAMD_URL` is set; `import`: URL imports).',
  },
  WORKER_CONCURRENCY: {
    section: 'jobs',
    value: parsed({
      parse: parseConcurrency,
      default: '2',
      type: 'a number 1 to 64, or per queue as `image=1,pdf=4`',
    }),
    doc: 'Jobs a worker runs at once per queue: one number for every queue, or per queue (queues not named get 1).',
  },
  JOB_LOCK_MS: {
    section: 'jobs',
    value: integer({ default: 30_000, min: 1_000, unit: 'ms' }),
    doc: "How long a job's lock lasts without renewal: a killed worker's job is taken over after this.",
  },
  JOB_TIMEOUT_MS: {
    section: 'jobs',
    value: integer({ default: 120_000, min: 100, unit: 'ms' }),
    doc: "Longest a job may run, every queue; past it the job fails for good with `422 PROCESSING_TIMEOUT`, the worker takes its next job, its work is stopped (sharp's own timeout, a HEIC decoding thread ended; GIF and AVIF encoders run out, bounded by `MAX_GIF_OUTPUT_PIXELS` and `MAX_AVIF_OUTPUT_PIXELS`) and nothing of it is kept.",
  },
  RESULT_MAX_BYTES: {
    section: 'jobs',
    value: integer({ default: 32 * MB, min: 1024, max: 1024 * MB, unit: 'bytes' }),
    doc: 'Largest job result stored outside Redis (a metadata answer whose JSON is over 16 KiB, with a large XMP or EXIF block): past it the job answers `413 PAYLOAD_TOO_LARGE` and nothing is kept. At most `RESULTS_MAX_BYTES_PER_ORG` ([jobs.md](jobs.md#large-results)).',
  },
  RESULTS_MAX_BYTES_PER_ORG: {
    section: 'jobs',
    value: integer({ default: 256 * MB, min: 1024, max: 64 * 1024 * MB, unit: 'bytes' }),
    doc: "Bytes of one organization's stored results waiting to be read; past it `429 TOO_MANY_RESULTS` (shown in `GET /media/usage` as `resultBytes`, not in the quota).",
  },
  RESULT_TTL_MS: {
    section: 'jobs',
    value: integer({ default: 3_600_000, min: 1_000, max: 3_600_000, unit: 'ms' }),
    doc: "How long an unread stored result is kept before the workers' sweep removes it: at most the hour a completed job is kept (past it, its status URL no longer finds the job).",
  },
  TRASH_RETENTION_S: {
    section: 'jobs',
    value: integer({ default: 30 * 24 * 3600, min: 0, max: 10 * 366 * 24 * 3600, unit: 's' }),
    doc: 'How long a deleted file stays in the trash (`GET /media/trash`, restorable) before the purge deletes its bytes, variants and record; its bytes count in usage until then. 0: a delete is immediate and final (no trash). Per organization: `cli.ts org:update --trash-retention` ([operations.md](operations.md#trash)).',
  },
  TRASH_PURGE_INTERVAL_MS: {
    section: 'jobs',
    value: integer({ default: 15 * MINUTE, min: 100, max: 24 * 60 * MINUTE, unit: 'ms' }),
    doc: 'How often the `media.purge-trash` job (repeatable, on the `maintenance` queue) deletes files kept in the trash past their retention.',
  },
  RESUMABLE_CLEANUP_INTERVAL_MS: {
    section: 'jobs',
    value: integer({ default: MINUTE, min: 100, max: 24 * 60 * MINUTE, unit: 'ms' }),
    doc: 'How often the `media.expire-resumable` job (repeatable, on the `maintenance` queue) removes the resumable uploads past their `Upload-Expires`: their multipart uploads aborted, their temporary objects removed.',
  },
  USAGE_BOOKING_TTL_MS: {
    section: 'jobs',
    value: integer({ default: 10 * MINUTE, min: 1_000, unit: 'ms' }),
    doc: 'How long a file counted against the quota before its record is written (a booking) stays counted with no record: past it, the next read of the count gives it back (an API or worker that died between the two; [api.md](api.md#quotas)). Writers renew their bookings past half of it.',
  },

  // Authentication, rate limits, signed URLs and CORS
  RATE_LIMIT_MAX: {
    section: 'access',
    value: integer({ default: 600, min: 0 }),
    doc: 'Cost units per window per API token (a download costs 1, a merge 50; [api.md](api.md#rate-limits)), counted in Redis so every API replica shares them; over it `429 RATE_LIMITED` with `Retry-After`. `0` disables rate limiting.',
  },
  RATE_LIMIT_WINDOW_MS: {
    section: 'access',
    value: integer({ default: MINUTE, min: 1_000, max: DAY_MS, unit: 'ms' }),
    doc: 'Length of the rate-limit window (a fixed window).',
  },
  AUTH_FAILURE_LIMIT: {
    section: 'access',
    value: integer({ default: 30, min: 0 }),
    doc: "Failed lookups of unknown tokens per window per client address; past it a token from that address that would need a MongoDB lookup gets `429` without one. Cached tokens, tokens carrying the service's check (every token issued now) and signed URLs are never refused. `0` disables.",
  },
  AUTH_LOOKUPS_PER_SECOND: {
    section: 'access',
    value: integer({ default: 100, min: 0 }),
    doc: 'Lookups of unknown tokens per second across every API replica (counted in Redis), whatever their address; past it `429` without a lookup. `0` disables.',
  },
  AUTH_CACHE_MS: {
    section: 'access',
    value: integer({ default: 30_000, min: 0, max: 60 * MINUTE, unit: 'ms' }),
    doc: 'How long an API process keeps a token and its organization in memory after reading them (no MongoDB round trip to authenticate). Revocations, scope, quota and organization changes reach every replica at once through Redis; this bounds them when Redis is away. `0`: read MongoDB on every request ([operations.md](operations.md#tokens-and-organizations-cached-in-the-api)).',
  },
  REVALIDATION_CACHE_ENTRIES: {
    section: 'access',
    value: integer({ default: 10_000, min: 0, max: 1_000_000 }),
    doc: "Keys an API process keeps the validators of (a file's ETag and Last-Modified, its variants' ETags), so a revalidation (`If-None-Match` → 304) of a download or a render costs no MongoDB round trip once the key has been served; least recently used out first. A deleted key is dropped on every replica at once through Redis, and an entry lives at most `AUTH_CACHE_MS`. `0` disables ([performance.md](performance.md#revalidations)).",
  },
  URL_SIGNING_KEYS: {
    section: 'access',
    value: parsed({
      parse: parseSigningKeys,
      default: '',
      type: 'comma-separated keys of 32+ characters',
    }),
    secret: true,
    unset: 'empty (signing off)',
    doc: 'Keys of signed URLs (`POST /media/sign`; [api.md](api.md#signed-urls)); make one with `openssl rand -base64 32`. The first signs, every one verifies: to rotate, put the new key first and drop the old one once the URLs it signed have expired.',
  },
  URL_SIGNING_MAX_EXPIRES_IN: {
    section: 'access',
    value: integer({ default: 7 * 24 * 3600, min: 1, max: 366 * 24 * 3600, unit: 's' }),
    doc: 'Longest lifetime of a signed URL (a longer `expiresIn` is a `400`).',
  },
  CORS_ORIGINS: {
    section: 'access',
    value: parsed({
      parse: parseOrigins,
      default: '',
      type: '`*`, or comma-separated origins (scheme and host)',
    }),
    unset: 'empty (no CORS headers)',
    doc: 'Origins whose browser scripts may read answers (CORS), such as `https://app.example.com`, or `*` for any. Browsers on other origins can still show `<img>` tags ([api.md](api.md#browsers-cors)).',
  },

  // Operator surfaces
  METRICS_TOKEN: {
    section: 'operator',
    value: text(),
    secret: true,
    doc: 'Bearer token `GET /metrics` and the per-dependency details of `GET /readyz` require (API and worker). Unset, they are open: keep them on internal networks. Required with `NODE_ENV=production` unless `METRICS_PUBLIC=true` ([operations.md](operations.md#protecting-metrics)).',
  },
  METRICS_PUBLIC: {
    section: 'operator',
    value: boolean(false),
    doc: "`true`: serve `/metrics` and `/readyz`'s details without a token under `NODE_ENV=production`, on purpose (an internal network only). Refused together with `METRICS_TOKEN`.",
  },
  DASHBOARD_USER: {
    section: 'operator',
    value: text(),
    secret: true,
    doc: 'Operator user (HTTP Basic) of the Bull dashboard at `/admin/queues`, set together with `DASHBOARD_PASSWORD`; both unset: the dashboard is off.',
  },
  DASHBOARD_PASSWORD: {
    section: 'operator',
    value: text(),
    secret: true,
    doc: 'Operator password of the dashboard.',
  },
  DASHBOARD_WRITE: {
    section: 'operator',
    value: boolean(false),
    doc: "`true` allows the dashboard's actions (retry, clean, remove, pause, add, empty…); otherwise it is read-only: bull-board hides them and the API answers `405` to anything but GET and HEAD under `/admin/queues`.",
  },
  DASHBOARD_AUTH_FAILURE_LIMIT: {
    section: 'operator',
    value: integer({ default: 10, min: 0 }),
    doc: 'Failed dashboard logins per client address before it is locked out: `429` with `Retry-After`, right credentials included, until `DASHBOARD_LOCKOUT_MS` after its first failure. `0` disables.',
  },
  DASHBOARD_LOCKOUT_MS: {
    section: 'operator',
    value: integer({ default: 15 * MINUTE, min: 1_000, max: DAY_MS, unit: 'ms' }),
    doc: 'Window of the dashboard lockout.',
  },
  CONSOLE_ENABLED: {
    section: 'operator',
    value: boolean(true),
    doc: '`false` turns off the web console at `/console` (static files only: it talks to the public API with the token a person pastes, so it grants nothing the API does not; [console.md](console.md)). On by default.',
  },

  // Outbound requests and webhooks
  EGRESS_ALLOWED_PORTS: {
    section: 'egress',
    value: parsed({ parse: parsePorts, default: '', type: 'comma-separated ports (1 to 65535)' }),
    doc: 'Ports an outbound request may use besides 80 and 443.',
  },
  EGRESS_ALLOWLIST: {
    section: 'egress',
    value: parsed({
      parse: parseAllowlist,
      default: '',
      type: 'comma-separated host names and CIDRs (`hooks.internal,10.1.0.0/16`)',
    }),
    doc: 'Internal targets opened on purpose: a named host may resolve to any address, an address in a CIDR is reached though private. Nothing else opens loopback, private, link-local, CGNAT, metadata or IPv4-in-IPv6 addresses ([operations.md](operations.md#outbound-requests-and-webhooks)).',
  },
  WEBHOOK_MAX_ENDPOINTS: {
    section: 'egress',
    value: integer({ default: 20, min: 1, max: 1_000 }),
    doc: 'Webhook endpoints one organization may have; past it `409 CONFLICT`.',
  },
  WEBHOOK_TIMEOUT_MS: {
    section: 'egress',
    value: integer({ default: 15_000, min: 100, max: 60_000, unit: 'ms' }),
    doc: 'Longest a webhook delivery may take (connection, answer and the 4 KiB of it kept); past it the attempt failed.',
  },
  WEBHOOK_RETRY_SCHEDULE: {
    section: 'egress',
    value: parsed({
      parse: parseRetrySchedule,
      default: '0,5s,5m,30m,2h,5h,10h,10h',
      type: 'comma-separated delays (`ms`, `s`, `m`, `h`), one per attempt',
    }),
    doc: "A webhook message's attempts: the delay before each (the first is usually 0), each later one with up to 10% jitter; a `Retry-After` on a 429 or 503 postpones the next attempt (at most the schedule's longest delay, or an hour).",
  },
  WEBHOOK_DISABLE_AFTER_MS: {
    section: 'egress',
    value: integer({ default: 5 * DAY_MS, min: 1_000, unit: 'ms' }),
    doc: 'An endpoint whose deliveries have all failed for this long is disabled (`disabledReason` says so); re-enable it with `PATCH`.',
  },
  WEBHOOK_SECRET_OVERLAP_MS: {
    section: 'egress',
    value: integer({ default: DAY_MS, min: 0, max: 30 * DAY_MS, unit: 'ms' }),
    doc: 'After a rotation, how long the previous signing secret still signs (two signatures in `webhook-signature`).',
  },
  WEBHOOK_CONCURRENCY: {
    section: 'egress',
    value: integer({ default: 16, min: 1, max: 256 }),
    doc: "Webhook deliveries a worker runs at once (the `webhook` queue's concurrency, instead of `WORKER_CONCURRENCY`'s: a delivery mostly waits on the network).",
  },
  WEBHOOK_ENDPOINT_CONCURRENCY: {
    section: 'egress',
    value: integer({ default: 4, min: 1, max: 64 }),
    doc: "Deliveries to one endpoint in flight at once, across workers: a slow endpoint holds at most this many of the `webhook` queue's slots.",
  },
  IMPORT_TIMEOUT_MS: {
    section: 'egress',
    value: integer({ default: 60_000, min: 500, max: 600_000, unit: 'ms' }),
    doc: "Longest a URL import's fetch may take, body included (`POST /media/upload/url`): past it the fetch is cut (`504 URL_FETCH_FAILED`) and nothing is kept. Connecting may take at most 5 s and the answer's headers 10 s of it. Keep it under `JOB_TIMEOUT_MS`.",
  },
  IMPORT_CONCURRENCY: {
    section: 'egress',
    value: integer({ default: 4, min: 1, max: 64 }),
    doc: "URL imports and direct uploads' read-backs a worker runs at once (the `import` queue's concurrency, instead of `WORKER_CONCURRENCY`'s: they mostly wait on the network, and never hold an image or PDF slot).",
  },
  // Malware scanning
  CLAMD_URL: {
    section: 'scanning',
    value: text({
      pattern: [
        /^(tcp:\/\/[A-Za-z0-9.:[\]-]+:\d{1,5}|unix:\/\S+)$/,
        'must be tcp://host:port or unix:/path/to/clamd.sock',
      ],
      type: '`tcp://host:port` or `unix:/path/to/clamd.sock`',
    }),
    unset: 'no scanning: records carry no `scanStatus` and every file is served as it is stored',
    doc: "The `clamd` that scans every stored file (its INSTREAM command), on the workers' `scan` queue. Set it on the API too: the API then refuses what the organization's scan policy does not serve.",
  },
  CLAMD_TIMEOUT_MS: {
    section: 'scanning',
    value: integer({ default: 60_000, min: 100, unit: 'ms' }),
    doc: "Longest one scan may take (connecting, sending, clamd's answer); past it the scan is retried with backoff and the file stays `pending`.",
  },
  CLAMD_MAX_BYTES: {
    section: 'scanning',
    value: integer({ default: 25 * MB, min: 1, unit: 'bytes' }),
    doc: "Largest file sent to clamd; a larger one is `unscanned`. Keep it at most clamd's `StreamMaxLength`, `MaxScanSize` and `MaxFileSize`: clamd answers `OK` for a file past `MaxScanSize` without having read it all (unless `AlertExceedsMax yes`).",
  },
  SCAN_POLICY: {
    section: 'scanning',
    value: oneOf(['clean-only', 'not-infected'], { default: 'clean-only' }),
    doc: 'What an organization without a policy of its own serves while scanning is on: `clean-only` serves, renders and takes as job input only `clean` files; `not-infected` also `pending` and `unscanned` ones. `infected` files are never served. Per organization: `cli.ts org scan-policy` ([operations.md](operations.md#malware-scanning)).',
  },

  // Tracing
  OTEL_TRACES_EXPORTER: {
    section: 'tracing',
    value: oneOf(['none', 'otlp', 'console'], {
      default: 'none',
      message: 'must be none, otlp or console',
    }),
    doc: 'Where spans go; `none`: tracing off, no SDK loaded.',
  },
  OTEL_SERVICE_NAME: {
    section: 'tracing',
    value: text(),
    unset: '`media-api`, `media-worker`',
    doc: '`service.name` of the spans.',
  },
  OTEL_EXPORTER_OTLP_ENDPOINT: {
    section: 'tracing',
    value: url(['http', 'https']),
    unset: '`http://localhost:4318`',
    doc: 'OTLP/HTTP collector; spans go to `<endpoint>/v1/traces`.',
  },
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: {
    section: 'tracing',
    value: url(['http', 'https']),
    unset: '`<OTEL_EXPORTER_OTLP_ENDPOINT>/v1/traces`',
    doc: 'The full traces URL, when it is not `<OTEL_EXPORTER_OTLP_ENDPOINT>/v1/traces`.',
  },
  OTEL_EXPORTER_OTLP_PROTOCOL: {
    section: 'tracing',
    value: oneOf(['http/protobuf', 'http/json'], {
      default: 'http/protobuf',
      message: 'must be http/protobuf or http/json (grpc is not supported: use port 4318)',
    }),
    doc: 'Encoding of the exports (gRPC is not supported).',
  },
  OTEL_EXPORTER_OTLP_HEADERS: {
    section: 'tracing',
    value: parsed({
      parse: parseOtlpHeaders,
      default: '',
      type: '`key=value,key2=value2`, values percent-encoded',
    }),
    secret: true,
    doc: 'Headers sent with every export (an API key, say).',
  },
  OTEL_TRACES_SAMPLER: {
    section: 'tracing',
    value: oneOf(SAMPLERS, {
      default: 'parentbased_always_on',
      message: `must be one of ${SAMPLERS.join(', ')}`,
    }),
    doc: 'Which traces are kept.',
  },
  OTEL_TRACES_SAMPLER_ARG: {
    section: 'tracing',
    value: decimal({ default: 1, min: 0, max: 1 }),
    doc: 'The ratio of the `traceidratio` samplers.',
  },
} as const satisfies Record<string, Variable<unknown>>;

export type VariableName = keyof typeof VARIABLES;
