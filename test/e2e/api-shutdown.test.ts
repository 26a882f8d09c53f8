/**
 * End to end with the real API process: SIGTERM while large uploads are
 * streaming. Uploads in flight finish (201, record and object in place), new
 * connections are refused at once, idle keep-alive connections are closed, and
 * the process exits with code 0 within SHUTDOWN_TIMEOUT_MS. An upload still
 * streaming when the budget runs out is aborted and leaves nothing behind: no
 * record, no object, no open multipart upload.
 */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { Agent, request, type ClientRequest } from 'node:http';
import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { fixture, sha256 } from '../support/files';
import { startApiProcess, type ServiceProcess } from '../support/processes';
import { eventually as pollUntil } from '../support/eventually';

const MB = 1024 * 1024;
const jpegHead = fixture('Canon_40D.jpg');

const eventually = <T>(check: () => Promise<T>, timeoutMs = 15_000) =>
  pollUntil(check, timeoutMs, 50);

interface Upload {
  req: ClientRequest;
  bytes: Buffer;
  sent(): number;
  /** Sends up to `bytes` (of the file) now. */
  sendUntil(bytes: number): Promise<void>;
  /** Sends the rest, `chunk` bytes every `everyMs`, then ends the request. */
  trickleRest(chunk: number, everyMs: number): Promise<void>;
  response: Promise<{ status: number; body: { data?: { key: string; checksum: string } } }>;
}

/** A multipart upload of a JPEG-looking file of `total` bytes, written by the test at its own pace. */
function streamingUpload(url: string, org: TestOrg, total: number): Upload {
  const boundary = `----test${randomBytes(8).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jpg"\r\nContent-Type: image/jpeg\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const bytes = Buffer.concat([jpegHead, randomBytes(total - jpegHead.length)]);
  const { port } = new URL(url);
  const req = request({
    host: '127.0.0.1',
    port,
    method: 'POST',
    path: '/media/upload',
    agent: false,
    headers: {
      ...org.auth,
      'Content-Type': `multipart/form-data; boundary=${boundary}`,
      'Content-Length': String(head.length + total + tail.length),
    },
  });
  const response = new Promise<Awaited<Upload['response']>>((resolve, reject) => {
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          body: JSON.parse(Buffer.concat(chunks).toString() || '{}') as Awaited<
            Upload['response']
          >['body'],
        }),
      );
    });
    req.on('error', reject);
  });
  response.catch(() => undefined);
  req.write(head);
  let sent = 0;
  const sendUntil = async (until: number) => {
    while (sent < until) {
      const n = Math.min(MB, until - sent);
      const ok = req.write(bytes.subarray(sent, sent + n));
      sent += n;
      if (!ok) await once(req, 'drain');
    }
  };
  return {
    req,
    bytes,
    sent: () => sent,
    sendUntil,
    async trickleRest(chunk, everyMs) {
      while (sent < total) {
        await sendUntil(Math.min(total, sent + chunk));
        await sleep(everyMs);
      }
      req.end(tail);
    },
    response,
  };
}

/** Whether a new connection to the API is refused. */
async function refused(url: string): Promise<boolean> {
  try {
    await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2_000) });
    return false;
  } catch (err) {
    return (err as { cause?: { code?: string } }).cause?.code === 'ECONNREFUSED';
  }
}

let harness: TestApi; // in-process, to set up the organization and look behind the API
beforeAll(async () => {
  // S3_SINGLE_PUT_MAX=0: an upload past one part is a multipart upload at once (the tests
  // stop the API while uploads have one open).
  harness = await startApi('e2eshutdown', { env: { S3_SINGLE_PUT_MAX: '0' } });
});
afterAll(() => harness.close());

it('SIGTERM during uploads: they finish, new connections are refused, the process exits 0 in time', async () => {
  const SHUTDOWN_TIMEOUT_MS = 15_000;
  const org = await harness.createOrg('drain');
  const api: ServiceProcess = await startApiProcess({
    ...harness.env.env,
    SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS),
  });
  try {
    // An idle keep-alive connection, left open by its agent after one request.
    const agent = new Agent({ keepAlive: true });
    const idle = await new Promise<Socket>((resolve, reject) => {
      request(`${api.url!}/healthz`, { agent }, (res) => {
        const socket = res.socket;
        res.resume();
        res.on('end', () => resolve(socket));
      })
        .on('error', reject)
        .end();
    });
    const idleClosed = once(idle, 'close');

    // Three 20 MB uploads, each half-way through its bytes (multipart uploads open in the bucket).
    const uploads = [0, 1, 2].map(() => streamingUpload(api.url!, org, 20 * MB));
    await Promise.all(uploads.map((u) => u.sendUntil(10 * MB)));
    await eventually(async () =>
      expect(await harness.ctx.store.listIncompleteUploads('drain/')).toHaveLength(3),
    );

    const signalled = performance.now();
    const exited = api.kill('SIGTERM');
    // New connections are refused as soon as the signal is handled...
    await eventually(async () => expect(await refused(api.url!)).toBe(true), 5_000);
    // ...and the idle keep-alive connection is closed by the server.
    await idleClosed;
    const refusedAfter = performance.now() - signalled;

    // The uploads go on, slowly (1 MB every 100 ms, about a second each), and all succeed.
    await Promise.all(uploads.map((u) => u.trickleRest(MB, 100)));
    const results = await Promise.all(uploads.map((u) => u.response));
    expect(results.map((r) => r.status)).toEqual([201, 201, 201]);
    expect(uploads.every((u) => u.sent() === 20 * MB)).toBe(true);

    const code = await exited;
    const exitedAfter = performance.now() - signalled;
    expect(code).toBe(0);
    expect(exitedAfter).toBeLessThan(SHUTDOWN_TIMEOUT_MS);
    expect(refusedAfter).toBeLessThan(exitedAfter);
    expect(api.logs.some((l) => l.includes('"msg":"shutdown complete"'))).toBe(true);

    // Each upload has its record and its object, with the bytes the client sent.
    for (const [i, { body }] of results.entries()) {
      const { key, checksum } = body.data!;
      expect(checksum).toBe(sha256(uploads[i]!.bytes));
      const record = await harness.ctx.models.Media.findOne({ key }).lean();
      expect(record).toMatchObject({ organizationId: org.organization.id, bytes: 20 * MB });
      expect(await harness.ctx.store.stat(key)).toMatchObject({ size: 20 * MB });
    }
    expect(await harness.ctx.store.listIncompleteUploads('drain/')).toEqual([]);
    agent.destroy();
  } finally {
    await api.kill('SIGKILL');
  }
}, 90_000);

it('an upload still streaming when SHUTDOWN_TIMEOUT_MS runs out is aborted, leaving nothing', async () => {
  const SHUTDOWN_TIMEOUT_MS = 3_000;
  const org = await harness.createOrg('late');
  const api = await startApiProcess({
    ...harness.env.env,
    SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS),
  });
  try {
    // 12 MB sent of 30 MB, then the client stalls.
    const upload = streamingUpload(api.url!, org, 30 * MB);
    await upload.sendUntil(12 * MB);
    await eventually(async () =>
      expect(await harness.ctx.store.listIncompleteUploads('late/')).toHaveLength(1),
    );

    const signalled = performance.now();
    const code = await api.kill('SIGTERM');
    const exitedAfter = performance.now() - signalled;
    expect(code).toBe(0);
    expect(exitedAfter).toBeLessThan(SHUTDOWN_TIMEOUT_MS + 1_000);
    expect(api.logs.some((l) => l.includes('aborting them'))).toBe(true);
    // The client saw its connection cut.
    await expect(upload.response).rejects.toThrow();

    expect(
      await harness.ctx.models.Media.countDocuments({ organizationId: org.organization.id }),
    ).toBe(0);
    expect(await harness.objectKeys('late/')).toEqual([]);
    expect(await harness.ctx.store.listIncompleteUploads('late/')).toEqual([]);
  } finally {
    await api.kill('SIGKILL');
  }
}, 60_000);
