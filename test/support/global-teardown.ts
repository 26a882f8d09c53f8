/**
 * Jest global teardown for the integration tier: reconciles every isolated
 * environment the run made (see context.ts) while the services still run,
 * stops the services the global setup started, and fails the run, naming
 * the test files, when any environment holds an object without a record, a
 * record without its object or an open multipart upload.
 */
import { rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { register } from 'tsconfig-paths';
import type { EnvFinding } from './context';
import { stopAll } from './global-setup';

export default async function globalTeardown(): Promise<void> {
  const dir = process.env.TEST_ENV_REGISTRY;
  let findings: EnvFinding[] = [];
  let describe: ((f: typeof findings) => string) | undefined;
  try {
    if (dir) {
      // The reconciliation service imports through the path aliases, which jest's
      // module mapper does not provide outside test files.
      register({
        baseUrl: join(__dirname, '..', '..'),
        paths: { '@shared/*': ['shared/*'], '@api/*': ['api/*'], '@worker/*': ['worker/*'] },
      });
      const context = await import('./context');
      findings = await context.reconcileRegisteredEnvs(dir);
      describe = context.describeFindings;
    }
  } finally {
    if (process.env.TEST_TRACE_HANDLES) process.stderr.write(openSocketsReport());
    await stopAll(globalThis.__MEDIA_TEST_SERVICES__ ?? []);
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
  exitWatchdog(LINGER_MS);
  if (findings.length > 0) {
    const text = describe!(findings);
    process.stderr.write(`\n[reconcile] the test run left orphans behind:\n${text}\n`);
    throw new Error(
      `The test run left orphans in ${findings.length} environment(s); see [reconcile] above`,
    );
  }
  process.stdout.write('[reconcile] every test environment is clean\n');
}

/**
 * How long the run may linger after the teardown. A socket, timer or child
 * process a test forgot (in jest's process, or one a run in band, one file
 * alone, keeps) would keep the run alive until CI's time limit. After this
 * long the watchdog names what is still open and ends the process with the
 * exit code jest has already set (the tests' result).
 */
const LINGER_MS = 20_000;

function exitWatchdog(ms: number): void {
  setTimeout(() => {
    const lines = activeHandles().map((h) => `  ${h}`);
    process.stderr.write(
      `\n[teardown] the run was still alive ${ms / 1000} s after the teardown; open handles:\n` +
        `${lines.join('\n') || '  (none that Node lists)'}\n` +
        `  resources: ${process.getActiveResourcesInfo().join(', ')}\n`,
    );
    process.exit();
  }, ms).unref();
}

/** One line per handle Node keeps alive: its kind and what it is connected to. */
function activeHandles(): string[] {
  const handles = (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles();
  return handles.map((h) => {
    const o = h as Record<string, unknown> & { constructor?: { name?: string } };
    const kind = o.constructor?.name ?? typeof h;
    if (typeof o.pid === 'number')
      return `${kind} pid ${o.pid}: ${(o.spawnargs as string[] | undefined)?.join(' ') ?? ''}`;
    if ('remotePort' in o || 'localPort' in o) {
      const s = o as { localPort?: number; remoteAddress?: string; remotePort?: number };
      if (s.remotePort === undefined && s.localPort === undefined) {
        return `${kind} (${o._handle ? 'pipe or unconnected' : 'closed'})`;
      }
      return `${kind} local ${String(s.localPort)} → ${String(s.remoteAddress)}:${String(s.remotePort)}`;
    }
    if (typeof (o as { address?: unknown }).address === 'function') {
      try {
        return `${kind} listening on ${JSON.stringify((o as { address(): unknown }).address())}`;
      } catch {
        return kind;
      }
    }
    return kind;
  });
}

const root = resolve(__dirname, '..', '..');

/**
 * With TEST_TRACE_HANDLES=1 (see global-setup.ts): the client sockets still
 * open when the tests are done, each with the test frames that opened it.
 */
function openSocketsReport(): string {
  const stacks = globalThis.__MEDIA_TEST_SOCKETS__;
  if (!stacks) return '';
  const handles = (process as unknown as { _getActiveHandles(): object[] })._getActiveHandles();
  const lines: string[] = [];
  for (const h of handles) {
    const stack = stacks.get(h);
    if (stack === undefined) continue;
    const s = h as { remoteAddress?: string; remotePort?: number };
    // The frames of the repository's code that opened it (not node's, not this tracing's).
    const frames = stack
      .split('\n')
      .filter((l) => l.includes(root) && !l.includes('node_modules') && !l.includes('global-setup'))
      .slice(0, 12);
    lines.push(
      `  → ${String(s.remoteAddress)}:${String(s.remotePort)}, opened at:\n` +
        (frames.length ? frames.join('\n') : stack.split('\n').slice(1, 12).join('\n')),
    );
  }
  return lines.length
    ? `\n[teardown] ${lines.length} client connection(s) still open after the tests:\n${lines.join('\n')}\n`
    : '\n[teardown] no client connection left open by the tests\n';
}
