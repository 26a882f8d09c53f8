/**
 * The service on a Redis Cluster: three masters started from `redis-server`
 * (test/support/services/redis-cluster.ts), REDIS_URL as
 * `redis+cluster://host:port,…` and QUEUE_PREFIX as a hash tag. An upload,
 * then a metadata job and a conversion through the API and a worker, both on
 * the cluster; the rate limiter counts there too. Every key the service made
 * in Redis hashes to the prefix's slot, so BullMQ's multi-key scripts never
 * cross slots. Also: the configuration refuses a cluster without a hash tag.
 */
import { Redis } from 'ioredis';
import { ConfigError, loadConfig } from '../../shared/config';
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { uniqueSuffix } from '../support/context';
import { startRedisCluster, type RedisCluster } from '../support/services/redis-cluster';
import { startWorker, type TestWorker } from '../support/worker';

type Body<T> = { statusCode: number; data: T; error?: string };

let cluster: RedisCluster;
let api: TestApi;
let worker: TestWorker;
let org: TestOrg;
const prefix = `{t-cluster-${uniqueSuffix()}}`;

beforeAll(async () => {
  cluster = await startRedisCluster();
  api = await startApi('cluster', { env: { REDIS_URL: cluster.url, QUEUE_PREFIX: prefix } });
  worker = await startWorker(api.env.env);
  org = await api.createOrg('cluster');
}, 90_000);

afterAll(async () => {
  await worker?.close();
  await api?.close();
  await cluster?.stop();
});

/** Every key on every master, with the slot it hashes to. */
async function keysOnCluster(): Promise<{ key: string; slot: number }[]> {
  const found: { key: string; slot: number }[] = [];
  for (const node of cluster.nodes) {
    const client = new Redis({ host: node.host, port: node.port, lazyConnect: true });
    try {
      await client.connect();
      const keys = await client.keys('*');
      for (const key of keys) {
        found.push({ key, slot: Number(await client.call('CLUSTER', 'KEYSLOT', key)) });
      }
    } finally {
      client.disconnect();
    }
  }
  return found;
}

it('refuses a cluster URL without a hash-tagged QUEUE_PREFIX, naming the variable', () => {
  expect(() => loadConfig({ REDIS_URL: cluster.url, QUEUE_PREFIX: 'media' })).toThrow(ConfigError);
  try {
    loadConfig({ REDIS_URL: cluster.url, QUEUE_PREFIX: 'media' });
  } catch (err) {
    expect((err as ConfigError).problems).toEqual([
      expect.stringMatching(/^QUEUE_PREFIX: must be a hash tag such as \{media\}/),
    ]);
  }
});

it('uploads, then runs a metadata job and a conversion through a worker on the cluster', async () => {
  const key = await org.upload('Canon_40D.jpg');

  const metadata = await fetch(`${api.url}/media/metadata?mediaKey=${encodeURIComponent(key)}`, {
    headers: org.auth,
  });
  expect(metadata.status).toBe(200);
  expect(((await metadata.json()) as Body<{ format: string; width: number }>).data).toMatchObject({
    format: 'jpeg',
    width: 100,
  });

  const convert = await fetch(`${api.url}/media/convert`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ mediaKey: key, format: 'webp' }),
  });
  expect(convert.status).toBe(201);
  const converted = ((await convert.json()) as Body<{ key: string; mimetype: string }>).data;
  expect(converted.mimetype).toBe('image/webp');
  expect(await api.objectKeys()).toEqual([key, converted.key].sort());

  // Every key the queues and the rate limiter made is in the hash tag's slot.
  const keys = await keysOnCluster();
  const ours = keys.filter((k) => k.key.startsWith(prefix));
  expect(ours.map((k) => k.key)).toEqual(
    expect.arrayContaining([
      `${prefix}:image:meta`,
      expect.stringMatching(/^\{t-cluster-[0-9a-f]+\}:image:image-/),
      expect.stringMatching(/^\{t-cluster-[0-9a-f]+\}:rate-limit:/),
    ]),
  );
  expect(new Set(ours.map((k) => k.slot)).size).toBe(1);
  expect(keys.filter((k) => !k.key.startsWith(prefix))).toEqual([]);
});

it('answers ready, with Redis checked on the cluster', async () => {
  const res = await fetch(`${api.url}/readyz`);
  expect(res.status).toBe(200);
  const fromWorker = await fetch(`${worker.opsUrl}/readyz`);
  expect(fromWorker.status).toBe(200);
});
