/**
 * GET /healthz and /readyz of the API and the worker, against the real
 * services; storage that stops answering (cut with a TCP proxy) makes the
 * API's readiness answer 503 naming it.
 */
import { startApi, startApiWithProxiedStorage, type TestApi } from '../../support/api';
import { eventually } from '../../support/eventually';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Readiness = {
  status: string;
  checks: Record<string, { ok: boolean; ms: number; error?: string }>;
};

async function readyz(base: string) {
  const res = await fetch(`${base}/readyz`);
  return { res, body: (await res.json()) as Readiness };
}

describe('readiness of the API and the worker (services up)', () => {
  let api: TestApi;
  let worker: TestWorker;
  beforeAll(async () => {
    api = await startApi('readyz');
    worker = await startWorker(api.env.env);
  });
  afterAll(async () => {
    await worker.close();
    await api.close();
  });

  it('API: /healthz 200, /readyz 200 with mongodb, redis and storage ok, as the document says', async () => {
    expect((await fetch(`${api.url}/healthz`)).status).toBe(200);
    const { res, body } = await readyz(api.url);
    expect(res.status).toBe(200);
    expectMatchesSpec('GET', '/readyz', 200, body, res.headers);
    expect(body).toEqual({
      status: 'ready',
      checks: {
        mongodb: { ok: true, ms: expect.any(Number) as number },
        redis: { ok: true, ms: expect.any(Number) as number },
        storage: { ok: true, ms: expect.any(Number) as number },
      },
    });
  });

  it('worker: /healthz 200, /readyz 200 with the same three checks', async () => {
    expect((await fetch(`${worker.opsUrl}/healthz`)).status).toBe(200);
    const { res, body } = await readyz(worker.opsUrl);
    expect([res.status, body.status]).toEqual([200, 'ready']);
    expect(Object.keys(body.checks).sort()).toEqual(['mongodb', 'redis', 'storage']);
    expect(Object.values(body.checks).every((c) => c.ok)).toBe(true);
  });

  it("worker: errors in the API's envelope (404, 405, 401)", async () => {
    for (const [init, path, status, code] of [
      [{}, '/nothing', 404, 'NOT_FOUND'],
      [{ method: 'POST' }, '/healthz', 405, 'METHOD_NOT_ALLOWED'],
    ] as const) {
      const res = await fetch(`${worker.opsUrl}${path}`, {
        ...init,
        headers: { 'X-Request-Id': 'ops-req-1' },
      });
      expect(res.status).toBe(status);
      expect(await res.json()).toEqual({
        statusCode: status,
        message: expect.any(String) as string,
        error: code,
        requestId: 'ops-req-1',
      });
    }
  });
});

describe('readiness details are for operators, and checked at most once a second', () => {
  it('with METRICS_TOKEN set: the status to anyone, the checks only with the token; a flood of probes makes one round', async () => {
    const api = await startApi('readyzop', { env: { METRICS_TOKEN: 'operator-secret' } });
    try {
      const anyone = await readyz(api.url);
      expect(anyone.res.status).toBe(200);
      expect(anyone.body).toEqual({ status: 'ready' });
      const operator = await fetch(`${api.url}/readyz`, {
        headers: { Authorization: 'Bearer operator-secret' },
      });
      const detailed = (await operator.json()) as Readiness;
      expect(Object.keys(detailed.checks).sort()).toEqual(['mongodb', 'redis', 'storage']);
      // 50 probes at once are answered from one round of checks: the same timings in every answer.
      const answers = await Promise.all(
        Array.from({ length: 50 }, () =>
          fetch(`${api.url}/readyz`, { headers: { Authorization: 'Bearer operator-secret' } }).then(
            (r) => r.json() as Promise<Readiness>,
          ),
        ),
      );
      expect(new Set(answers.map((a) => JSON.stringify(a.checks))).size).toBe(1);
    } finally {
      await api.close();
    }
  });
});

describe('readiness when storage is unreachable', () => {
  it('API: /readyz 503 naming storage, the others still ok; 200 again once it is back', async () => {
    const { api, proxy, close } = await startApiWithProxiedStorage('readyzs3');
    try {
      await proxy.cut();
      const started = Date.now();
      const { res, body } = await readyz(api.url);
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(res.status).toBe(503);
      expectMatchesSpec('GET', '/readyz', 503, body, res.headers);
      expect(body.status).toBe('not ready');
      expect(body.checks.storage).toMatchObject({ ok: false, error: expect.any(String) as string });
      expect(body.checks.mongodb!.ok).toBe(true);
      expect(body.checks.redis!.ok).toBe(true);
      // Liveness does not look at dependencies.
      expect((await fetch(`${api.url}/healthz`)).status).toBe(200);
      await proxy.restore();
      // Checks run at most once a second: the next round sees storage back.
      await eventually(async () => expect((await readyz(api.url)).res.status).toBe(200));
    } finally {
      await close();
    }
  });
});
