/**
 * Byte quotas and idempotent retries, through the real API, worker, Redis,
 * S3 and MongoDB.
 *
 * Quota: an upload that would pass it is refused with 413 QUOTA_EXCEEDED
 * (cut off mid-stream, nothing left behind), sequential and concurrent; the
 * recorded bytes never exceed the quota (reservations are atomic), and job
 * results count too.
 *
 * Idempotency-Key: for every POST, a repeat gets the first answer again with
 * no second record, object or job; another request under the same key is
 * 422; a repeat while the first runs is 409 (with a 30 MB upload); keys are
 * per organization; without Redis a keyed request is refused with 503.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture, form } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Json = Record<string, unknown>;
const jpeg = fixture('Canon_40D.jpg');
const pdf = fixture('minimal-document.pdf');

let api: TestApi;
let worker: TestWorker;

beforeAll(async () => {
  api = await startApi('quotaidem');
  worker = await startWorker(api.env.env);
});
afterAll(async () => {
  await worker.close();
  await api.close();
});

/** A JPEG of about `size` bytes (the sample's header, then random bytes). */
const bigJpeg = (size: number) => Buffer.concat([jpeg, randomBytes(size - jpeg.length)]);

async function post(
  org: TestOrg,
  path: string,
  body: FormData | Json,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: Json; headers: Headers }> {
  const json = !(body instanceof FormData);
  const res = await fetch(`${api.url}${path}`, {
    method: 'POST',
    headers: { ...org.auth, ...(json ? { 'Content-Type': 'application/json' } : {}), ...headers },
    body: json ? JSON.stringify(body) : body,
  });
  const parsed = (await res.json()) as Json;
  expectMatchesSpec('POST', path, res.status, parsed, res.headers);
  return { status: res.status, body: parsed, headers: res.headers };
}

const recordsOf = (org: TestOrg) =>
  api.ctx.models.Media.find({ organizationId: org.organization.id }).lean();

async function expectNothingBeyond(org: TestOrg, keys: string[]) {
  expect((await api.objectKeys(`${org.organization.slug}/`)).sort()).toEqual([...keys].sort());
  expect(await api.ctx.store.listIncompleteUploads(`${org.organization.slug}/`)).toEqual([]);
}

describe('quota', () => {
  it('refuses the upload that would pass it (413 QUOTA_EXCEEDED), keeping nothing of it', async () => {
    const org = await api.createOrg('quota-seq');
    await api.ctx.organizations.setQuota(org.organization.id, jpeg.length * 3 + 100);
    const keys: string[] = [];
    for (let i = 0; i < 3; i++) {
      const ok = await post(org, '/media/upload', form([['file', jpeg, `${i}.jpg`]]));
      expect(ok.status).toBe(201);
      keys.push((ok.body.data as { key: string }).key);
    }
    const refused = await post(org, '/media/upload', form([['file', jpeg, 'one-too-many.jpg']]));
    expect(refused.status).toBe(413);
    expect(refused.body).toMatchObject({ error: 'QUOTA_EXCEEDED', limit: jpeg.length * 3 + 100 });
    await expectNothingBeyond(org, keys);
    expect(await api.ctx.repositories.usage.get(org.organization.id)).toEqual({
      bytes: jpeg.length * 3,
      files: 3,
    });
    // A file far over what is left is cut off while it streams: no object, no open upload.
    const big = await post(
      org,
      '/media/upload',
      form([['file', bigJpeg(12 * 1024 * 1024), 'big.jpg']]),
    );
    expect(big.body.error).toBe('QUOTA_EXCEEDED');
    await expectNothingBeyond(org, keys);
    // The usage answer says what is left.
    const usage = await fetch(`${api.url}/media/usage`, { headers: org.auth });
    expect(((await usage.json()) as { data: Json }).data.quota).toEqual({
      bytes: jpeg.length * 3 + 100,
      remaining: 100,
    });
  });

  it('concurrent uploads never record more than the quota; the refused leave nothing', async () => {
    const org = await api.createOrg('quota-par');
    const size = 300 * 1024;
    const quota = Math.floor(size * 3.5);
    await api.ctx.organizations.setQuota(org.organization.id, quota);
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        post(org, '/media/upload', form([['file', bigJpeg(size), `c${i}.jpg`]])),
      ),
    );
    const ok = answers.filter((a) => a.status === 201);
    const refused = answers.filter((a) => a.status === 413);
    expect(ok.length + refused.length).toBe(8);
    expect(ok.length).toBeGreaterThanOrEqual(1);
    expect(ok.length).toBeLessThanOrEqual(3);
    for (const r of refused) expect(r.body.error).toBe('QUOTA_EXCEEDED');
    const records = await recordsOf(org);
    const recorded = records.reduce((n, r) => n + r.bytes, 0);
    expect(recorded).toBeLessThanOrEqual(quota);
    expect(await api.ctx.repositories.usage.get(org.organization.id)).toEqual({
      bytes: recorded,
      files: records.length,
    });
    await eventually(() =>
      expectNothingBeyond(
        org,
        records.map((r) => r.key),
      ),
    );
  });

  it('counts job results: a conversion past the quota is refused, leaving nothing', async () => {
    const org = await api.createOrg('quota-job');
    const key = await org.upload(jpeg, 'src.jpg');
    await api.ctx.organizations.setQuota(org.organization.id, jpeg.length + 10);
    const converted = await post(org, '/media/convert', { mediaKey: key, format: 'png' });
    expect([converted.status, converted.body.error]).toEqual([413, 'QUOTA_EXCEEDED']);
    await expectNothingBeyond(org, [key]);
    expect((await recordsOf(org)).length).toBe(1);
  });
});

describe('Idempotency-Key', () => {
  let org: TestOrg;
  let source: { key: string };
  beforeAll(async () => {
    org = await api.createOrg('retrier');
    source = await org.uploadRecord(jpeg, 'source.jpg');
  });

  // The requests' jobs: event deliveries (maintenance), which the dispatcher queues for new
  // records off the answer's path and at its own pace, are not the requests'.
  const jobCount = async () => {
    const { maintenance: _deliveries, ...counts } = await api.ctx.queue.counts();
    return Object.values(counts)
      .flatMap((byState) => Object.values(byState))
      .reduce((a, b) => a + b, 0);
  };

  /** Each POST, as a function of a fresh body (multipart bodies get a new boundary each time). */
  const requests: [string, () => FormData | Json][] = [
    ['/media/upload', () => form([['file', jpeg, 'once.jpg']])],
    [
      '/media/upload/multiple',
      () =>
        form([
          ['files', jpeg, 'a.jpg'],
          ['files', pdf, 'b.pdf'],
        ]),
    ],
    ['/media/upload/base64', () => ({ file: `data:image/jpeg;base64,${jpeg.toString('base64')}` })],
    ['/media/convert', () => ({ mediaKey: source.key, format: 'webp' })],
    [
      '/media/merge-pdfs',
      () =>
        form([
          ['files', pdf, 'one.pdf'],
          ['files', pdf, 'two.pdf'],
        ]),
    ],
    ['/media/folders', () => ({ name: `folder-${randomUUID()}`.slice(0, 20) })],
  ];

  it.each(requests)(
    '%s: a repeat gets the same answer, and nothing is done twice',
    async (path, body) => {
      const key = randomUUID();
      const fixed = body();
      const again = () => (fixed instanceof FormData ? body() : fixed);
      const first = await post(org, path, fixed, { 'Idempotency-Key': key });
      expect(first.status).toBe(201);
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      // A merge removes its uploaded inputs once recorded, beside its answer.
      await api.expectNoObjects(`${org.organization.slug}/.tmp/`);
      const counts = {
        records: (await recordsOf(org)).length,
        objects: (await api.objectKeys()).length,
        jobs: await jobCount(),
        folders: await api.ctx.models.Folder.countDocuments({}),
      };
      // Multipart repeats come with a boundary of their own: the same request all the same.
      const second = await post(org, path, path === '/media/folders' ? fixed : again(), {
        'Idempotency-Key': key,
      });
      expect(second.status).toBe(201);
      expect(second.headers.get('idempotent-replayed')).toBe('true');
      expect(second.body).toEqual(first.body);
      expect({
        records: (await recordsOf(org)).length,
        objects: (await api.objectKeys()).length,
        jobs: await jobCount(),
        folders: await api.ctx.models.Folder.countDocuments({}),
      }).toEqual(counts);
    },
  );

  it('refuses the same key for another request (422), and another organization’s key is its own', async () => {
    const key = randomUUID();
    expect(
      (await post(org, '/media/folders', { name: 'idem-a' }, { 'Idempotency-Key': key })).status,
    ).toBe(201);
    const other = await post(org, '/media/folders', { name: 'idem-b' }, { 'Idempotency-Key': key });
    expect([other.status, other.body.error]).toEqual([422, 'IDEMPOTENCY_KEY_REUSED']);
    const elsewhere = await api.createOrg('retrier-2');
    expect(
      (await post(elsewhere, '/media/folders', { name: 'idem-a' }, { 'Idempotency-Key': key }))
        .status,
    ).toBe(201);
    const bad = await post(org, '/media/folders', { name: 'idem-c' }, { 'Idempotency-Key': 'ä' });
    expect(bad.status).toBe(400);
  });

  it('answers 409 to a repeat while a 30 MB upload is still running, then replays it', async () => {
    const key = randomUUID();
    const big = bigJpeg(30 * 1024 * 1024);
    const before = (await recordsOf(org)).length;
    const first = post(org, '/media/upload', form([['file', big, 'big.jpg']]), {
      'Idempotency-Key': key,
    });
    // Once the first holds the key (in Redis), a repeat is told to wait.
    const entries = () => api.ctx.redis!.keys(`${api.env.queuePrefix}:idempotency:*`);
    const initial = (await entries()).length;
    await eventually(
      async () => expect((await entries()).length).toBeGreaterThan(initial),
      30_000,
      5,
    );
    const during = await post(org, '/media/upload', form([['file', big, 'big.jpg']]), {
      'Idempotency-Key': key,
    });
    expect([during.status, during.body.error]).toEqual([409, 'IDEMPOTENCY_KEY_IN_USE']);
    const done = await first;
    expect(done.status).toBe(201);
    const replay = await post(org, '/media/upload', form([['file', big, 'big.jpg']]), {
      'Idempotency-Key': key,
    });
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(done.body);
    expect((await recordsOf(org)).length).toBe(before + 1);
  });

  it('refuses a keyed request with 503 when Redis cannot be reached (unkeyed ones still run)', async () => {
    const cut = await startApi('idem-noredis');
    try {
      const who = await cut.createOrg('cut');
      cut.ctx.redis!.disconnect();
      const send = (headers: Record<string, string>) =>
        fetch(`${cut.url}/media/folders`, {
          method: 'POST',
          headers: { ...who.auth, 'Content-Type': 'application/json', ...headers },
          body: JSON.stringify({ name: `n-${randomUUID()}`.slice(0, 20) }),
        });
      const keyed = await send({ 'Idempotency-Key': randomUUID() });
      expect(keyed.status).toBe(503);
      expect(((await keyed.json()) as Json).dependency).toBe('Redis');
      expect(await cut.ctx.models.Folder.countDocuments({})).toBe(0);
      expect((await send({})).status).toBe(201);
    } finally {
      await cut.close();
    }
  });
});
