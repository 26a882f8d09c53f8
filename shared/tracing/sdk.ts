/**
 * The OpenTelemetry SDK, loaded by `./index.ts` only when tracing is on.
 *
 * - Provider: `@opentelemetry/sdk-trace`, the sampler of OTEL_TRACES_SAMPLER
 *   (and _ARG), the resource from OTEL_SERVICE_NAME (else the process's own
 *   name) and OTEL_RESOURCE_ATTRIBUTES.
 * - Export: OTLP over HTTP, protobuf or JSON (OTEL_EXPORTER_OTLP_PROTOCOL) to
 *   OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces,
 *   with OTEL_EXPORTER_OTLP_HEADERS, in batches; or to the console.
 * - Context: AsyncLocalStorage, and W3C trace context across processes.
 * - Instrumentations: http (server spans for requests, client spans for S3 and
 *   STS calls; health, readiness and metrics requests are not traced), express
 *   (the route's handler; router and middleware layers are left out), ioredis and mongodb (commands
 *   inside a traced request or job only: BullMQ's blocking polls between jobs
 *   would otherwise make a root span each).
 */
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter as OtlpJsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as OtlpProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { registerInstrumentations, type Instrumentation } from '@opentelemetry/instrumentation';
import { ExpressInstrumentation, ExpressLayerType } from '@opentelemetry/instrumentation-express';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis';
import { MongoDBInstrumentation } from '@opentelemetry/instrumentation-mongodb';
import {
  defaultResource,
  detectResources,
  envDetector,
  resourceFromAttributes,
} from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ConsoleSpanExporter,
  ParentBasedSampler,
  SimpleSpanProcessor,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type Sampler,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace';
import type { TracingConfig } from '../config';
import type { Tracing, TracingOptions } from './index';

/** Requests no trace is wanted for: probes and scrapes, every few seconds. */
const UNTRACED_PATHS = new Set(['/healthz', '/readyz', '/metrics']);

export function samplerOf(sampler: TracingConfig['sampler']): Sampler {
  const ratio = () => new TraceIdRatioBasedSampler(sampler.ratio);
  switch (sampler.name) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return ratio();
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio() });
  }
}

function processorOf(config: TracingConfig | undefined, options: TracingOptions): SpanProcessor {
  if (options.exporter) return new SimpleSpanProcessor({ exporter: options.exporter });
  if (!config || config.exporter === 'console')
    return new SimpleSpanProcessor({ exporter: new ConsoleSpanExporter() });
  const { url, headers, protocol } = config.otlp;
  const exporter =
    protocol === 'http/json'
      ? new OtlpJsonExporter({ url, headers })
      : new OtlpProtobufExporter({ url, headers });
  return new BatchSpanProcessor({ exporter });
}

/** The instrumentations of the libraries the service uses (see the module comment). */
export function instrumentations(): Instrumentation[] {
  return [
    new HttpInstrumentation({
      ignoreIncomingRequestHook: (req) => UNTRACED_PATHS.has((req.url ?? '').split('?')[0]!),
      requireParentforOutgoingSpans: true,
    }),
    // The route's handler only: a span per router or middleware layer passed through says little.
    new ExpressInstrumentation({
      ignoreLayersType: [ExpressLayerType.MIDDLEWARE, ExpressLayerType.ROUTER],
    }),
    new IORedisInstrumentation({ requireParentSpan: true }),
    new MongoDBInstrumentation({ requireParentSpan: true }),
  ];
}

let registered: Instrumentation[] = [];

/** The instrumentations the running SDK registered (tests apply them to what jest loads). */
export const activeInstrumentations = (): readonly Instrumentation[] => registered;

export function startSdk(config: TracingConfig | undefined, options: TracingOptions): Tracing {
  const resource = defaultResource()
    .merge(resourceFromAttributes({ 'service.name': options.serviceName }))
    .merge(detectResources({ detectors: [envDetector] }))
    .merge(
      config?.serviceName ? resourceFromAttributes({ 'service.name': config.serviceName }) : null,
    );
  const provider = new TracerProvider({
    resource,
    sampler: samplerOf(config?.sampler ?? { name: 'parentbased_always_on', ratio: 1 }),
    spanProcessors: [processorOf(config, options)],
  });
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  registered = instrumentations();
  const unregister = registerInstrumentations({
    tracerProvider: provider,
    instrumentations: registered,
  });
  return {
    forceFlush: () => provider.forceFlush(),
    async shutdown() {
      try {
        await provider.shutdown();
      } finally {
        unregister();
        registered = [];
        trace.disable();
        propagation.disable();
        context.disable();
      }
    },
  };
}
