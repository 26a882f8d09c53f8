/**
 * Prometheus metrics (prom-client), the one place that knows the library.
 * Each process builds its own registry (the API's or the worker's), so tests
 * that run several in one process never share series; the default process
 * metrics (CPU, memory, event loop, GC) are collected once per process and
 * appended to every scrape. Routes and the worker see the small typed
 * interfaces below, never prom-client itself.
 */
import { timingSafeEqual } from 'node:crypto';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { QueueName } from './config';
import { withTimeout } from './with-timeout';

/** What a scrape answers. */
export interface MetricsSource {
  readonly contentType: string;
  render(): Promise<string>;
}

let processRegistry: Registry | undefined;

/**
 * How often the event loop's delay is sampled for `nodejs_eventloop_lag_*`, in
 * ms. prom-client's default, 10 ms, wakes an idle process 100 times a second:
 * 7 ms of CPU a second on the benchmark machine (a bare Node process: 0.5 ms
 * with no sampling, 1.9 ms at 100 ms), about half an idle API's, which a
 * direct upload pays while its client sends the bytes (docs/direct-uploads.md,
 * "The figure"). At 100 ms a scrape every 15 s still has 150 samples, and a
 * stall is measured to within 100 ms, well under the lag alert's 0.5 s
 * (deploy/prometheus/alerts.yml).
 */
export const EVENT_LOOP_SAMPLE_MS = 100;

/** The default process metrics, registered once per process. */
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({
      register: processRegistry,
      eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS,
    });
  }
  return processRegistry;
}

function sourceOf(registry: Registry): MetricsSource {
  const defaults = processMetrics();
  return {
    contentType: registry.contentType,
    async render() {
      const [own, process] = await Promise.all([registry.metrics(), defaults.metrics()]);
      return `${own.trimEnd()}\n\n${process}`;
    },
  };
}

/** The services each process depends on, as the `dependency` label names them. */
export type Dependency = 'mongodb' | 'redis' | 'storage';

/** Latency and errors of calls to MongoDB, Redis and storage (both processes). */
export interface DependencyMetrics {
  /**
   * One call answered (`ok`) or failed: `operation` is a small fixed set per
   * dependency (a storage method, a MongoDB command name, a queue operation,
   * `readiness`), never a key or an id.
   */
  observeDependency(dependency: Dependency, operation: string, seconds: number, ok: boolean): void;
}

const DEPENDENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** The dependency histogram and error counter, in `registry`. */
function dependencyMetrics(registry: Registry): DependencyMetrics {
  const duration = new Histogram({
    name: 'media_dependency_duration_seconds',
    help: 'Duration of calls to MongoDB, Redis and storage in seconds, by dependency and operation (failed calls included)',
    labelNames: ['dependency', 'operation'] as const,
    buckets: DEPENDENCY_BUCKETS,
    registers: [registry],
  });
  const errors = new Counter({
    name: 'media_dependency_errors_total',
    help: 'Calls to MongoDB, Redis and storage that failed (unreachable, timed out, refused), by dependency and operation',
    labelNames: ['dependency', 'operation'] as const,
    registers: [registry],
  });
  return {
    observeDependency(dependency, operation, seconds, ok) {
      duration.observe({ dependency, operation }, seconds);
      if (!ok) errors.inc({ dependency, operation });
    },
  };
}

/**
 * Times `fn` as one call to `dependency`: observed when it settles, an error
 * unless `isError` says the failure is the dependency's answer (a missing
 * object, a refusal) rather than the dependency failing.
 */
export async function timeDependency<T>(
  metrics: DependencyMetrics | undefined,
  dependency: Dependency,
  operation: string,
  fn: () => Promise<T>,
  isError: (err: unknown) => boolean = () => true,
): Promise<T> {
  if (!metrics) return fn();
  const started = performance.now();
  try {
    const result = await fn();
    metrics.observeDependency(dependency, operation, (performance.now() - started) / 1000, true);
    return result;
  } catch (err) {
    const seconds = (performance.now() - started) / 1000;
    metrics.observeDependency(dependency, operation, seconds, !isError(err));
    throw err;
  }
}

export interface ApiMetrics extends MetricsSource, DependencyMetrics {
  /** One HTTP request answered: `route` is the Express route pattern (or `unmatched`). */
  observeRequest(method: string, route: string, status: number, seconds: number): void;
  /** Bytes of media committed by a successful upload, by endpoint (its route). */
  bytesStored(endpoint: string, bytes: number): void;
  /** Bytes of media sent by downloads (bodies only; a download cut short counts what was sent). */
  bytesServed(bytes: number): void;
  /** One render answered: from a stored variant, or after a render job (this request's or a shared one). */
  renderAnswered(outcome: 'stored' | 'rendered'): void;
  /** Bytes a resumable (tus) PATCH brought in. */
  resumableBytesReceived(bytes: number): void;
  /** A writer found a resumable upload locked: it got the lock after waiting, or was refused (423). */
  resumableLockWait(outcome: 'acquired' | 'refused'): void;
  /** A direct-to-storage upload requested, completed into a record, refused at completion, or cancelled. */
  directUpload(outcome: DirectUploadOutcomeLabel): void;
}

export type DirectUploadOutcomeLabel = 'requested' | 'completed' | 'refused' | 'cancelled';

export interface ApiMetricsOptions {
  /** Read on each scrape for the queue depth gauge; a failure or timeout omits the gauge. */
  queueCounts?: () => Promise<Record<QueueName, Record<string, number>>>;
  /** How long a scrape waits for the queue counts (default 1 s). */
  queueCountsTimeoutMs?: number;
  /** Read on each scrape: resumable uploads in progress; a failure omits the gauge. */
  resumableInProgress?: () => Promise<number>;
  /** Read on each scrape for the domain events' gauges; a failure or timeout omits them. */
  eventStats?: () => Promise<{ pending: number; oldestSeconds: number }>;
}

export function createApiMetrics(options: ApiMetricsOptions = {}): ApiMetrics {
  const registry = new Registry();
  const requests = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request duration in seconds, by method, route pattern and status',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  });
  const stored = new Counter({
    name: 'media_bytes_stored_total',
    help: 'Bytes of media stored by successful uploads, by endpoint',
    labelNames: ['endpoint'] as const,
    registers: [registry],
  });
  const served = new Counter({
    name: 'media_bytes_served_total',
    help: 'Bytes of media sent by downloads (response bodies)',
    registers: [registry],
  });
  const renders = new Counter({
    name: 'media_renders_total',
    help: 'GET /media/render answers, by outcome: stored (a stored variant, no job) or rendered (after a render job)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  const resumableBytes = new Counter({
    name: 'media_resumable_bytes_received_total',
    help: 'Bytes received by resumable (tus) uploads, kept or not',
    registers: [registry],
  });
  const resumableLockWaits = new Counter({
    name: 'media_resumable_lock_waits_total',
    help: 'Resumable upload requests that found the upload locked, by outcome: acquired (after waiting) or refused (423)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  const directUploads = new Counter({
    name: 'media_direct_uploads_total',
    help: 'Direct-to-storage uploads by outcome: requested, completed (a record written), refused (at completion: size, type, checksum, quota), cancelled (DELETE)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  const { resumableInProgress } = options;
  if (resumableInProgress) {
    new Gauge({
      name: 'media_resumable_uploads_in_progress',
      help: 'Resumable (tus) uploads created, not finished and not expired, read from Redis on each scrape',
      registers: [registry],
      async collect() {
        this.reset();
        const count = await resumableInProgress().catch(() => undefined);
        if (count !== undefined) this.set(count);
      },
    });
  }
  const dependencies = dependencyMetrics(registry);
  const { queueCounts } = options;
  if (queueCounts) {
    const timeoutMs = options.queueCountsTimeoutMs ?? 1_000;
    new Gauge({
      name: 'media_queue_jobs',
      help: 'Jobs per queue and state, read from Redis on each scrape (absent when Redis does not answer)',
      labelNames: ['queue', 'state'] as const,
      registers: [registry],
      async collect() {
        this.reset();
        let counts: Record<string, Record<string, number>>;
        try {
          counts = await withTimeout(queueCounts(), timeoutMs, 'Redis');
        } catch {
          return; // Redis down: the scrape still answers, without this gauge's samples.
        }
        for (const [queue, states] of Object.entries(counts)) {
          for (const [state, n] of Object.entries(states)) this.set({ queue, state }, n);
        }
      },
    });
  }
  const { eventStats } = options;
  if (eventStats) {
    // One read per scrape serves both gauges (the first to collect reads, the other reuses it).
    let reading: Promise<{ pending: number; oldestSeconds: number } | undefined> | undefined;
    const read = () => {
      reading ??= withTimeout(eventStats(), options.queueCountsTimeoutMs ?? 1_000, 'MongoDB')
        .catch(() => undefined)
        .finally(() => setImmediate(() => (reading = undefined)));
      return reading;
    };
    new Gauge({
      name: 'media_events_pending',
      help: 'Domain events recorded or pending in their documents and not dispatched yet',
      registers: [registry],
      async collect() {
        this.reset();
        const stats = await read();
        if (stats) this.set(stats.pending);
      },
    });
    new Gauge({
      name: 'media_events_oldest_pending_seconds',
      help: 'Age of the oldest domain event not dispatched yet (0 when none)',
      registers: [registry],
      async collect() {
        this.reset();
        const stats = await read();
        if (stats) this.set(stats.oldestSeconds);
      },
    });
  }
  return {
    ...sourceOf(registry),
    observeRequest(method, route, status, seconds) {
      requests.observe({ method, route, status: String(status) }, seconds);
    },
    bytesStored(endpoint, bytes) {
      if (bytes > 0) stored.inc({ endpoint }, bytes);
    },
    bytesServed(bytes) {
      if (bytes > 0) served.inc(bytes);
    },
    renderAnswered(outcome) {
      renders.inc({ outcome });
    },
    resumableBytesReceived(bytes) {
      if (bytes > 0) resumableBytes.inc(bytes);
    },
    resumableLockWait(outcome) {
      resumableLockWaits.inc({ outcome });
    },
    directUpload(outcome) {
      directUploads.inc({ outcome });
    },
    observeDependency: (dependency, operation, seconds, ok) =>
      dependencies.observeDependency(dependency, operation, seconds, ok),
  };
}

export type JobOutcomeLabel = 'completed' | 'failed' | 'retried';

export interface WorkerMetrics extends MetricsSource, DependencyMetrics {
  /** One job attempt finished: completed, failed for good, or failed and to be retried. */
  observeJob(queue: string, name: string, outcome: JobOutcomeLabel, seconds: number): void;
  /** How long a job waited in its queue, from being added to its first attempt starting. */
  observeWait(queue: string, name: string, seconds: number): void;
  /** One attempt failed, by error code (an AppError's code, or INTERNAL): for good, or to be retried. */
  jobFailed(queue: string, name: string, code: string, outcome: 'failed' | 'retried'): void;
  /** One malware scan ended (worker/services/scan.service.ts). */
  scanned(outcome: ScanOutcomeLabel, seconds: number, bytes: number): void;
  /** One URL import ended (worker/services/import.service.ts), and the bytes it stored. */
  imported(outcome: ImportOutcomeLabel, bytes: number): void;
  /** Expired resumable uploads whose bytes the `media.expire-resumable` job removed. */
  resumableExpiredCleaned(count: number): void;
  /** Expired direct-to-storage uploads whose bytes the `upload.expire-direct` job removed. */
  directExpiredCleaned(count: number): void;
}

/**
 * How a URL import ended: `stored`, `reused` (the organization's record of
 * the same bytes answered), `refused` (the URL, the type, the size or the
 * quota), or `failed` (the remote server failed or was too slow, or storage).
 */
export type ImportOutcomeLabel = 'stored' | 'reused' | 'refused' | 'failed';

/** How a scan attempt ended: a verdict, or `error` (clamd away or failing: retried, the file stays pending). */
export type ScanOutcomeLabel = 'clean' | 'infected' | 'unscanned' | 'error';

export function createWorkerMetrics(): WorkerMetrics {
  const registry = new Registry();
  const jobs = new Histogram({
    name: 'media_job_duration_seconds',
    help: 'Job attempt duration in seconds, by queue, job name and outcome (completed, failed, retried)',
    labelNames: ['queue', 'name', 'outcome'] as const,
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
    registers: [registry],
  });
  const wait = new Histogram({
    name: 'media_job_wait_seconds',
    help: 'Time a job waited in its queue in seconds, from added to its first attempt started (BullMQ timestamps), by queue and job name',
    labelNames: ['queue', 'name'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    registers: [registry],
  });
  const failures = new Counter({
    name: 'media_job_failures_total',
    help: 'Failed job attempts by queue, job name, error code (the AppError code, or INTERNAL) and outcome (failed for good, or retried)',
    labelNames: ['queue', 'name', 'code', 'outcome'] as const,
    registers: [registry],
  });
  const scans = new Counter({
    name: 'media_scans_total',
    help: 'Malware scans by outcome: clean, infected, unscanned (over the scanner limit) or error (clamd away or failing; retried)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  const scanSeconds = new Histogram({
    name: 'media_scan_duration_seconds',
    help: 'Duration of one malware scan in seconds (reading the object and clamd scanning it), by outcome',
    labelNames: ['outcome'] as const,
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  });
  const scanBytes = new Counter({
    name: 'media_scanned_bytes_total',
    help: 'Bytes of files clamd gave a verdict on (clean or infected)',
    registers: [registry],
  });
  const imports = new Counter({
    name: 'media_imports_total',
    help: 'URL imports by outcome: stored, reused (onDuplicate=reuse), refused (URL, type, size or quota) or failed (the remote server, a timeout, storage)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  const importedBytes = new Counter({
    name: 'media_imported_bytes_total',
    help: 'Bytes stored by URL imports',
    registers: [registry],
  });
  const resumableExpired = new Counter({
    name: 'media_resumable_expired_cleaned_total',
    help: 'Expired resumable uploads whose stored bytes the cleanup removed',
    registers: [registry],
  });
  const directExpired = new Counter({
    name: 'media_direct_uploads_expired_cleaned_total',
    help: 'Expired direct-to-storage uploads (never completed) whose bytes, multipart upload and booking the cleanup removed',
    registers: [registry],
  });
  const dependencies = dependencyMetrics(registry);
  return {
    ...sourceOf(registry),
    resumableExpiredCleaned(count) {
      if (count > 0) resumableExpired.inc(count);
    },
    directExpiredCleaned(count) {
      if (count > 0) directExpired.inc(count);
    },
    imported(outcome, bytes) {
      imports.inc({ outcome });
      if (outcome === 'stored') importedBytes.inc(bytes);
    },
    scanned(outcome, seconds, bytes) {
      scans.inc({ outcome });
      scanSeconds.observe({ outcome }, seconds);
      if (outcome === 'clean' || outcome === 'infected') scanBytes.inc(bytes);
    },
    observeJob(queue, name, outcome, seconds) {
      jobs.observe({ queue, name, outcome }, seconds);
    },
    observeWait(queue, name, seconds) {
      wait.observe({ queue, name }, Math.max(0, seconds));
    },
    jobFailed(queue, name, code, outcome) {
      failures.inc({ queue, name, code, outcome });
    },
    observeDependency: (dependency, operation, seconds, ok) =>
      dependencies.observeDependency(dependency, operation, seconds, ok),
  };
}

/**
 * Whether a scrape may read the metrics: always when no METRICS_TOKEN is set
 * (the endpoint is then meant for internal networks only), otherwise only
 * with `Authorization: Bearer <METRICS_TOKEN>`.
 */
export function metricsAuthorized(authorization: string | undefined, token: string | undefined) {
  if (!token) return true;
  const expected = Buffer.from(`Bearer ${token}`);
  const given = Buffer.from(authorization ?? '');
  return given.length === expected.length && timingSafeEqual(given, expected);
}
