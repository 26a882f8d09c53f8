/**
 * Tracing for a worker process (shared/tracing), started before anything else
 * loads: worker/main.ts imports this module first, so the http, ioredis and
 * mongodb instrumentations patch those modules as they load. Nothing happens
 * unless OTEL_TRACES_EXPORTER is set (docs/operations.md, "Tracing").
 */
import { startProcessTracing } from '@shared/tracing';

export const tracing = startProcessTracing('media-worker');
