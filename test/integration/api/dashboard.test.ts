/** The Bull dashboard: every queue, behind operator credentials; off without them. */
import { startApi, type TestApi } from '../../support/api';

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
    expect(body.queues.map((q) => q.name).sort()).toEqual(['image', 'maintenance', 'pdf']);
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
