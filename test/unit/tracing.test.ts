/**
 * Tracing's switch and settings: off (OTEL_TRACES_EXPORTER unset or none) an
 * entry point loads no SDK, exporter or instrumentation at all; on, it loads
 * them before anything else. The sampler follows OTEL_TRACES_SAMPLER, and a
 * job's trace field round-trips the W3C context.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
} from '@opentelemetry/sdk-trace';
import { samplerOf } from '../../shared/tracing/sdk';

const root = join(__dirname, '..', '..');

/** Loads a process's tracing module in a fresh Node, and says which packages were loaded. */
function loadTracingModule(entry: string, env: NodeJS.ProcessEnv) {
  const script = `
    const { tracing } = require(${JSON.stringify(entry)});
    const loaded = Object.keys(require.cache);
    const has = (p) => loaded.some((k) => k.includes('/node_modules/' + p + '/'));
    console.log(JSON.stringify({
      started: tracing !== undefined,
      sdk: has('@opentelemetry/sdk-trace'),
      exporter: has('@opentelemetry/exporter-trace-otlp-proto'),
      instrumentation: has('@opentelemetry/instrumentation-http'),
      express: has('express'),
    }));
    if (tracing) tracing.shutdown();`;
  const run = spawnSync(process.execPath, ['--import', 'tsx', '-e', script], {
    cwd: root,
    encoding: 'utf8',
    env: { PATH: process.env.PATH, ...env },
    timeout: 30_000,
  });
  expect(run.stderr).toBe('');
  return JSON.parse(run.stdout.trim().split('\n').at(-1)!) as Record<string, boolean>;
}

describe('tracing on and off', () => {
  it('off by default: the entry module loads no SDK, exporter or instrumentation', () => {
    for (const env of [{}, { OTEL_TRACES_EXPORTER: 'none' }]) {
      expect(loadTracingModule('./api/tracing.ts', env)).toEqual({
        started: false,
        sdk: false,
        exporter: false,
        instrumentation: false,
        express: false,
      });
    }
  }, 60_000);

  it('on: the SDK and the instrumentations are loaded, before express', () => {
    expect(
      loadTracingModule('./worker/tracing.ts', {
        OTEL_TRACES_EXPORTER: 'otlp',
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9',
      }),
    ).toEqual({ started: true, sdk: true, exporter: true, instrumentation: true, express: false });
  }, 60_000);

  it('a bad configuration starts nothing (main reports it)', () => {
    expect(
      loadTracingModule('./api/tracing.ts', { OTEL_TRACES_EXPORTER: 'otlp', PORT: 'x' }),
    ).toMatchObject({ started: false, sdk: false });
  }, 60_000);
});

describe('sampler', () => {
  it('follows OTEL_TRACES_SAMPLER and its ratio', () => {
    expect(samplerOf({ name: 'always_on', ratio: 1 })).toBeInstanceOf(AlwaysOnSampler);
    expect(samplerOf({ name: 'always_off', ratio: 1 })).toBeInstanceOf(AlwaysOffSampler);
    expect(samplerOf({ name: 'traceidratio', ratio: 0.25 })).toBeInstanceOf(
      TraceIdRatioBasedSampler,
    );
    expect(String(samplerOf({ name: 'traceidratio', ratio: 0.25 }))).toContain('0.25');
    for (const name of [
      'parentbased_always_on',
      'parentbased_always_off',
      'parentbased_traceidratio',
    ] as const) {
      expect(samplerOf({ name, ratio: 0.5 })).toBeInstanceOf(ParentBasedSampler);
    }
  });
});
