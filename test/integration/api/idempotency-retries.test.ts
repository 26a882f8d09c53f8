/**
 * Idempotency-Key when the first answer never reached the client, through
 * the real API, worker, Redis, S3 and MongoDB:
 *
 *  - a client that drops its connection right after sending its whole body
 *    (raw socket), then retries with the same key: the first answer is
 *    replayed (same record id), one record and one object;
 *  - Redis cut off (a TCP proxy) while an upload is in flight, so the outcome
 *    cannot be written when the work commits, then back: the retry gets the
 *    first answer, not 409 for 15 minutes and then a duplicate;
 *  - a convert that answered 504 (no worker yet) or 202 (`Prefer:
 *    respond-async`): a retry gets the same job id while it runs, and its
 *    record once made, never a second job; a job that failed frees the key;
 *  - keys belong to a token: a delete-only token sending a read token's key
 *    for `POST /media/sign` gets 403, never the read token's signed URLs.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { connect } from 'node:net';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { redisUrl } from '../../support/context';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { hostPortOf, startTcpProxy, type TcpProxy } from '../../support/tcp-proxy';
import { startWorker, type TestWorker } from '../../support/worker';

type Json = Record<string, unknown>;
const jpeg = fixture('Canon_40D.jpg');

/** A multipart body of one file part, with a boundary of its own (as every client try has). */
function multipart(field: string, bytes: Buffer, filename: string) {
  const boundary = `retry-${randomBytes(8).toString('hex')}`;
  const body = Buffer.concat([
    Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="${field}"; filename="${filename}"\r\n` +
        'Content-Type: image/jpeg\r\n\r\n',
    ),
    bytes,
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
  return { body, contentType: `multipart/form-data; boundary=${boundary}` };
}

interface RawAnswer {
  status: number;
  headers: Headers;
  body: Json;
}

/**
 * A POST over a raw socket. `beforeRest` runs after the first half of the
 * body is sent; with `drop`, the client closes its socket the moment the
 * API has read the whole body (its request stream ended; the API runs in
 * this process), before any answer: it never reads one.
 */
async function rawPost(
  api: TestApi,
  path: string,
  headers: Record<string, string>,
  body: Buffer,
  options: { drop?: boolean; beforeRest?: () => Promise<void> } = {},
): Promise<RawAnswer | undefined> {
  const { port } = new URL(api.url);
  const socket = connect({ port: Number(port), host: '127.0.0.1' });
  await new Promise((resolve) => socket.once('connect', resolve));
  let response = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => (response = Buffer.concat([response, chunk])));
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  if (options.drop) {
    api.server.once('request', (req: IncomingMessage) => req.once('end', () => socket.destroy()));
  }
  const head = Object.entries({
    Host: '127.0.0.1',
    Connection: 'close',
    'Content-Length': String(body.length),
    ...headers,
  })
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  socket.write(`POST ${path} HTTP/1.1\r\n${head}\r\n`);
  const half = Math.floor(body.length / 2);
  socket.write(body.subarray(0, half));
  await options.beforeRest?.();
  socket.write(body.subarray(half));
  await closed;
  if (options.drop) return undefined;
  const text = response.toString('utf8');
  const split = text.indexOf('\r\n\r\n');
  const lines = text.slice(0, split).split('\r\n');
  const parsed = new Headers(
    lines.slice(1).map((line) => {
      const at = line.indexOf(':');
      return [line.slice(0, at), line.slice(at + 1).trim()] as [string, string];
    }),
  );
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(lines[0]!)![1]);
  return { status, headers: parsed, body: JSON.parse(text.slice(split + 4)) as Json };
}

async function postJson(
  api: TestApi,
  path: string,
  auth: string,
  body: Json,
  headers: Record<string, string> = {},
): Promise<RawAnswer> {
  const res = await fetch(`${api.url}${path}`, {
    method: 'POST',
    headers: { Authorization: auth, 'Content-Type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const parsed = (await res.json()) as Json;
  expectMatchesSpec('POST', path, res.status, parsed, res.headers);
  return { status: res.status, headers: res.headers, body: parsed };
}

const recordsOf = (api: TestApi, org: TestOrg) =>
  api.ctx.models.Media.find({ organizationId: org.organization.id }).lean();

describe('a client that never read the first answer', () => {
  let api: TestApi;
  let org: TestOrg;
  beforeAll(async () => {
    api = await startApi('idem-dropped');
    org = await api.createOrg('dropped');
  });
  afterAll(() => api.close());

  it('dropped its connection right after sending the body: the retry replays the first answer', async () => {
    const key = randomUUID();
    const first = multipart('file', jpeg, 'dropped.jpg');
    await rawPost(
      api,
      '/media/upload',
      { ...org.auth, 'Content-Type': first.contentType, 'Idempotency-Key': key },
      first.body,
      { drop: true },
    );
    // The upload goes on without its client.
    const [record] = await eventually(async () => {
      const records = await recordsOf(api, org);
      expect(records).toHaveLength(1);
      return records;
    });

    const again = multipart('file', jpeg, 'dropped.jpg');
    const replay = await eventually(async () => {
      const answer = await rawPost(
        api,
        '/media/upload',
        { ...org.auth, 'Content-Type': again.contentType, 'Idempotency-Key': key },
        again.body,
      );
      // Not 409 (the key left "running"), and not a second upload.
      expect(answer!.status).toBe(201);
      return answer!;
    }, 10_000);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect((replay.body.data as Json).id).toBe(record!.id);
    expectMatchesSpec('POST', '/media/upload', 201, replay.body, replay.headers);
    expect(await recordsOf(api, org)).toHaveLength(1);
    expect(await api.objectKeys(`${org.organization.slug}/`)).toEqual([record!.key]);
  });
});

describe('Redis cut off while the request runs', () => {
  let proxy: TcpProxy;
  let api: TestApi;
  let org: TestOrg;
  beforeAll(async () => {
    const target = hostPortOf(redisUrl());
    proxy = await startTcpProxy(target.host, target.port);
    api = await startApi('idem-redis-cut', { env: { REDIS_URL: proxy.via(redisUrl()) } });
    org = await api.createOrg('redis-cut');
  });
  afterAll(async () => {
    await proxy.restore();
    await api.close();
    await proxy.close();
  });

  it('keeps the outcome once Redis is back: the retry gets the first answer, one record', async () => {
    const key = randomUUID();
    const entries = () => api.ctx.redis!.keys(`${api.env.queuePrefix}:idempotency:*`);
    const first = multipart('file', jpeg, 'cut.jpg');
    const answer = await rawPost(
      api,
      '/media/upload',
      { ...org.auth, 'Content-Type': first.contentType, 'Idempotency-Key': key },
      first.body,
      {
        beforeRest: async () => {
          // The key is claimed (in Redis) once the request is under way: then Redis goes.
          await eventually(async () => expect(await entries()).toHaveLength(1), 10_000, 20);
          await proxy.cut();
        },
      },
    );
    // The upload needs no Redis: it is stored and answered.
    expect(answer!.status).toBe(201);
    const id = (answer!.body.data as Json).id;

    await proxy.restore();
    const again = multipart('file', jpeg, 'cut.jpg');
    const replay = await eventually(
      async () => {
        const retried = await rawPost(
          api,
          '/media/upload',
          { ...org.auth, 'Content-Type': again.contentType, 'Idempotency-Key': key },
          again.body,
        );
        // 503 while the API reconnects; never 409 once it has.
        expect(retried!.status).toBe(201);
        return retried!;
      },
      20_000,
      250,
    );
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect((replay.body.data as Json).id).toBe(id);
    expect(await recordsOf(api, org)).toHaveLength(1);
  });
});

describe('a job-backed request retried with its key', () => {
  let api: TestApi;
  let org: TestOrg;
  let worker: TestWorker | undefined;
  let source: { key: string };
  let corrupt: { key: string };
  beforeAll(async () => {
    // No worker yet: the first requests' jobs wait, and a synchronous one answers 504.
    api = await startApi('idem-jobs', { env: { JOB_WAIT_MS: '500' } });
    org = await api.createOrg('jobs');
    source = await org.uploadRecord(jpeg, 'source.jpg');
    corrupt = await org.uploadRecord('corpus/images/corrupted.jpg', 'corrupt.jpg');
  });
  afterAll(async () => {
    await worker?.close();
    await api.close();
  });

  const convert = (key: string, body: Json, headers: Record<string, string> = {}) =>
    postJson(api, '/media/convert', org.auth.Authorization, body, {
      'Idempotency-Key': key,
      ...headers,
    });
  // The requests' jobs: event deliveries (maintenance), which the dispatcher queues for new
  // records off the answer's path and at its own pace, are not the requests'.
  const jobCount = async () => {
    const { maintenance: _deliveries, ...counts } = await api.ctx.queue.counts();
    return Object.values(counts)
      .flatMap((byState) => Object.values(byState))
      .reduce((a, b) => a + b, 0);
  };
  const converted = async () =>
    (await recordsOf(api, org)).filter((r) => r.mimetype === 'image/webp');

  it('gets the same job id while it runs (504 or 202), and its record once made; one job, one record', async () => {
    const sync = randomUUID();
    const async = randomUUID();
    const body = { mediaKey: source.key, format: 'webp' };
    const timedOut = await convert(sync, body);
    expect([timedOut.status, timedOut.body.error]).toEqual([504, 'JOB_TIMEOUT']);
    const accepted = await convert(async, body, { Prefer: 'respond-async' });
    expect(accepted.status).toBe(202);
    const jobs = await jobCount();

    // While the jobs wait: the same answers, with the same job ids, and no new job.
    const timedOutAgain = await convert(sync, body);
    expect([timedOutAgain.status, timedOutAgain.body.jobId]).toEqual([504, timedOut.body.jobId]);
    expect(timedOutAgain.headers.get('idempotent-replayed')).toBe('true');
    const acceptedAgain = await convert(async, body, { Prefer: 'respond-async' });
    expect(acceptedAgain.status).toBe(202);
    expect((acceptedAgain.body.data as Json).jobId).toBe((accepted.body.data as Json).jobId);
    expect(await jobCount()).toBe(jobs);
    // Another request under the same key is still refused.
    const other = await convert(sync, { mediaKey: source.key, format: 'png' });
    expect([other.status, other.body.error]).toEqual([422, 'IDEMPOTENCY_KEY_REUSED']);

    worker = await startWorker(api.env.env);
    await eventually(async () => expect(await converted()).toHaveLength(2), 30_000);
    const ids = (await converted()).map((r) => r.id).sort();
    for (const key of [sync, async, sync]) {
      const done = await convert(key, body, key === async ? { Prefer: 'respond-async' } : {});
      expect(done.status).toBe(201);
      expect(done.headers.get('idempotent-replayed')).toBe('true');
      expect(ids).toContain((done.body.data as Json).id);
    }
    expect(await jobCount()).toBe(jobs);
    expect((await converted()).map((r) => r.id).sort()).toEqual(ids);
  }, 60_000);

  it('frees the key when its job failed: the retry runs anew', async () => {
    worker ??= await startWorker(api.env.env);
    const key = randomUUID();
    const body = { mediaKey: corrupt.key, format: 'png' };
    const first = await convert(key, body, { Prefer: 'respond-async' });
    expect(first.status).toBe(202);
    const jobId = (first.body.data as Json).jobId as string;
    await eventually(async () => {
      expect((await api.ctx.queue.get(jobId))?.state).toBe('failed');
    }, 30_000);
    const retried = await convert(key, body, { Prefer: 'respond-async' });
    expect(retried.status).toBe(202);
    expect(retried.headers.get('idempotent-replayed')).toBeNull();
    expect((retried.body.data as Json).jobId).not.toBe(jobId);
  }, 60_000);
});

describe('keys belong to a token', () => {
  let api: TestApi;
  let org: TestOrg;
  beforeAll(async () => {
    api = await startApi('idem-scopes', {
      env: { URL_SIGNING_KEYS: 'idem-signing-key-0123456789abcdef01234567' },
    });
    org = await api.createOrg('scoped');
  });
  afterAll(() => api.close());

  const tokenWith = async (scopes: ('read' | 'write' | 'delete')[]) =>
    `Bearer ${(await api.ctx.tokens.issue(org.organization.id, { scopes })).token}`;

  it('a delete-only or write-only token replaying a read token’s POST /media/sign key gets 403, no URL', async () => {
    const mediaKey = await org.upload(jpeg, 'signed.jpg');
    const key = randomUUID();
    const body = { mediaKey, expiresIn: 3600 };

    const reader = await postJson(api, '/media/sign', await tokenWith(['read']), body, {
      'Idempotency-Key': key,
    });
    expect(reader.status).toBe(200);
    expect((reader.body.data as Json).url).toEqual(expect.any(String));

    for (const scopes of [['delete'], ['write']] as const) {
      const refused = await postJson(api, '/media/sign', await tokenWith([...scopes]), body, {
        'Idempotency-Key': key,
      });
      expect([refused.status, refused.body.error]).toEqual([403, 'INSUFFICIENT_SCOPE']);
      expect(refused.headers.get('idempotent-replayed')).toBeNull();
      expect(JSON.stringify(refused.body)).not.toContain('signature=');
    }
    // Another read token with the same key is its own request: signed afresh, not replayed.
    const otherReader = await postJson(api, '/media/sign', await tokenWith(['read']), body, {
      'Idempotency-Key': key,
    });
    expect(otherReader.status).toBe(200);
    expect(otherReader.headers.get('idempotent-replayed')).toBeNull();
  });
});
