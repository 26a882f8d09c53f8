/**
 * Redis that hangs (connections stay open, nothing answers) rather than going
 * away: the job endpoints still answer 503 within their bound (the producer's
 * command timeout) instead of hanging, uploads and downloads that need no
 * queue are served, and everything answers normally once Redis does again,
 * without a restart. (Redis going away is test/e2e/redis-down.test.ts.)
 */
import { PRODUCER_COMMAND_TIMEOUT_MS } from '../../../shared/queue/redis';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { redisUrl } from '../../support/context';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { hostPortOf, startTcpProxy, type TcpProxy } from '../../support/tcp-proxy';

/** The bound asserted: the producer's timeout, plus room for a loaded machine. */
const BOUND_MS = PRODUCER_COMMAND_TIMEOUT_MS + 3_000;

let proxy: TcpProxy;
let api: TestApi;
let org: TestOrg;
let key: string;

beforeAll(async () => {
  const target = hostPortOf(redisUrl());
  proxy = await startTcpProxy(target.host, target.port);
  api = await startApi('redis-hung', { env: { REDIS_URL: proxy.via(redisUrl()) } });
  org = await api.createOrg();
  key = await org.upload('Canon_40D.jpg');
});

afterAll(async () => {
  proxy.thaw();
  await api.close();
  await proxy.close();
});

async function timed(path: string, init: RequestInit = {}) {
  const started = Date.now();
  const res = await fetch(`${api.url}${path}`, {
    ...init,
    headers: { ...org.auth, ...(init.headers as Record<string, string> | undefined) },
  });
  const body = (await res.json()) as Record<string, unknown>;
  return { res, body, ms: Date.now() - started };
}

it('answers the job endpoints 503 within the bound while Redis hangs, serves uploads and downloads, and recovers', async () => {
  proxy.freeze();
  try {
    const metadata = await timed(`/media/metadata?mediaKey=${encodeURIComponent(key)}`);
    const convert = await timed('/media/convert', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKey: key, format: 'webp' }),
    });
    const status = await timed('/media/jobs/image-00000000-0000-4000-8000-000000000000');
    for (const [path, r] of [
      ['/media/metadata', metadata],
      ['/media/convert', convert],
      ['/media/jobs/{id}', status],
    ] as const) {
      expect({ path, status: r.res.status, body: r.body }).toMatchObject({
        path,
        status: 503,
        body: { error: 'DEPENDENCY_UNAVAILABLE', dependency: 'Redis' },
      });
      expect({ path, withinBound: r.ms < BOUND_MS }).toEqual({ path, withinBound: true });
    }
    expectMatchesSpec('get', '/media/metadata', 503, metadata.body, metadata.res.headers);

    // No queue needed: served (the rate limiter gives up on Redis after 1 s and lets it through).
    const download = await fetch(`${api.url}/media/download?media=${encodeURIComponent(key)}`, {
      headers: org.auth,
    });
    expect(download.status).toBe(200);
    expect(Buffer.from(await download.arrayBuffer())).toEqual(fixture('Canon_40D.jpg'));
    await org.upload('Canon_40D.jpg', 'again.jpg'); // 201
  } finally {
    proxy.thaw();
  }
  // Redis answers again: the same API serves the queue (an unknown job id is a plain 404).
  await eventually(async () => {
    const again = await timed('/media/jobs/image-00000000-0000-4000-8000-000000000000');
    expect(again.res.status).toBe(404);
  }, 20_000);
  expect((await fetch(`${api.url}/readyz`)).status).toBe(200);
}, 60_000);
