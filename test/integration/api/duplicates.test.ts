/**
 * Duplicate uploads (`onDuplicate`), through the real API, S3 and MongoDB:
 * `allow` stores the bytes again, `reject` answers 409 DUPLICATE naming the
 * stored file and keeps nothing, `reuse` answers the stored record and keeps
 * nothing; as a query parameter, a form field and a base64 body field, for
 * upload, upload/multiple and upload/base64. After each, the organization's
 * objects, records and usage are what a user would expect: records =
 * objects, usage counting each once. Another organization's identical bytes
 * are never a duplicate.
 */
import { randomBytes } from 'node:crypto';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture, form } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';

type Json = Record<string, unknown>;
interface Record_ {
  id: number;
  key: string;
  checksum: string;
  bytes: number;
}

let api: TestApi;
beforeAll(async () => {
  api = await startApi('duplicates');
});
afterAll(async () => {
  await api.close();
});

/** A JPEG of its own bytes (the sample and a random tail: still detected as a JPEG). */
const uniqueJpeg = () => Buffer.concat([fixture('Canon_40D.jpg'), randomBytes(64)]);

async function post(
  org: TestOrg,
  path: string,
  body: FormData | Json,
): Promise<{ status: number; body: Json }> {
  const json = !(body instanceof FormData);
  const res = await fetch(`${api.url}${path}`, {
    method: 'POST',
    headers: { ...org.auth, ...(json ? { 'Content-Type': 'application/json' } : {}) },
    body: json ? JSON.stringify(body) : body,
  });
  const parsed = (await res.json()) as Json;
  expectMatchesSpec('POST', path.split('?')[0]!, res.status, parsed, res.headers);
  return { status: res.status, body: parsed };
}

/** `media_bytes_stored_total` of an endpoint, as /metrics says. */
async function storedBytes(endpoint: string): Promise<number> {
  const text = await (await fetch(`${api.url}/metrics`)).text();
  const line = `media_bytes_stored_total{endpoint="${endpoint}"} `;
  const found = text.split('\n').find((l) => l.startsWith(line));
  return found ? Number(found.slice(line.length)) : 0;
}

const dataUrl = (bytes: Buffer) => `data:image/jpeg;base64,${bytes.toString('base64')}`;

/** The organization's objects, records and usage, as a user could check them. */
async function stateOf(org: TestOrg) {
  const prefix = `${org.organization.slug}/`;
  const records = await api.ctx.models.Media.find({ organizationId: org.organization.id }).lean();
  return {
    objects: (await api.objectKeys(prefix)).sort(),
    records: records.map((r) => r.key).sort(),
    usage: await api.ctx.repositories.usage.get(org.organization.id),
  };
}

/** Waits until the organization's state settles at what `expected` says (bookings settle off the answer's path). */
async function expectState(org: TestOrg, expected: { keys: string[]; bytes: number }) {
  const keys = [...expected.keys].sort();
  await eventually(async () =>
    expect(await stateOf(org)).toEqual({
      objects: keys,
      records: keys,
      usage: { bytes: expected.bytes, files: keys.length },
    }),
  );
  expect(await api.ctx.store.listIncompleteUploads(`${org.organization.slug}/`)).toEqual([]);
}

describe('onDuplicate on POST /media/upload', () => {
  let org: TestOrg;
  let bytes: Buffer;
  let first: Record_;

  beforeAll(async () => {
    org = await api.createOrg();
    bytes = uniqueJpeg();
    const res = await post(org, '/media/upload', form([['file', bytes, 'first.jpg']]));
    expect(res.status).toBe(201);
    first = res.body.data as Record_;
  });

  it('reject (query): 409 DUPLICATE with the stored key in details, nothing kept', async () => {
    const res = await post(
      org,
      '/media/upload?onDuplicate=reject',
      form([['file', bytes, 'again.jpg']]),
    );
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({
      error: 'DUPLICATE',
      details: [{ name: 'again.jpg', key: first.key }],
    });
    await expectState(org, { keys: [first.key], bytes: bytes.length });
  });

  it('reject (form field after the file): the same', async () => {
    const res = await post(
      org,
      '/media/upload',
      form([
        ['file', bytes, 'again.jpg'],
        ['onDuplicate', 'reject'],
      ]),
    );
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ error: 'DUPLICATE', details: [{ key: first.key }] });
    await expectState(org, { keys: [first.key], bytes: bytes.length });
  });

  it('reuse (form field): answers the stored record, no second object, no bytes counted as stored', async () => {
    const before = await storedBytes('/media/upload');
    expect(before).toBeGreaterThanOrEqual(bytes.length); // the first upload's
    const res = await post(
      org,
      '/media/upload',
      form([
        ['onDuplicate', 'reuse'],
        ['file', bytes, 'again.jpg'],
      ]),
    );
    expect(res.status).toBe(201);
    expect(res.body.data).toEqual(first);
    await expectState(org, { keys: [first.key], bytes: bytes.length });
    expect(await storedBytes('/media/upload')).toBe(before);
  });

  it('reject/reuse of new bytes store them as usual', async () => {
    const other = uniqueJpeg();
    const res = await post(
      org,
      '/media/upload?onDuplicate=reject',
      form([['file', other, 'n.jpg']]),
    );
    expect(res.status).toBe(201);
    const key = (res.body.data as Record_).key;
    await expectState(org, { keys: [first.key, key], bytes: bytes.length + other.length });
    // Deleted files are not duplicates: the same bytes again are stored anew.
    const del = await fetch(`${api.url}/media/record?media=${key}`, {
      method: 'DELETE',
      headers: org.auth,
    });
    expect(del.status).toBe(200);
    const again = await post(
      org,
      '/media/upload?onDuplicate=reuse',
      form([['file', other, 'n.jpg']]),
    );
    expect(again.status).toBe(201);
    const anew = (again.body.data as Record_).key;
    expect(anew).not.toBe(key);
    await expectState(org, { keys: [first.key, anew], bytes: bytes.length + other.length });
  });

  it('allow (the default) stores the same bytes again', async () => {
    const fresh = await api.createOrg();
    const a = await post(fresh, '/media/upload', form([['file', bytes, 'a.jpg']]));
    const b = await post(
      fresh,
      '/media/upload?onDuplicate=allow',
      form([['file', bytes, 'b.jpg']]),
    );
    expect([a.status, b.status]).toEqual([201, 201]);
    const keys = [a, b].map((r) => (r.body.data as Record_).key);
    expect(keys[0]).not.toBe(keys[1]);
    await expectState(fresh, { keys, bytes: 2 * bytes.length });
  });

  it("another organization's identical bytes are not a duplicate", async () => {
    const other = await api.createOrg();
    const res = await post(
      other,
      '/media/upload?onDuplicate=reject',
      form([['file', bytes, 'x.jpg']]),
    );
    expect(res.status).toBe(201);
    const key = (res.body.data as Record_).key;
    expect(key).not.toBe(first.key);
    await expectState(other, { keys: [key], bytes: bytes.length });
  });

  it('a bad value is a 400 naming the field, nothing kept', async () => {
    const before = await stateOf(org);
    const field = await post(
      org,
      '/media/upload',
      form([
        ['file', uniqueJpeg(), 'bad.jpg'],
        ['onDuplicate', 'skip'],
      ]),
    );
    expect(field.status).toBe(400);
    expect(field.body).toMatchObject({
      error: 'VALIDATION_FAILED',
      details: [{ field: 'onDuplicate' }],
    });
    const query = await post(
      org,
      '/media/upload?onDuplicate=skip',
      form([['file', bytes, 'q.jpg']]),
    );
    expect(query.status).toBe(400);
    const both = await post(
      org,
      '/media/upload?onDuplicate=reuse',
      form([
        ['onDuplicate', 'reject'],
        ['file', bytes, 'q.jpg'],
      ]),
    );
    expect(both.status).toBe(400);
    await eventually(async () => expect(await stateOf(org)).toEqual(before));
  });
});

describe('onDuplicate on POST /media/upload/multiple', () => {
  it('reuse answers the stored record in its place and stores the new file; reject keeps none', async () => {
    const org = await api.createOrg();
    const old = uniqueJpeg();
    const stored = (await post(org, '/media/upload', form([['file', old, 'old.jpg']]))).body
      .data as Record_;
    const fresh = uniqueJpeg();

    const rejected = await post(
      org,
      '/media/upload/multiple?onDuplicate=reject',
      form([
        ['files', fresh, 'fresh.jpg'],
        ['files', old, 'old-again.jpg'],
      ]),
    );
    expect(rejected.status).toBe(409);
    expect(rejected.body).toMatchObject({
      error: 'DUPLICATE',
      details: [{ name: 'old-again.jpg', key: stored.key }],
    });
    await expectState(org, { keys: [stored.key], bytes: old.length });

    const reused = await post(
      org,
      '/media/upload/multiple',
      form([
        ['onDuplicate', 'reuse'],
        ['files', old, 'old-again.jpg'],
        ['files', fresh, 'fresh.jpg'],
      ]),
    );
    expect(reused.status).toBe(201);
    const media = (reused.body.data as { media: Record_[] }).media;
    expect(media[0]).toEqual(stored);
    expect(media[1]).toMatchObject({ bytes: fresh.length });
    expect(media[1]!.key).not.toBe(stored.key);
    await expectState(org, { keys: [stored.key, media[1]!.key], bytes: old.length + fresh.length });
  });
});

describe('onDuplicate on POST /media/upload/base64', () => {
  it('reject and reuse, as a body field and as a query parameter', async () => {
    const org = await api.createOrg();
    const bytes = uniqueJpeg();
    const first = await post(org, '/media/upload/base64', { file: dataUrl(bytes), name: 'a.jpg' });
    expect(first.status).toBe(201);
    const stored = first.body.data as Record_;

    const rejected = await post(org, '/media/upload/base64', {
      file: dataUrl(bytes),
      name: 'b.jpg',
      onDuplicate: 'reject',
    });
    expect(rejected.status).toBe(409);
    expect(rejected.body).toMatchObject({ error: 'DUPLICATE', details: [{ key: stored.key }] });
    await expectState(org, { keys: [stored.key], bytes: bytes.length });

    const reused = await post(org, '/media/upload/base64?onDuplicate=reuse', {
      file: dataUrl(bytes),
      name: 'c.jpg',
    });
    expect(reused.status).toBe(201);
    expect(reused.body.data).toEqual(stored);
    await expectState(org, { keys: [stored.key], bytes: bytes.length });

    const other = await api.createOrg();
    const elsewhere = await post(other, '/media/upload/base64?onDuplicate=reject', {
      file: dataUrl(bytes),
    });
    expect(elsewhere.status).toBe(201);
  });
});

describe('UPLOAD_ON_DUPLICATE', () => {
  it('is the default when the request names none', async () => {
    const strict = await startApi('duplicates-default', { env: { UPLOAD_ON_DUPLICATE: 'reject' } });
    try {
      const org = await strict.createOrg();
      const bytes = uniqueJpeg();
      const send = (name: string) =>
        fetch(`${strict.url}/media/upload`, {
          method: 'POST',
          headers: org.auth,
          body: form([['file', bytes, name]]),
        });
      expect((await send('a.jpg')).status).toBe(201);
      const second = await send('b.jpg');
      expect(second.status).toBe(409);
      expect(((await second.json()) as Json).error).toBe('DUPLICATE');
    } finally {
      await strict.close();
    }
  });
});
