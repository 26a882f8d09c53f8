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

/** The default process metrics, registered once per process. */
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
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

export interface ApiMetrics extends MetricsSource {
  /** One HTTP request answered: `route` is the Express route pattern (or `unmatched`). */
  observeRequest(method: string, route: string, status: number, seconds: number): void;
  /** Bytes of media committed by a successful upload, by endpoint (its route). */
  bytesStored(endpoint: string, bytes: number): void;
}

export interface ApiMetricsOptions {
  /** Read on each scrape for the queue depth gauge; a failure or timeout omits the gauge. */
  queueCounts?: () => Promise<Record<QueueName, Record<string, number>>>;
  /** How long a scrape waits for the queue counts (default 1 s). */
  queueCountsTimeoutMs?: number;
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
  return {
    ...sourceOf(registry),
    observeRequest(method, route, status, seconds) {
      requests.observe({ method, route, status: String(status) }, seconds);
    },
    bytesStored(endpoint, bytes) {
      if (bytes > 0) stored.inc({ endpoint }, bytes);
    },
  };
}

export type JobOutcomeLabel = 'completed' | 'failed' | 'retried';

export interface WorkerMetrics extends MetricsSource {
  /** One job attempt finished: completed, failed for good, or failed and to be retried. */
  observeJob(queue: string, name: string, outcome: JobOutcomeLabel, seconds: number): void;
}

export function createWorkerMetrics(): WorkerMetrics {
  const registry = new Registry();
  const jobs = new Histogram({
    name: 'media_job_duration_seconds',
    help: 'Job attempt duration in seconds, by queue, job name and outcome (completed, failed, retried)',
    labelNames: ['queue', 'name', 'outcome'] as const,
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
    registers: [registry],
  });
  return {
    ...sourceOf(registry),
    observeJob(queue, name, outcome, seconds) {
      jobs.observe({ queue, name, outcome }, seconds);
    },
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
