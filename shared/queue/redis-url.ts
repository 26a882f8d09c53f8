/**
 * What REDIS_URL names: one Redis server (`redis://`, `rediss://`, as ioredis
 * reads them) or a Redis Cluster (`redis+cluster://` or `rediss+cluster://`
 * with a comma-separated list of seed nodes, e.g.
 * `rediss+cluster://:password@10.0.0.1:6379,10.0.0.2:6379`). The credentials
 * and TLS of a cluster URL apply to every node; the seeds only need to reach
 * the cluster, which then tells the client every node it has.
 *
 * Pure (no ioredis): the configuration schema validates with it.
 */

export interface RedisClusterNode {
  host: string;
  port: number;
}

export type RedisTarget =
  | { mode: 'single'; url: string }
  | {
      mode: 'cluster';
      nodes: RedisClusterNode[];
      username: string | undefined;
      password: string | undefined;
      tls: boolean;
    };

export const REDIS_URL_SCHEMES = ['redis', 'rediss', 'redis+cluster', 'rediss+cluster'] as const;

const CLUSTER_URL = /^(rediss?)\+cluster:\/\/(?:([^@/?#]*)@)?([^/?#]+)(\/[^?#]*)?$/i;

/** Parses REDIS_URL; throws an Error whose message says what is wrong (never the password). */
export function parseRedisUrl(url: string): RedisTarget {
  const scheme = /^([a-z+]+):\/\//i.exec(url)?.[1]?.toLowerCase();
  if (scheme === 'redis' || scheme === 'rediss') {
    try {
      new URL(url);
    } catch {
      throw new Error(`is not a valid ${scheme}:// URL`);
    }
    return { mode: 'single', url };
  }
  if (scheme !== 'redis+cluster' && scheme !== 'rediss+cluster') {
    throw new Error(
      `must be a ${REDIS_URL_SCHEMES.map((s) => `${s}://`).join(', ')} URL (a cluster lists its seed nodes: redis+cluster://host:port,host:port)`,
    );
  }
  const m = CLUSTER_URL.exec(url);
  if (!m)
    throw new Error(
      'is not a valid cluster URL: use redis+cluster://[user:password@]host:port[,host:port…]',
    );
  const [, base, userinfo, hosts, path] = m;
  if (path && path !== '/' && path !== '/0') {
    throw new Error('a Redis Cluster has database 0 only: remove the path from the URL');
  }
  const nodes = hosts!.split(',').map((entry) => parseNode(entry.trim()));
  let username: string | undefined;
  let password: string | undefined;
  if (userinfo !== undefined) {
    const colon = userinfo.indexOf(':');
    const user = colon === -1 ? userinfo : userinfo.slice(0, colon);
    const pass = colon === -1 ? undefined : userinfo.slice(colon + 1);
    try {
      username = user ? decodeURIComponent(user) : undefined;
      password = pass ? decodeURIComponent(pass) : undefined;
    } catch {
      throw new Error('has badly percent-encoded credentials');
    }
  }
  return { mode: 'cluster', nodes, username, password, tls: base!.toLowerCase() === 'rediss' };
}

function parseNode(entry: string): RedisClusterNode {
  // host:port, [ipv6]:port, or a host alone (port 6379)
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]\s]+))(?::(\d{1,5}))?$/.exec(entry);
  const port = Number(m?.[3] ?? 6379);
  if (!m || port < 1 || port > 65535) {
    throw new Error(`has a bad cluster node "${entry}": expected host:port`);
  }
  return { host: (m[1] ?? m[2])!, port };
}

/** True when the prefix is one Redis Cluster hash tag (`{media}`), so every key it starts lands in one slot. */
export function isHashTagged(prefix: string): boolean {
  return /^\{[^{}]+\}$/.test(prefix);
}
