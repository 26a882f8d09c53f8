/**
 * Readiness checks shared by the API and the worker: each dependency is
 * checked concurrently, each with its own short timeout, and reported by name
 * with how long it took (and why it failed). `cachedReadiness` answers every
 * probe of the same second with one round of checks, so a flood of probes
 * costs the dependencies nothing more.
 */
import { timeDependency, type Dependency, type DependencyMetrics } from './metrics';
import { withTimeout } from './with-timeout';

/** A named dependency check: resolves when the dependency answers. */
export type ReadinessChecks = Record<string, () => Promise<void>>;

export type CheckResult = { ok: true; ms: number } | { ok: false; ms: number; error: string };

export interface Readiness {
  status: 'ready' | 'not ready';
  checks: Record<string, CheckResult>;
}

export const READINESS_TIMEOUT_MS = 2_000;

/**
 * The checks of the three dependencies, each timed for the dependency metrics
 * (operation `readiness`); a check still running after `timeoutMs` counts as
 * an error, as /readyz reports it.
 */
export function observeChecks(
  checks: Record<Dependency, () => Promise<void>>,
  metrics: DependencyMetrics | undefined,
  timeoutMs = READINESS_TIMEOUT_MS,
): ReadinessChecks {
  return Object.fromEntries(
    (Object.entries(checks) as [Dependency, () => Promise<void>][]).map(([name, check]) => [
      name,
      () =>
        timeDependency(metrics, name, 'readiness', () =>
          withTimeout(Promise.resolve().then(check), timeoutMs, name),
        ),
    ]),
  );
}

export async function checkReadiness(
  checks: ReadinessChecks,
  timeoutMs = READINESS_TIMEOUT_MS,
): Promise<Readiness> {
  const results = await Promise.all(
    Object.entries(checks).map(async ([name, check]): Promise<[string, CheckResult]> => {
      const started = performance.now();
      const ms = () => Math.round(performance.now() - started);
      try {
        await withTimeout(Promise.resolve().then(check), timeoutMs, name);
        return [name, { ok: true, ms: ms() }];
      } catch (err) {
        const error = err instanceof Error ? err.message : String(err);
        return [name, { ok: false, ms: ms(), error }];
      }
    }),
  );
  const ready = results.every(([, r]) => r.ok);
  return { status: ready ? 'ready' : 'not ready', checks: Object.fromEntries(results) };
}

/** `checkReadiness` at most once per `ttlMs` (default 1 s): callers within it share the answer. */
export function cachedReadiness(
  checks: ReadinessChecks,
  ttlMs = 1_000,
  timeoutMs = READINESS_TIMEOUT_MS,
): () => Promise<Readiness> {
  let last: { at: number; answer: Promise<Readiness> } | undefined;
  return () => {
    const now = Date.now();
    if (!last || now - last.at >= ttlMs) {
      last = { at: now, answer: checkReadiness(checks, timeoutMs) };
      // A round still running counts from when it ends, not from when it began.
      void last.answer.then(() => {
        if (last) last.at = Date.now();
      });
    }
    return last.answer;
  };
}
