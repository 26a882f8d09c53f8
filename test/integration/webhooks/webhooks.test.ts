/**
 * Webhooks through the real API, worker, Redis, S3 and MongoDB, delivered
 * over HTTP to a receiver on loopback. The receiver's address (127.0.0.3) is
 * opened on purpose through the allowlist (EGRESS_ALLOWLIST=127.0.0.3/32,
 * EGRESS_ALLOWED_PORTS its port): no network namespace. Every delivery is
 * verified with the `standardwebhooks` package. Retries run on a short
 * schedule (WEBHOOK_RETRY_SCHEDULE=0,300ms,300ms); the default schedule is
 * held by test/unit/webhook-schedule.test.ts under a fake clock; a worker
 * process killed mid-delivery, by test/e2e/webhooks-crash.test.ts.
 */
import { once } from 'node:events';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import type { JobPayloads } from '../../../shared/jobs';
import { attemptUuid } from '../../../shared/webhooks/messages';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { cliSession } from '../../support/cli';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

const RECEIVER_IP = '127.0.0.3';
const PDF = fixture('minimal-document.pdf');

interface Received {
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  at: number;
}

let api: TestApi;
let worker: TestWorker;
let receiver: http.Server;
let base: string;
let org: TestOrg;
const received: Received[] = [];
/** Per path: what the receiver answers, in order (the last one repeats); `hang` never answers. */
const scripts = new Map<
  string,
  ({ status: number; headers?: Record<string, string> } | 'hang')[]
>();
const logLines: string[] = [];
/** Per path: requests held open now, and the most at once. */
const hanging = new Map<string, number>();
const mostHanging = new Map<string, number>();

beforeAll(async () => {
  receiver = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const path = req.url!;
      received.push({ path, headers: req.headers, body, at: Date.now() });
      const script = scripts.get(path) ?? [{ status: 200 }];
      const step = script.length > 1 ? script.shift()! : script[0]!;
      if (step === 'hang') {
        // Held open until the sender gives up; counted while open.
        const open = (hanging.get(path) ?? 0) + 1;
        hanging.set(path, open);
        mostHanging.set(path, Math.max(mostHanging.get(path) ?? 0, open));
        res.on('close', () => hanging.set(path, (hanging.get(path) ?? 1) - 1));
        return;
      }
      res.writeHead(step.status, step.headers ?? {}).end(`answer ${step.status}`);
    });
  });
  receiver.listen(0, RECEIVER_IP);
  await once(receiver, 'listening');
  const port = (receiver.address() as AddressInfo).port;
  base = `http://${RECEIVER_IP}:${port}`;
  api = await startApi('webhooks', {
    env: {
      RATE_LIMIT_MAX: '0',
      EGRESS_ALLOWLIST: `${RECEIVER_IP}/32`,
      EGRESS_ALLOWED_PORTS: String(port),
      WEBHOOK_RETRY_SCHEDULE: '0,300ms,300ms',
      WEBHOOK_MAX_ENDPOINTS: '6',
      WEBHOOK_TIMEOUT_MS: '5000',
      JOB_LOCK_MS: '1000',
      WEBHOOK_CONCURRENCY: '4',
      WEBHOOK_ENDPOINT_CONCURRENCY: '2',
    },
  });
  worker = await startWorker(
    api.env.env,
    { LOG_LEVEL: 'debug' },
    { logTo: { write: (line: string) => void logLines.push(line) } },
  );
  org = await api.createOrg();
}, 60_000);

afterAll(async () => {
  receiver.closeAllConnections();
  receiver.close();
  await worker?.close();
  await api?.close();
});

/** What the tests read of an answer's `data` (each answer has some of it). */
interface Data {
  id: number;
  secret: string;
  events: string[];
  enabled: boolean;
  disabledReason: string | null;
  webhooks: unknown[];
  deliveries: Entry[];
  replayed: string[];
  messageId: string;
  previousSecretExpiresAt: string | null;
}
type Entry = Record<string, unknown>;
interface Body {
  error?: string;
  message?: string;
  data: Data;
}

async function call(
  method: string,
  path: string,
  body?: unknown,
  auth: { Authorization: string } = org.auth,
): Promise<{ status: number; body: Body }> {
  const res = await fetch(`${api.url}${path}`, {
    method,
    headers: { ...auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  const answer = { status: res.status, body: (text ? JSON.parse(text) : {}) as Body };
  // Every answer is as api/openapi.yaml describes it.
  const template = path.split('?')[0]!.replace(/^\/media\/webhooks\/\d+/, '/media/webhooks/{id}');
  expectMatchesSpec(method, template, answer.status, answer.body, res.headers);
  return answer;
}

/** An endpoint of `owner` (an organization of its own per test: each upload goes to all its endpoints). */
async function createEndpoint(
  owner: TestOrg,
  path: string,
  events: string[] = ['media.created'],
): Promise<{ id: number; secret: string }> {
  const created = await call(
    'POST',
    '/media/webhooks',
    { url: `${base}${path}`, events },
    owner.auth,
  );
  expect(created).toMatchObject({ status: 201 });
  return created.body.data;
}

/** The requests the receiver had at `path`, each verified with the secret(s). */
function deliveriesTo(path: string, ...secrets: string[]): Received[] {
  const out = received.filter((r) => r.path === path);
  for (const r of out) {
    for (const secret of secrets) {
      new Webhook(secret).verify(r.body, r.headers as Record<string, string>);
    }
  }
  return out;
}

async function log(owner: TestOrg, id: number): Promise<Entry[]> {
  const answer = await call('GET', `/media/webhooks/${id}/deliveries`, undefined, owner.auth);
  expect(answer.status).toBe(200);
  return answer.body.data.deliveries;
}

describe('endpoints', () => {
  it('refuses URLs the guard refuses, with the reason, and keeps nothing', async () => {
    for (const url of [
      'http://127.0.0.1/hook',
      'http://localhost/hook',
      'http://[::ffff:127.0.0.1]/hook',
      'http://169.254.169.254/latest',
      'file:///etc/passwd',
      'http://user:pw@example.com/',
      `http://${RECEIVER_IP}:22/`,
    ]) {
      const answer = await call('POST', '/media/webhooks', { url, events: ['media.created'] });
      expect({ url, status: answer.status, code: answer.body.error }).toEqual({
        url,
        status: 400,
        code: 'URL_NOT_ALLOWED',
      });
      expect(answer.body.message).toMatch(/not allowed: .+/);
    }
    const other = await api.createOrg();
    expect(
      (await call('GET', '/media/webhooks', undefined, other.auth)).body.data.webhooks,
    ).toEqual([]);
  });

  it('create shows the secret once; nothing else answers it; update, delete, cap, tenancy', async () => {
    const own = await api.createOrg();
    const created = await call(
      'POST',
      '/media/webhooks',
      { url: `${base}/crud`, events: ['media.created', 'job.failed'], description: 'mine' },
      own.auth,
    );
    expect(created.status).toBe(201);
    const { id, secret } = created.body.data;
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(created.body.data).toMatchObject({
      enabled: true,
      description: 'mine',
      disabledReason: null,
    });

    const answers = [
      await call('GET', '/media/webhooks', undefined, own.auth),
      await call('GET', `/media/webhooks/${id}`, undefined, own.auth),
      await call('PATCH', `/media/webhooks/${id}`, { events: ['media.deleted'] }, own.auth),
      await call('GET', `/media/webhooks/${id}/deliveries`, undefined, own.auth),
    ];
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(JSON.stringify(a.body)).not.toContain(secret.slice(6));
    }
    expect(answers[2]!.body.data.events).toEqual(['media.deleted']);
    expect(
      (await call('PATCH', `/media/webhooks/${id}`, { url: 'http://10.0.0.1/' }, own.auth)).body
        .error,
    ).toBe('URL_NOT_ALLOWED');

    // Another organization sees nothing of it.
    expect((await call('GET', `/media/webhooks/${id}`)).status).toBe(404);
    expect((await call('DELETE', `/media/webhooks/${id}`)).status).toBe(404);

    // The cap (WEBHOOK_MAX_ENDPOINTS=6).
    for (let i = 0; i < 5; i++) {
      const more = await call(
        'POST',
        '/media/webhooks',
        { url: `${base}/crud`, events: ['media.created'] },
        own.auth,
      );
      expect(more.status).toBe(201);
    }
    const over = await call(
      'POST',
      '/media/webhooks',
      { url: `${base}/crud`, events: ['media.created'] },
      own.auth,
    );
    expect({ status: over.status, code: over.body.error }).toEqual({
      status: 409,
      code: 'CONFLICT',
    });

    expect((await call('DELETE', `/media/webhooks/${id}`, undefined, own.auth)).status).toBe(200);
    expect((await call('GET', `/media/webhooks/${id}`, undefined, own.auth)).status).toBe(404);
  });

  it('needs the webhooks scope', async () => {
    const limited = await api.ctx.tokens.issue(org.organization.id, {
      scopes: ['read', 'write', 'delete'],
    });
    const auth = { Authorization: `Bearer ${limited.token}` };
    for (const [method, path, body] of [
      ['GET', '/media/webhooks', undefined],
      ['POST', '/media/webhooks', { url: `${base}/x`, events: ['media.created'] }],
      ['GET', '/media/webhooks/1/deliveries', undefined],
      ['POST', '/media/webhooks/1/rotate', undefined],
    ] as const) {
      const answer = await call(method, path, body, auth);
      expect({ path, status: answer.status, code: answer.body.error }).toEqual({
        path,
        status: 403,
        code: 'INSUFFICIENT_SCOPE',
      });
    }
  });
});

describe('the operator CLI', () => {
  it('creates (secret once), disables and deletes endpoints (URLs checked as the API does)', async () => {
    const owner = await api.createOrg();
    // One CLI process for the three commands (test/integration/cli.test.ts checks the process).
    const session = await cliSession(api.env.env);
    const cli = (...args: string[]) => session.run(...args);
    try {
      const slug = owner.organization.slug;
      const created = await cli(
        'webhook:create',
        '--org',
        slug,
        '--url',
        `${base}/cli`,
        '--events',
        'media.created,job.failed',
      );
      expect(created.code).toBe(0);
      const { id, secret } = JSON.parse(created.stdout) as { id: number; secret: string };
      expect(secret).toMatch(/^whsec_/);
      const disabled = await cli('webhook:update', '--id', String(id), '--enabled', 'false');
      expect(disabled.code).toBe(0);
      const listed = await call('GET', '/media/webhooks', undefined, owner.auth);
      expect(listed.body.data.webhooks).toEqual([
        expect.objectContaining({ id, enabled: false, events: ['media.created', 'job.failed'] }),
      ]);
      expect(
        disabled.stdout + listed.body.data.webhooks.map((w) => JSON.stringify(w)).join(''),
      ).not.toContain(secret);
      expect((await cli('webhook:delete', '--id', String(id))).code).toBe(0);
      expect(
        (await call('GET', '/media/webhooks', undefined, owner.auth)).body.data.webhooks,
      ).toEqual([]);
    } finally {
      await session.close();
    }
  }, 60_000);
});

describe('deliveries', () => {
  it('an upload is delivered signed, thin, and logged', async () => {
    const owner = await api.createOrg();
    const { id, secret } = await createEndpoint(owner, '/created');
    const record = await owner.uploadRecord(PDF, 'hello.pdf');
    const [delivery] = await eventually(() => {
      const got = deliveriesTo('/created', secret);
      expect(got.length).toBeGreaterThanOrEqual(1);
      return got;
    });
    const payload = new Webhook(secret).verify(
      delivery!.body,
      delivery!.headers as Record<string, string>,
    ) as {
      type: string;
      timestamp: string;
      data: { media: { id: number; key: string; folderId: number } };
    };
    // A file in no folder: its folderId is the organization's root folder id, as in the API's answers.
    expect(payload).toMatchObject({
      type: 'media.created',
      data: {
        media: { id: record.id, key: record.key, folderId: owner.organization.rootFolderId },
      },
    });
    expect(Number.isInteger(payload.data.media.folderId)).toBe(true);
    expect(delivery!.headers['webhook-id']).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(delivery!.headers['content-type']).toBe('application/json');
    const entries = await eventually(async () => {
      const l = await log(owner, id);
      expect(l).toHaveLength(1);
      return l;
    });
    expect(entries[0]).toMatchObject({
      messageId: delivery!.headers['webhook-id'],
      attempt: 1,
      ok: true,
      status: 200,
      errorClass: null,
      response: 'answer 200',
      nextAttemptAt: null,
    });
  });

  it('a failure is retried with the same webhook-id; Retry-After is honoured; 3xx is a failure', async () => {
    scripts.set('/flaky', [
      { status: 500 },
      { status: 302, headers: { location: '/else' } },
      { status: 200 },
    ]);
    scripts.set('/busy', [{ status: 429, headers: { 'retry-after': '2' } }, { status: 200 }]);
    const owner = await api.createOrg();
    const flaky = await createEndpoint(owner, '/flaky');
    const busy = await createEndpoint(owner, '/busy');
    await owner.upload(PDF, 'retry.pdf');
    const got = await eventually(() => {
      const f = deliveriesTo('/flaky', flaky.secret);
      const b = deliveriesTo('/busy', busy.secret);
      expect([f.length, b.length]).toEqual([3, 2]);
      return { f, b };
    }, 20_000);
    expect(new Set(got.f.map((r) => r.headers['webhook-id'])).size).toBe(1);
    expect(received.some((r) => r.path === '/else')).toBe(false);
    expect(got.b[1]!.headers['webhook-id']).toBe(got.b[0]!.headers['webhook-id']);
    // 2 s asked, against the schedule's 300 ms.
    expect(got.b[1]!.at - got.b[0]!.at).toBeGreaterThanOrEqual(1_900);
    const entries = await eventually(async () => {
      const l = await log(owner, flaky.id);
      expect(l).toHaveLength(3);
      return l;
    });
    expect(entries.map((e) => [e.attempt, e.status, e.ok, e.errorClass])).toEqual([
      [3, 200, true, null],
      [2, 302, false, 'http_status'],
      [1, 500, false, 'http_status'],
    ]);
    expect(entries[2]!.nextAttemptAt).not.toBeNull();
  });

  it('410 disables the endpoint, and says so', async () => {
    scripts.set('/gone', [{ status: 410 }]);
    const owner = await api.createOrg();
    const { id } = await createEndpoint(owner, '/gone');
    await owner.upload(PDF, 'gone.pdf');
    const endpoint = await eventually(async () => {
      const answer = await call('GET', `/media/webhooks/${id}`, undefined, owner.auth);
      expect(answer.body.data.enabled).toBe(false);
      return answer.body.data;
    });
    expect(endpoint.disabledReason).toMatch(/410/);
    // Disabled: the next event sends nothing to it.
    await owner.upload(PDF, 'gone2.pdf');
    await new Promise((r) => setTimeout(r, 1_000));
    expect(received.filter((r) => r.path === '/gone')).toHaveLength(1);
  });

  it('an endpoint failing past WEBHOOK_DISABLE_AFTER_MS is disabled; replay since sends what failed', async () => {
    scripts.set('/down', [{ status: 500 }]);
    const owner = await api.createOrg();
    const { id, secret } = await createEndpoint(owner, '/down');
    // It has been failing for six days (the default bound is five).
    await api.ctx.models.WebhookEndpoint.updateOne(
      { id },
      { $set: { failingSince: new Date(Date.now() - 6 * 86_400_000) } },
    );
    const since = new Date().toISOString();
    await owner.upload(PDF, 'down.pdf');
    const endpoint = await eventually(async () => {
      const answer = await call('GET', `/media/webhooks/${id}`, undefined, owner.auth);
      expect(answer.body.data.enabled).toBe(false);
      return answer.body.data;
    });
    expect(endpoint.disabledReason).toMatch(/every delivery failed since/);
    const [failed] = deliveriesTo('/down', secret);
    expect(deliveriesTo('/down')).toHaveLength(1);

    // Back up: enabled again, every message that failed since then is sent again.
    scripts.set('/down', [{ status: 204 }]);
    const enabled = await call('PATCH', `/media/webhooks/${id}`, { enabled: true }, owner.auth);
    expect(enabled.body.data).toMatchObject({
      enabled: true,
      disabledReason: null,
      failingSince: null,
    });
    const replay = await call('POST', `/media/webhooks/${id}/replay`, { since }, owner.auth);
    expect(replay.body.data.replayed).toEqual([failed!.headers['webhook-id']]);
    const again = await eventually(() => {
      const got = deliveriesTo('/down', secret);
      expect(got).toHaveLength(2);
      return got[1]!;
    });
    expect(again.headers['webhook-id']).toBe(failed!.headers['webhook-id']);
  });

  it('a hanging endpoint does not delay another organization’s deliveries', async () => {
    scripts.set('/hang', ['hang']);
    const slow = await api.createOrg();
    const fast = await api.createOrg();
    await createEndpoint(slow, '/hang');
    const { secret } = await createEndpoint(fast, '/fast');
    // More messages to the hanging endpoint than the worker has webhook slots (4).
    for (let i = 0; i < 6; i++) await slow.upload(PDF, `slow-${i}.pdf`);
    await eventually(() =>
      expect(received.filter((r) => r.path === '/hang').length).toBeGreaterThanOrEqual(2),
    );
    const sent = Date.now();
    await fast.upload(PDF, 'fast.pdf');
    const [delivery] = await eventually(() => {
      const got = deliveriesTo('/fast', secret);
      expect(got).toHaveLength(1);
      return got;
    });
    // Before the hanging endpoint's 5 s timeout could free a slot: nothing waited behind it
    // (the bound leaves room for a busy machine; waiting behind a hang would take >= 5 s).
    expect(delivery!.at - sent).toBeLessThan(4_000);
    // At most WEBHOOK_ENDPOINT_CONCURRENCY (2) of the hanging endpoint's attempts at once.
    expect(mostHanging.get('/hang')).toBe(2);
  });

  it('rotation signs with both secrets during the overlap; replay and test keep their webhook-id', async () => {
    const owner = await api.createOrg();
    const { id, secret: old } = await createEndpoint(owner, '/rotate');
    const rotated = await call('POST', `/media/webhooks/${id}/rotate`, undefined, owner.auth);
    expect(rotated.status).toBe(200);
    const fresh = rotated.body.data.secret;
    expect(fresh).not.toBe(old);
    expect(rotated.body.data.previousSecretExpiresAt).toEqual(expect.any(String));

    await owner.upload(PDF, 'rotated.pdf');
    const [first] = await eventually(() => {
      const got = deliveriesTo('/rotate', old, fresh);
      expect(got).toHaveLength(1);
      return got;
    });
    expect(String(first!.headers['webhook-signature']).split(' ')).toHaveLength(2);

    const messageId = first!.headers['webhook-id'] as string;
    const replay = await call('POST', `/media/webhooks/${id}/replay`, { messageId }, owner.auth);
    expect(replay).toMatchObject({ status: 200, body: { data: { replayed: [messageId] } } });
    const again = await eventually(() => {
      const got = deliveriesTo('/rotate', fresh);
      expect(got).toHaveLength(2);
      return got[1]!;
    });
    expect(again.headers['webhook-id']).toBe(messageId);
    expect(JSON.parse(again.body)).toEqual(JSON.parse(first!.body));

    const test = await call('POST', `/media/webhooks/${id}/test`, undefined, owner.auth);
    expect(test.status).toBe(200);
    const sent = await eventually(() => {
      const got = deliveriesTo('/rotate', fresh);
      expect(got).toHaveLength(3);
      return got[2]!;
    });
    expect(sent.headers['webhook-id']).toBe(test.body.data.messageId);
    expect(JSON.parse(sent.body)).toMatchObject({ type: 'webhook.test', data: { endpointId: id } });

    const unknown = await call(
      'POST',
      `/media/webhooks/${id}/replay`,
      { messageId: 'msg_nope' },
      owner.auth,
    );
    expect(unknown.status).toBe(404);
  });

  it('a URL the guard refuses is refused again at delivery; the target sees no connection', async () => {
    // A sentinel on 127.0.0.1 (not allowlisted) at the receiver's port (allowed), counting connections.
    let connections = 0;
    const sentinel = net.createServer((socket) => {
      connections++;
      socket.destroy();
    });
    const port = Number(new URL(base).port);
    sentinel.listen(port, '127.0.0.1');
    await once(sentinel, 'listening');
    try {
      const owner = await api.createOrg();
      const { id } = await createEndpoint(owner, '/moved');
      // A URL kept from before the rules refused it (written behind the API's back).
      await api.ctx.models.WebhookEndpoint.updateOne(
        { id },
        { $set: { url: `http://[::ffff:127.0.0.1]:${port}/hook` } },
      );
      await owner.upload(PDF, 'moved.pdf');
      const entries = await eventually(async () => {
        const l = await log(owner, id);
        expect(l.length).toBeGreaterThanOrEqual(1);
        return l;
      });
      expect(entries.at(-1)).toMatchObject({
        attempt: 1,
        ok: false,
        status: null,
        errorClass: 'url_not_allowed',
      });
      expect(String(entries.at(-1)!.response)).toMatch(/IPv4/);
      expect(connections).toBe(0);
    } finally {
      sentinel.close();
    }
  });

  it('the sweep finishes hand-overs a crash cut short, and serves attempts left waiting', async () => {
    const owner = await api.createOrg();
    const { id, secret } = await createEndpoint(owner, '/parked');
    const redis = api.ctx.redis!;
    const prefix = api.env.queuePrefix;
    const entry = (messageId: string) => {
      const payload: JobPayloads['webhook.deliver'] = {
        organizationId: owner.organization.id,
        requestId: messageId,
        endpointId: id,
        messageId,
        eventId: null,
        eventType: 'webhook.test',
        body: JSON.stringify({
          type: 'webhook.test',
          timestamp: new Date().toISOString(),
          data: {},
        }),
        trigger: 'test',
        run: 'parked',
        attempt: 1,
        waits: 1,
      };
      const member = attemptUuid(payload);
      return { member, text: JSON.stringify({ member, payload }) };
    };
    // A hand-over whose worker died before queueing it, and an attempt parked with nothing in flight.
    const cut = entry('msg_cut_short');
    await redis.hset(`${prefix}:webhook-promoting`, cut.member, cut.text);
    await redis.zadd(`${prefix}:webhook-promoting-at`, Date.now() - 60_000, cut.member);
    const parked = entry('msg_parked');
    await redis.rpush(`${prefix}:webhook-waiting:${id}`, parked.text);
    await redis.sadd(`${prefix}:webhook-waiting-endpoints`, String(id));

    await worker.ctx.webhooks.sweep();
    const got = await eventually(() => {
      const all = deliveriesTo('/parked', secret);
      expect(all).toHaveLength(2);
      return all;
    });
    expect(got.map((r) => r.headers['webhook-id']).sort()).toEqual(['msg_cut_short', 'msg_parked']);
    // A hand-over is forgotten just after its job is queued: its message may arrive first.
    await eventually(async () => {
      expect(await redis.hlen(`${prefix}:webhook-promoting`)).toBe(0);
      expect(await redis.llen(`${prefix}:webhook-waiting:${id}`)).toBe(0);
    });
  });

  it('no secret appears in the worker’s logs', () => {
    expect(logLines.length).toBeGreaterThan(0);
    expect(logLines.join('\n')).not.toMatch(/whsec_/);
  });
});
