/**
 * The test environment of the tiers that use services: jest's node
 * environment, plus a check when a test file is done that it closed every
 * Redis and MongoDB client it opened (see jest-env.ts, which records them).
 * On a 2-core machine jest runs every file in its own process, one after
 * another, so a client left open outlives its file, reconnects forever once
 * the services stop, and keeps the run from ending. A file that leaves one is
 * named here, with where the client was made.
 */
import { TestEnvironment } from 'jest-environment-node';
import type { EnvironmentContext, JestEnvironmentConfig } from '@jest/environment';

/** What jest-env.ts records per client. */
export interface OpenClient {
  kind: string;
  stack: string;
  isOpen(): boolean;
}

export const OPEN_CLIENTS = '__MEDIA_TEST_OPEN_CLIENTS__';

export default class MediaTestEnvironment extends TestEnvironment {
  private readonly testPath: string;

  constructor(config: JestEnvironmentConfig, context: EnvironmentContext) {
    super(config, context);
    this.testPath = context.testPath;
  }

  override async teardown(): Promise<void> {
    // A client closed in the last afterAll may need a moment for its socket's close event.
    await new Promise((resolve) => setTimeout(resolve, 20));
    const clients = this.global[OPEN_CLIENTS] as Map<object, OpenClient> | undefined;
    const open = [...(clients?.values() ?? [])].filter((c) => {
      try {
        return c.isOpen();
      } catch {
        return false;
      }
    });
    if (open.length > 0) {
      const where = (stack: string) =>
        stack
          .split('\n')
          .filter(
            (l) =>
              l.includes('/test/') ||
              l.includes('/api/') ||
              l.includes('/worker/') ||
              l.includes('/shared/'),
          )
          .filter((l) => !l.includes('jest-env.ts'))
          .slice(0, 8)
          .join('\n');
      process.stderr.write(
        `\n[leak] ${this.testPath} left ${open.length} client(s) open:\n` +
          open.map((c) => `  ${c.kind}, made at:\n${where(c.stack)}`).join('\n') +
          '\n',
      );
    }
    await super.teardown();
  }
}
