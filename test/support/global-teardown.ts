/**
 * Jest global teardown for the integration tier: reconciles every isolated
 * environment the run made (see context.ts) while the services still run,
 * stops the services the global setup started, and fails the run, naming
 * the test files, when any environment holds an object without a record, a
 * record without its object or an open multipart upload.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
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
    await stopAll(globalThis.__MEDIA_TEST_SERVICES__ ?? []);
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
  if (findings.length > 0) {
    const text = describe!(findings);
    process.stderr.write(`\n[reconcile] the test run left orphans behind:\n${text}\n`);
    throw new Error(
      `The test run left orphans in ${findings.length} environment(s); see [reconcile] above`,
    );
  }
  process.stdout.write('[reconcile] every test environment is clean\n');
}
