/**
 * Tracing with OpenTelemetry: one trace from an HTTP request through the queue
 * to the worker and back (docs/operations.md, "Tracing").
 *
 * Off by default: with OTEL_TRACES_EXPORTER unset or `none` no SDK is loaded
 * (`./sdk` is required only when tracing is on) and the spans this code makes
 * through `@opentelemetry/api` are the API's no-ops. On, `./sdk` registers a
 * tracer provider, the W3C trace-context propagator and the instrumentations
 * of http, express, ioredis and mongodb, which patch those modules as they
 * load: each process's `main.ts` imports its `tracing.ts` first, before
 * anything that loads them.
 *
 * Across the queue the context travels in the job: the API's `send` span is
 * injected into the payload's `trace` field (`traceparent`, `tracestate`), and
 * the worker's `process` span is its child.
 */
import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Span,
} from '@opentelemetry/api';
// (types only: erased from the compiled code, so they load no SDK)
import type { SpanExporter } from '@opentelemetry/sdk-trace';
import type * as Sdk from './sdk';
import { getConfig, type TracingConfig } from '../config';

/** The W3C trace context a job carries from the request that made it. */
export interface JobTrace {
  traceparent: string;
  tracestate?: string;
}

export interface Tracing {
  /** Exports what is buffered. */
  forceFlush(): Promise<void>;
  /** Flushes, then unregisters the provider, the propagator and the instrumentations. */
  shutdown(): Promise<void>;
}

export interface TracingOptions {
  /** service.name when OTEL_SERVICE_NAME is not set. */
  serviceName: string;
  /** Tests: export here, span by span, instead of the configured exporter. */
  exporter?: SpanExporter;
}

/**
 * Starts tracing as configured; undefined (nothing loaded, nothing started)
 * when tracing is off.
 */
export function startTracing(
  config: TracingConfig | undefined,
  options: TracingOptions,
): Tracing | undefined {
  if (!config && !options.exporter) return undefined;
  // Loaded only when tracing is on: the SDK, its exporters and instrumentations stay out of a
  // process that does not trace. (A static import would load them all.)
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const sdk = require('./sdk') as typeof Sdk;
  return sdk.startSdk(config, options);
}

/**
 * Tracing for a process's entry point, from its configuration; undefined when
 * off, or when the configuration is invalid (main() then reports it).
 */
export function startProcessTracing(serviceName: string): Tracing | undefined {
  let config: TracingConfig | undefined;
  try {
    config = getConfig().tracing;
  } catch {
    return undefined;
  }
  return startTracing(config, { serviceName });
}

const tracer = () => trace.getTracer('media-storage-service');

/** Runs `fn` in a new active span, ended when it settles; a failure marks it as an error. */
export function inSpan<T>(
  name: string,
  kind: SpanKind,
  attributes: Attributes,
  fn: (span: Span) => Promise<T>,
  parent = context.active(),
): Promise<T> {
  return tracer().startActiveSpan(name, { kind, attributes }, parent, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      span.recordException(err instanceof Error ? err : new Error(String(err)));
      span.setStatus({ code: SpanStatusCode.ERROR });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** The active context as a job's `trace` field; undefined when tracing is off. */
export function currentJobTrace(): JobTrace | undefined {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  if (!carrier.traceparent) return undefined;
  return carrier.tracestate
    ? { traceparent: carrier.traceparent, tracestate: carrier.tracestate }
    : { traceparent: carrier.traceparent };
}

/** The context a job's `trace` field names (the root context when it has none). */
export function jobContext(jobTrace: JobTrace | undefined) {
  if (!jobTrace || typeof jobTrace.traceparent !== 'string') return ROOT_CONTEXT;
  return propagation.extract(ROOT_CONTEXT, { ...jobTrace });
}

export { SpanKind };
