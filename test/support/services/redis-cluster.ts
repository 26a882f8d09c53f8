/**
 * A Redis Cluster for the tests: three masters from Debian's `redis-server`
 * (no replicas), each on a free loopback port with its cluster bus on another
 * free port (`--cluster-port`, Redis 7), joined with
 * `redis-cli --cluster create … --cluster-replicas 0 --cluster-yes`, then
 * waited for until every node reports `cluster_state:ok` with all 16384 slots
 * served. Data lives in a temporary directory, nothing persisted.
 *
 * Needs `redis-server` and `redis-cli` on the PATH (Debian's redis-server
 * package has both; .ci/run installs it): fails, saying so, without them.
 */
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort, spawn, stopProcess, versionOf, waitFor, which } from './process';

export interface RedisCluster {
  /** `redis+cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>`, as REDIS_URL takes it. */
  url: string;
  nodes: { host: string; port: number }[];
  /** e.g. "Redis server v=7.0.15". */
  version: string;
  stop(): Promise<void>;
}

/** Asks one node something, on a short-lived connection of its own. */
async function ask(port: number, ...command: [string, ...string[]]): Promise<unknown> {
  const client = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  client.on('error', () => undefined); // (probe errors are expected until the node is up)
  try {
    await client.connect();
    return await client.call(...command);
  } finally {
    client.disconnect();
  }
}

export async function startRedisCluster(masters = 3): Promise<RedisCluster> {
  const server = which('redis-server');
  const cli = which('redis-cli');
  if (!server || !cli) {
    throw new Error(
      'A Redis Cluster for the tests needs redis-server and redis-cli on the PATH (apt-get install redis-server; .ci/run does)',
    );
  }
  const dir = await mkdtemp(join(tmpdir(), 'media-test-redis-cluster-'));
  const children: ReturnType<typeof spawn>[] = [];
  const stop = async () => {
    await Promise.all(children.map((c) => stopProcess(c)));
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const ports: number[] = [];
    for (let i = 0; i < masters; i++) {
      const port = await freePort();
      const busPort = await freePort();
      const nodeDir = join(dir, String(port));
      await mkdir(nodeDir);
      children.push(
        spawn(
          server,
          [
            '--port',
            String(port),
            '--bind',
            '127.0.0.1',
            '--dir',
            nodeDir,
            '--cluster-enabled',
            'yes',
            '--cluster-config-file',
            'nodes.conf',
            '--cluster-port',
            String(busPort),
            '--cluster-node-timeout',
            '5000',
            // BullMQ needs every key kept, as on a single server.
            '--maxmemory-policy',
            'noeviction',
            '--save',
            '',
            '--appendonly',
            'no',
          ],
          { stdio: 'ignore' },
        ),
      );
      ports.push(port);
    }
    for (const [i, port] of ports.entries()) {
      await waitFor(`redis-server (cluster node ${port})`, async () => {
        const child = children[i]!;
        if (child.exitCode !== null) throw new Error(`redis-server exited (${child.exitCode})`);
        return (await ask(port, 'PING')) === 'PONG';
      });
    }
    const create = spawnSync(
      cli,
      [
        '--cluster',
        'create',
        ...ports.map((p) => `127.0.0.1:${p}`),
        '--cluster-replicas',
        '0',
        '--cluster-yes',
      ],
      { encoding: 'utf8', timeout: 30_000 },
    );
    if (create.status !== 0) {
      throw new Error(
        `redis-cli --cluster create failed (${create.status ?? create.signal}):\n${create.stdout}${create.stderr}`,
      );
    }
    // Every node must agree the cluster is whole before a client relies on it.
    for (const port of ports) {
      await waitFor(`Redis Cluster (node ${port})`, async () => {
        const info = String(await ask(port, 'CLUSTER', 'INFO'));
        return /cluster_state:ok/.test(info) && /cluster_slots_ok:16384/.test(info);
      });
    }
    const nodes = ports.map((port) => ({ host: '127.0.0.1', port }));
    return {
      url: `redis+cluster://${nodes.map((n) => `${n.host}:${n.port}`).join(',')}`,
      nodes,
      version: versionOf(server).split(' ').slice(0, 3).join(' '),
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
