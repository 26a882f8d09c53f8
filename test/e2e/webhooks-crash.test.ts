/**
 * A worker process killed mid-delivery loses no webhook, end to end with
 * real processes: the worker (a process of its own, started through tsx)
 * dispatches an upload's `media.created` and sends its message to a receiver
 * on loopback that holds the request open; the worker is killed with
 * SIGKILL while the request is in flight, and a new worker process takes the
 * job over once its lock lapses (BullMQ's stalled-job check) and sends the
 * message again: the same `webhook-id`, both requests signed as the Standard
 * Webhooks specification says (verified with the `standardwebhooks`
 * package), and the delivery log holds the one successful attempt.
 *
 * The receiver's address (127.0.0.3) is opened on purpose through the
 * allowlist (EGRESS_ALLOWLIST=127.0.0.3/32, EGRESS_ALLOWED_PORTS its port):
 * no network namespace. The API runs in the test process (it only records
 * the event); the dispatch and the deliveries run in the worker processes.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { eventually } from '../support/eventually';
import { fixture } from '../support/files';
import { startWorkerProcess, type ServiceProcess } from '../support/processes';

const RECEIVER_IP = '127.0.0.3';

interface Received {
  headers: http.IncomingHttpHeaders;
  body: string;
}

let harness: TestApi;
let org: TestOrg;
let receiver: http.Server;
const received: Received[] = [];
const workers: ServiceProcess[] = [];

beforeAll(async () => {
  // The first request is held open (the worker dies meanwhile); the next ones answer 200.
  receiver = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      received.push({ headers: req.headers, body });
      if (received.length > 1) res.writeHead(200).end('ok');
    });
  });
  receiver.listen(0, RECEIVER_IP);
  await once(receiver, 'listening');
  const port = (receiver.address() as AddressInfo).port;
  harness = await startApi('e2ehooks', {
    env: {
      RATE_LIMIT_MAX: '0',
      EGRESS_ALLOWLIST: `${RECEIVER_IP}/32`,
      EGRESS_ALLOWED_PORTS: String(port),
      // The held request outlasts the kill by far; the killed worker's lock lapses fast.
      WEBHOOK_TIMEOUT_MS: '60000',
      JOB_LOCK_MS: '2000',
    },
  });
  org = await harness.createOrg('hooks-crash');
}, 120_000);

afterAll(async () => {
  for (const w of workers) await w.kill('SIGTERM').catch(() => undefined);
  receiver.closeAllConnections();
  receiver.close();
  await harness?.close();
}, 60_000);

it('a worker killed mid-delivery: a new worker sends the message again, same webhook-id, signed', async () => {
  const created = await fetch(`${harness.url}/media/webhooks`, {
    method: 'POST',
    headers: { ...org.auth, 'content-type': 'application/json' },
    body: JSON.stringify({
      url: `http://${RECEIVER_IP}:${(receiver.address() as AddressInfo).port}/hook`,
      events: ['media.created'],
    }),
  });
  expect(created.status).toBe(201);
  const { id, secret } = ((await created.json()) as { data: { id: number; secret: string } }).data;

  const first = await startWorkerProcess(harness.env.env);
  workers.push(first);
  const key = await org.upload(fixture('minimal-document.pdf'), 'crash.pdf');

  // The message is in flight: the receiver holds its request open.
  await eventually(() => expect(received).toHaveLength(1), 60_000);
  expect(await first.kill('SIGKILL')).toBeNull();
  expect(first.child.signalCode).toBe('SIGKILL');
  // The killed worker logged no outcome of the attempt.
  expect(first.logs.join('\n')).not.toMatch(/webhook delivered|webhook delivery failed/);

  workers.push(await startWorkerProcess(harness.env.env));
  await eventually(() => expect(received).toHaveLength(2), 60_000);

  // Both requests carry the same message, each signed with the endpoint's secret.
  const [before, after] = received as [Received, Received];
  expect(after.headers['webhook-id']).toMatch(/^msg_[0-9a-f]{32}$/);
  expect(after.headers['webhook-id']).toBe(before.headers['webhook-id']);
  const verified = [before, after].map(
    (r) =>
      new Webhook(secret).verify(r.body, r.headers as Record<string, string>) as {
        type: string;
        data: { media: { key: string } };
      },
  );
  for (const payload of verified) {
    expect(payload).toMatchObject({ type: 'media.created', data: { media: { key } } });
  }
  expect(() =>
    new Webhook(`whsec_${Buffer.from('another secret').toString('base64')}`).verify(
      after.body,
      after.headers as Record<string, string>,
    ),
  ).toThrow();

  // The delivery log: the successful attempt (the killed one never ended).
  const entries = await eventually(async () => {
    const res = await fetch(`${harness.url}/media/webhooks/${id}/deliveries`, {
      headers: org.auth,
    });
    expect(res.status).toBe(200);
    const { data } = (await res.json()) as { data: { deliveries: Record<string, unknown>[] } };
    expect(data.deliveries.filter((d) => d.ok === true)).toHaveLength(1);
    return data.deliveries;
  }, 30_000);
  expect(entries).toContainEqual(
    expect.objectContaining({
      messageId: after.headers['webhook-id'],
      attempt: 1,
      ok: true,
      status: 200,
    }),
  );
}, 240_000);
