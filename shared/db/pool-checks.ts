/**
 * How often the MongoDB driver's connection pools run their upkeep.
 *
 * Every pool of the driver (one per server) wakes every 100 ms, busy or idle,
 * to top itself up to `minPoolSize` and to drop connections past
 * `maxIdleTimeMS` (`ConnectionPool.ensureMinPoolSize`). With both at their
 * defaults (0, as here) that upkeep has nothing to do, and connections of a
 * cleared pool are dropped when they are checked out anyway; but the wake-ups
 * cost an idle API about 1.5 ms of CPU a second, more than half of what it
 * spends idle (docs/performance.md, "Idle processes").
 *
 * The interval is the pool's `minPoolSizeCheckFrequencyMS`, which the driver
 * does not take from MongoClient's options (it refuses unknown ones), so it is
 * set on each pool here: on the servers the client has, and on every server
 * it opens later (a replica set's members found by discovery). The pools and
 * their options are the driver's internals: where they are not found (another
 * driver version), nothing is changed and `false` says so; the MongoDB smoke
 * test (test/integration/services/mongodb.smoke.test.ts) checks they are
 * found on the version installed.
 */
import type { MongoClient } from 'mongodb';

/** The pools' upkeep interval here: 10 s, as the driver's own heartbeat. */
export const POOL_CHECK_MS = 10_000;

interface PoolLike {
  options: { minPoolSizeCheckFrequencyMS?: unknown };
}
interface ServerLike {
  pool?: PoolLike;
}

function serversOf(client: MongoClient): Map<string, ServerLike> | undefined {
  const topology = (client as unknown as { topology?: { s?: { servers?: unknown } } }).topology;
  const servers = topology?.s?.servers;
  return servers instanceof Map ? (servers as Map<string, ServerLike>) : undefined;
}

/** Sets the upkeep interval of one pool; false when it does not look like the driver's pool. */
function setPool(pool: PoolLike | undefined, everyMs: number): boolean {
  const options = pool?.options;
  if (!pool || typeof options !== 'object' || options === null) return false;
  if (typeof options.minPoolSizeCheckFrequencyMS !== 'number') return false;
  if (options.minPoolSizeCheckFrequencyMS === everyMs) return true;
  // The options object is frozen; the pool reads it afresh each time it re-arms its timer.
  pool.options = Object.freeze({ ...options, minPoolSizeCheckFrequencyMS: everyMs });
  return true;
}

/**
 * Sets every pool of `client` (now and later) to run its upkeep every
 * `everyMs`. Call once the client is connected. Answers whether the pools
 * were found and set.
 */
export function setPoolChecks(client: MongoClient, everyMs = POOL_CHECK_MS): boolean {
  const applyAll = (): boolean => {
    const servers = serversOf(client);
    if (!servers || servers.size === 0) return false;
    let all = true;
    for (const server of servers.values()) all = setPool(server.pool, everyMs) && all;
    return all;
  };
  // A server opened later gets its pool as it is made: set once it is in the topology's map.
  client.on('serverOpening', () => setImmediate(applyAll));
  return applyAll();
}

/** The upkeep interval of each of `client`'s pools (for tests and diagnostics). */
export function poolCheckIntervals(client: MongoClient): number[] {
  const servers = serversOf(client);
  if (!servers) return [];
  return [...servers.values()].map((s) => Number(s.pool?.options.minPoolSizeCheckFrequencyMS));
}
