/**
 * The Bull dashboard: every queue, behind operator credentials; off without
 * them; read-only unless DASHBOARD_WRITE=true; never framed by another site;
 * and an address that fails to log in DASHBOARD_AUTH_FAILURE_LIMIT times is
 * locked out (right credentials included) until DASHBOARD_LOCKOUT_MS has
 * passed, while other addresses are served.
 */
import { randomBytes } from 'node:crypto';
import { Worker, type Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { startApi, type TestApi } from '../../support/api';
import { eventually } from '../../support/eventually';

const basic = (user: string, password: string) => ({
  Authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`,
});

describe('with operator credentials configured', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi('dashboard', {
      env: { DASHBOARD_USER: 'ops', DASHBOARD_PASSWORD: 's3cret-pass' },
    });
  });
  afterAll(() => api.close());

  it('refuses requests without them, or with wrong ones, or with an API token (401)', async () => {
    const org = await api.createOrg();
    for (const headers of [{}, basic('ops', 'wrong'), basic('nobody', 's3cret-pass'), org.auth]) {
      const res = await fetch(`${api.url}/admin/queues`, { headers });
      expect(res.status).toBe(401);
      expect(res.headers.get('www-authenticate')).toMatch(/^Basic/);
      expect(((await res.json()) as { error: string }).error).toBe('UNAUTHORIZED');
    }
    const api401 = await fetch(`${api.url}/admin/queues/api/queues`);
    expect(api401.status).toBe(401);
  });

  it('shows every queue to an operator', async () => {
    const page = await fetch(`${api.url}/admin/queues`, { headers: basic('ops', 's3cret-pass') });
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    const res = await fetch(`${api.url}/admin/queues/api/queues`, {
      headers: basic('ops', 's3cret-pass'),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { queues: { name: string }[] };
    expect(body.queues.map((q) => q.name).sort()).toEqual([
      'image',
      'import',
      'maintenance',
      'pdf',
      'scan',
      'webhook',
    ]);
  });
});

describe('its pages and answers', () => {
  it('may not be framed by another site (X-Frame-Options, CSP frame-ancestors), logged in or not', async () => {
    const api = await startApi('dashboardframe', {
      env: { DASHBOARD_USER: 'ops', DASHBOARD_PASSWORD: 's3cret-pass' },
    });
    try {
      for (const headers of [basic('ops', 's3cret-pass'), {}]) {
        for (const path of ['/admin/queues', '/admin/queues/api/queues']) {
          const res = await fetch(`${api.url}${path}`, { headers });
          await res.arrayBuffer();
          expect(res.headers.get('x-frame-options')).toBe('DENY');
          expect(res.headers.get('content-security-policy')).toBe("frame-ancestors 'none'");
        }
      }
    } finally {
      await api.close();
    }
  });
});

describe('failed logins, per client address', () => {
  const octet = () => randomBytes(1)[0]!;
  /** Through the proxy (TRUST_PROXY=true): the client's own X-Forwarded-For, then the address the proxy saw. */
  const page = (api: TestApi, address: string, headers: Record<string, string>) =>
    fetch(`${api.url}/admin/queues/api/queues`, {
      headers: { ...headers, 'X-Forwarded-For': `198.18.${octet()}.${octet()}, ${address}` },
    });
  const right = basic('ops', 's3cret-pass');
  const wrong = () => basic('ops', `guess-${octet()}`);

  it('lock the address out past DASHBOARD_AUTH_FAILURE_LIMIT, right credentials included; other addresses are served', async () => {
    const api = await startApi('dashboardlock', {
      env: {
        DASHBOARD_USER: 'ops',
        DASHBOARD_PASSWORD: 's3cret-pass',
        DASHBOARD_AUTH_FAILURE_LIMIT: '3',
        DASHBOARD_LOCKOUT_MS: '600000',
        TRUST_PROXY: 'true',
      },
    });
    try {
      // An operator's own requests are not failures, however many.
      for (let i = 0; i < 5; i++) expect((await page(api, '203.0.113.9', right)).status).toBe(200);
      for (let i = 0; i < 3; i++)
        expect((await page(api, '203.0.113.9', wrong())).status).toBe(401);
      for (const headers of [wrong(), right, {}]) {
        const res = await page(api, '203.0.113.9', headers);
        expect(res.status).toBe(429);
        expect(((await res.json()) as { error: string }).error).toBe('RATE_LIMITED');
        expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(500);
      }
      expect((await page(api, '198.51.100.4', right)).status).toBe(200);
      expect((await page(api, '198.51.100.4', wrong())).status).toBe(401);
    } finally {
      await api.close();
    }
  });

  it('let the address in again once DASHBOARD_LOCKOUT_MS has passed', async () => {
    const api = await startApi('dashboardunlock', {
      env: {
        DASHBOARD_USER: 'ops',
        DASHBOARD_PASSWORD: 's3cret-pass',
        DASHBOARD_AUTH_FAILURE_LIMIT: '2',
        DASHBOARD_LOCKOUT_MS: '2000',
        TRUST_PROXY: 'true',
      },
    });
    try {
      for (let i = 0; i < 2; i++)
        expect((await page(api, '203.0.113.10', wrong())).status).toBe(401);
      expect((await page(api, '203.0.113.10', right)).status).toBe(429);
      await eventually(
        async () => expect((await page(api, '203.0.113.10', right)).status).toBe(200),
        10_000,
        250,
      );
    } finally {
      await api.close();
    }
  });
});

describe('without operator credentials', () => {
  it('is not served at all', async () => {
    const api = await startApi('nodashboard');
    try {
      const res = await fetch(`${api.url}/admin/queues`, { headers: basic('ops', 'x') });
      expect(res.status).toBe(404);
    } finally {
      await api.close();
    }
  });
});

/**
 * The dashboard's actions change other organizations' jobs
 * (retry, clean, remove, pause), so they are off unless the operator turns
 * them on with DASHBOARD_WRITE=true.
 */
describe('its actions', () => {
  const operator = basic('ops', 's3cret-pass');

  /** A failed job, a waiting one and a delayed one in the image queue (no worker runs here). */
  async function seed(api: TestApi) {
    const queue = api.ctx.queue.queue('image');
    const failing = await queue.add('dashboard.test', { n: 1 });
    const worker = new Worker('image', null, {
      connection: new Redis(api.env.config.redisUrl!, { maxRetriesPerRequest: null }),
      prefix: api.env.queuePrefix,
      autorun: false,
    });
    try {
      const token = 'dashboard-test';
      const taken = await worker.getNextJob(token, { block: false });
      expect(taken.id).toBe(failing.id);
      await taken.moveToFailed(new Error('made to fail'), token, false);
    } finally {
      await worker.close();
      await worker.disconnect();
    }
    const waiting = await queue.add('dashboard.test', { n: 2 }, { priority: 5 });
    const delayed = await queue.add('dashboard.test', { n: 3 }, { delay: 3_600_000 });
    return { queue, failed: failing.id!, waiting: waiting.id!, delayed: delayed.id! };
  }

  /** The actions an operator's click sends: retry, clean, remove, pause, and a few more. */
  const actions = (ids: {
    failed: string;
    waiting: string;
    delayed: string;
  }): [string, string][] => [
    ['PUT', `/api/queues/image/${ids.failed}/retry`],
    ['PUT', '/api/queues/image/retry/failed'],
    ['PUT', `/api/queues/image/${ids.waiting}/clean`], // removes the job
    ['PUT', '/api/queues/image/clean/failed'],
    ['PUT', `/api/queues/image/${ids.delayed}/promote`],
    ['PATCH', `/api/queues/image/${ids.waiting}/priority`],
    ['PATCH', `/api/queues/image/${ids.waiting}/update-data`],
    ['POST', '/api/queues/image/add'],
    ['PUT', '/api/queues/image/pause'],
    ['PUT', '/api/queues/pause'],
    ['PUT', '/api/queues/image/empty'],
    ['PUT', '/api/queues/image/obliterate'],
  ];

  const send = (api: TestApi, method: string, path: string) =>
    fetch(`${api.url}/admin/queues${path}`, {
      method,
      headers: { ...operator, 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: 'x', data: { n: 9 }, priority: 1, delay: 0, options: {} }),
    });

  const snapshot = async (
    queue: Queue,
    ids: { failed: string; waiting: string; delayed: string },
  ) => ({
    paused: await queue.isPaused(),
    counts: await queue.getJobCounts('waiting', 'prioritized', 'delayed', 'failed', 'completed'),
    states: [
      await queue.getJobState(ids.failed),
      await queue.getJobState(ids.waiting),
      await queue.getJobState(ids.delayed),
    ],
    data: (await queue.getJob(ids.waiting))?.data as unknown,
  });

  it('are refused by default (405, read-only), and nothing changes; reading still works', async () => {
    const api = await startApi('dashboardro', {
      env: { DASHBOARD_USER: 'ops', DASHBOARD_PASSWORD: 's3cret-pass' },
    });
    try {
      const ids = await seed(api);
      const before = await snapshot(ids.queue, ids);
      expect(before).toEqual({
        paused: false,
        counts: { waiting: 0, prioritized: 1, delayed: 1, failed: 1, completed: 0 },
        states: ['failed', 'prioritized', 'delayed'],
        data: { n: 2 },
      });
      for (const [method, path] of actions(ids)) {
        const res = await send(api, method, path);
        expect(`${method} ${path} → ${res.status}`).toBe(`${method} ${path} → 405`);
        expect(res.headers.get('allow')).toBe('GET, HEAD');
        expect(((await res.json()) as { error: string }).error).toBe('METHOD_NOT_ALLOWED');
      }
      expect(await snapshot(ids.queue, ids)).toEqual(before);

      // Reading is what the read-only dashboard is for: the queues, flagged read-only, and a job.
      const list = await fetch(`${api.url}/admin/queues/api/queues`, { headers: operator });
      expect(list.status).toBe(200);
      const queues = ((await list.json()) as { queues: { name: string; readOnlyMode: boolean }[] })
        .queues;
      expect(queues.map((q) => [q.name, q.readOnlyMode]).sort()).toEqual([
        ['image', true],
        ['import', true],
        ['maintenance', true],
        ['pdf', true],
        ['scan', true],
        ['webhook', true],
      ]);
      const job = await fetch(`${api.url}/admin/queues/api/queues/image/${ids.failed}`, {
        headers: operator,
      });
      expect(job.status).toBe(200);
      await ids.queue.obliterate({ force: true });
    } finally {
      await api.close();
    }
  });

  it('are allowed with DASHBOARD_WRITE=true: retry, remove and pause take effect', async () => {
    const api = await startApi('dashboardrw', {
      env: { DASHBOARD_USER: 'ops', DASHBOARD_PASSWORD: 's3cret-pass', DASHBOARD_WRITE: 'true' },
    });
    try {
      const ids = await seed(api);
      const retried = await send(api, 'PUT', `/api/queues/image/${ids.failed}/retry`);
      expect(retried.status).toBe(204);
      const removed = await send(api, 'PUT', `/api/queues/image/${ids.waiting}/clean`);
      expect(removed.status).toBe(204);
      const paused = await send(api, 'PUT', '/api/queues/image/pause');
      expect(paused.status).toBe(200);
      expect(await snapshot(ids.queue, ids)).toMatchObject({
        paused: true,
        states: ['waiting', 'unknown', 'delayed'],
      });
      const queues = (
        (await (
          await fetch(`${api.url}/admin/queues/api/queues`, { headers: operator })
        ).json()) as { queues: { readOnlyMode: boolean }[] }
      ).queues;
      expect(queues.every((q) => !q.readOnlyMode)).toBe(true);
      await ids.queue.obliterate({ force: true });
    } finally {
      await api.close();
    }
  });
});
