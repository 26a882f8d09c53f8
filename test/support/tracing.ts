/**
 * Tracing inside the jest process, for tests that run the API and the worker
 * in-process (test/support/api.ts, worker.ts): the SDK as production starts it
 * (shared/tracing), with its spans in an InMemorySpanExporter.
 *
 * Jest loads modules through its own registry, which OpenTelemetry's require
 * hooks never see; so each instrumentation's own patch is applied here to the
 * modules jest loaded (the same `_onRequire` its hook would call). Call it
 * before the API and worker are made: express is patched as routes are
 * mounted. Production needs none of this (test/e2e/tracing.test.ts runs the
 * real processes with their hooks).
 */
import { existsSync } from 'node:fs';
import { isBuiltin } from 'node:module';
import { dirname, join } from 'node:path';
import type {
  Instrumentation,
  InstrumentationBase,
  InstrumentationModuleDefinition,
} from '@opentelemetry/instrumentation';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { startTracing } from '../../shared/tracing';
import { activeInstrumentations } from '../../shared/tracing/sdk';

type OnRequire = (
  module: InstrumentationModuleDefinition,
  exports: unknown,
  name: string,
  baseDir?: string,
) => unknown;

/** Applies an instrumentation's patches to the modules (and files of modules) jest loads. */
function patchJestModules(instrumentation: Instrumentation): void {
  const onRequire = (instrumentation as unknown as { _onRequire: OnRequire })._onRequire.bind(
    instrumentation,
  );
  for (const definition of (instrumentation as InstrumentationBase).getModuleDefinitions()) {
    if (isBuiltin(definition.name)) {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      onRequire(definition, require(definition.name), definition.name);
      continue;
    }
    const baseDir = dirname(require.resolve(`${definition.name}/package.json`));
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    onRequire(definition, require(definition.name), definition.name, baseDir);
    for (const file of definition.files) {
      // By absolute path: jest's registry then gives the instance the package itself uses.
      const path = join(baseDir, file.name.slice(definition.name.length + 1));
      // (files of other major versions are absent; `_onRequire` checks the version of the rest)
      if (!existsSync(path)) continue;
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      onRequire(definition, require(path), file.name, baseDir);
    }
  }
}

export interface TestTracing {
  exporter: InMemorySpanExporter;
  spans(): ReadableSpan[];
  shutdown(): Promise<void>;
}

export function startTestTracing(): TestTracing {
  const exporter = new InMemorySpanExporter();
  const tracing = startTracing(undefined, { serviceName: 'media-test', exporter })!;
  for (const instrumentation of activeInstrumentations()) patchJestModules(instrumentation);
  return { exporter, spans: () => exporter.getFinishedSpans(), shutdown: () => tracing.shutdown() };
}
