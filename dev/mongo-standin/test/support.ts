/**
 * What the stand-in's tests share: the MongoDB the conformance suites run
 * against (a stand-in of their own, or the server MONGODB_URI names, to check
 * that the suites assert what MongoDB does) and a bounded polling helper.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConnectionString } from 'mongodb-connection-string-url';
import { startMongoStandin } from '../src';

/** A short random suffix, lower-case, for database and collection names. */
export const uniqueSuffix = (bytes = 5): string => randomBytes(bytes).toString('hex');

export interface MongoTarget {
  /** Which server: "stand-in at …" or "MONGODB_URI". */
  backend: string;
  /** The URI of database `dbName` on it. */
  uri(dbName: string): string;
  /** Stops the stand-in this started (nothing for MONGODB_URI). */
  close(): Promise<void>;
}

/** The server a conformance suite runs against: MONGODB_URI if set, else a fresh stand-in. */
export async function mongoTarget(): Promise<MongoTarget> {
  const external = process.env.MONGODB_URI;
  const withDatabase = (base: string, dbName: string) => {
    const cs = new ConnectionString(base);
    cs.pathname = `/${dbName}`;
    return cs.toString();
  };
  if (external) {
    return {
      backend: 'MONGODB_URI',
      uri: (db) => withDatabase(external, db),
      close: async () => {},
    };
  }
  const standin = await startMongoStandin();
  return {
    backend: `stand-in at ${standin.uri}`,
    uri: (db) => withDatabase(standin.uri, db),
    close: () => standin.close(),
  };
}

/**
 * Calls `check` until it returns without throwing, at most every
 * `intervalMs`; after `timeoutMs` rethrows its last failure.
 */
export async function eventually<T>(
  check: () => T | Promise<T>,
  timeoutMs = 15_000,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(intervalMs);
    }
  }
}
