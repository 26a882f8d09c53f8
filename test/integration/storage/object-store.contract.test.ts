/**
 * The ObjectStore contract: one suite, run against every implementation (S3
 * against the harness's S3 in a bucket of its own, the file system in a fresh
 * temporary directory). See docs/storage.md.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { createLogger } from '../../../shared/logger';
import { FsObjectStore } from '../../../shared/storage/fs-object-store';
import type { ObjectStore } from '../../../shared/storage/object-store';
import { createS3Client } from '../../../shared/storage/s3-client';
import { S3ObjectStore } from '../../../shared/storage/s3-object-store';
import { isolatedEnv } from '../../support/context';

const MiB = 1024 * 1024;
const CHUNK = 256 * 1024;

interface Harness {
  store: ObjectStore;
  cleanup(): Promise<void>;
}

async function makeS3(): Promise<Harness> {
  const { config, bucket } = isolatedEnv('contract');
  const client = createS3Client(config.s3!);
  const store = new S3ObjectStore({
    client,
    bucket,
    region: config.s3!.region,
    publicEndpoint: config.s3!.publicEndpoint,
    logger: createLogger({ level: 'silent' }),
    partSize: 5 * MiB, // S3's minimum, so a 12 MB body takes three parts
  });
  await store.init();
  return {
    store,
    async cleanup() {
      for (const key of await store.listIncompleteUploads('')) {
        await client.removeIncompleteUpload(bucket, key).catch(() => undefined);
      }
      const keys: string[] = [];
      for await (const o of store.list('')) keys.push(o.key);
      await store.removeMany(keys);
      await client.removeBucket(bucket);
    },
  };
}

async function makeFs(): Promise<Harness> {
  const root = await mkdtemp(join(tmpdir(), 'contract-fs-'));
  const store = new FsObjectStore({ root: join(root, 'storage') });
  await store.init();
  return { store, cleanup: () => rm(root, { recursive: true, force: true }) };
}

const hash = (data: Buffer) => createHash('sha256').update(data).digest('hex');

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** A stream of `size` random bytes in 256 KiB chunks; `sha256()` is known once it has ended. */
function randomStream(size: number): { stream: Readable; sha256(): string } {
  const digest = createHash('sha256');
  let sent = 0;
  let result: string | undefined;
  const stream = new Readable({
    read() {
      if (sent >= size) {
        result = digest.digest('hex');
        this.push(null);
        return;
      }
      const bytes = randomBytes(Math.min(CHUNK, size - sent));
      digest.update(bytes);
      sent += bytes.length;
      this.push(bytes);
    },
  });
  return {
    stream,
    sha256() {
      if (!result) throw new Error('the stream has not ended');
      return result;
    },
  };
}

/** A body that fails with `error` after `after` bytes (a client that went away). */
function failingStream(after: number, error: Error): Readable {
  let sent = 0;
  return new Readable({
    read() {
      if (sent >= after) {
        this.destroy(error);
        return;
      }
      const bytes = randomBytes(CHUNK);
      sent += bytes.length;
      this.push(bytes);
    },
  });
}

async function keysUnder(store: ObjectStore, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  for await (const o of store.list(prefix)) keys.push(o.key);
  return keys.sort();
}

const implementations: [string, () => Promise<Harness>][] = [
  ['S3', makeS3],
  ['file system', makeFs],
];

describe.each(implementations)('ObjectStore contract: %s', (name, make) => {
  let harness: Harness;
  let store: ObjectStore;
  const type = { contentType: 'application/octet-stream' };

  beforeAll(async () => {
    harness = await make();
    store = harness.store;
  });

  afterAll(async () => {
    await harness?.cleanup();
  });

  it('answers ping and describes itself', async () => {
    await expect(store.ping()).resolves.toBeUndefined();
    expect(store.description).toEqual(expect.any(String));
  });

  it('puts a Buffer and gets the same bytes back', async () => {
    const data = randomBytes(100_000);
    await expect(store.put('buf/one.bin', data, { contentType: 'image/png' })).resolves.toEqual({
      bytes: data.length,
    });
    expect(hash(await readAll(await store.get('buf/one.bin')))).toBe(hash(data));
    const info = await store.stat('buf/one.bin');
    expect(info?.size).toBe(data.length);
    expect(typeof info?.etag).toBe('string');
    expect(info?.lastModified).toBeInstanceOf(Date);
  });

  it('puts a small stream', async () => {
    const body = randomStream(10_000);
    await expect(store.put('stream/small.bin', body.stream, type)).resolves.toEqual({
      bytes: 10_000,
    });
    expect(hash(await readAll(await store.get('stream/small.bin')))).toBe(body.sha256());
    expect((await store.stat('stream/small.bin'))?.size).toBe(10_000);
  });

  it('puts a 12 MB stream (several parts)', async () => {
    const size = 12 * MiB + 12_345;
    const body = randomStream(size);
    await expect(store.put('stream/big.bin', body.stream, type)).resolves.toEqual({ bytes: size });
    expect((await store.stat('stream/big.bin'))?.size).toBe(size);
    expect(hash(await readAll(await store.get('stream/big.bin')))).toBe(body.sha256());
  });

  it('puts a stream with the caller’s SHA-256 of it (asked once the body has ended)', async () => {
    const body = randomStream(50_000);
    let asked = 0;
    // body.sha256() throws if asked before the stream has ended.
    const sha256 = () => (asked++, body.sha256());
    await expect(store.put('stream/hashed.bin', body.stream, { ...type, sha256 })).resolves.toEqual(
      { bytes: 50_000 },
    );
    // S3 over HTTP signs the single PUT with it; the file system has no use for it.
    expect(asked).toBe(name === 'S3' ? 1 : 0);
    expect(hash(await readAll(await store.get('stream/hashed.bin')))).toBe(body.sha256());
  });

  it('an empty body is an empty object', async () => {
    await expect(store.put('empty/zero', Buffer.alloc(0), type)).resolves.toEqual({ bytes: 0 });
    expect((await store.stat('empty/zero'))?.size).toBe(0);
    expect((await readAll(await store.get('empty/zero'))).length).toBe(0);
  });

  it('replaces an object on a second put', async () => {
    await store.put('replace/x', Buffer.from('first version'), type);
    await store.put('replace/x', Buffer.from('second'), type);
    expect((await readAll(await store.get('replace/x'))).toString()).toBe('second');
    expect((await store.stat('replace/x'))?.size).toBe(6);
  });

  it('gets byte ranges (inclusive end)', async () => {
    const data = randomBytes(10_000);
    await store.put('range/r.bin', data, type);
    const middle = await readAll(await store.get('range/r.bin', { start: 1000, end: 1999 }));
    expect(middle.equals(data.subarray(1000, 2000))).toBe(true);
    const suffix = await readAll(await store.get('range/r.bin', { start: 9950, end: 9999 }));
    expect(suffix.equals(data.subarray(9950))).toBe(true);
    const one = await readAll(await store.get('range/r.bin', { start: 0, end: 0 }));
    expect(one.equals(data.subarray(0, 1))).toBe(true);
  });

  it('copies, then the source can be removed', async () => {
    const data = randomBytes(50_000);
    await store.put('copy/src.bin', data, type);
    await store.copy('copy/src.bin', 'copy/nested/dst.bin');
    await store.remove('copy/src.bin');
    expect(await store.stat('copy/src.bin')).toBeNull();
    expect(hash(await readAll(await store.get('copy/nested/dst.bin')))).toBe(hash(data));
    expect(await keysUnder(store, 'copy/')).toEqual(['copy/nested/dst.bin']);
  });

  it('removing a missing object is not an error', async () => {
    await expect(store.remove('missing/never-was')).resolves.toBeUndefined();
    await expect(store.removeMany([])).resolves.toBeUndefined();
  });

  it('removes many', async () => {
    const keys = ['many/a', 'many/b/c', 'many/d'];
    for (const key of keys) await store.put(key, Buffer.from(key), type);
    await store.put('many/keep', Buffer.from('keep'), type);
    await store.removeMany([...keys, 'many/not-there']);
    expect(await keysUnder(store, 'many/')).toEqual(['many/keep']);
  });

  it('lists exactly the keys under a prefix, nested ones included', async () => {
    const inside = ['list/a.txt', 'list/b/c.txt', 'list/b/d/e.txt', 'list/b-side.txt'];
    const outside = ['lister/x.txt', 'lis.txt'];
    for (const key of [...inside, ...outside]) await store.put(key, Buffer.from(key), type);

    const listed: { key: string; size: number; lastModified: Date }[] = [];
    for await (const o of store.list('list/')) listed.push(o);
    expect(listed.map((o) => o.key).sort()).toEqual([...inside].sort());
    for (const o of listed) {
      expect(o.size).toBe(Buffer.byteLength(o.key));
      expect(o.lastModified).toBeInstanceOf(Date);
    }
    expect(await keysUnder(store, 'list/b/')).toEqual(['list/b/c.txt', 'list/b/d/e.txt']);
    expect(await keysUnder(store, 'list/b')).toEqual([
      'list/b-side.txt',
      'list/b/c.txt',
      'list/b/d/e.txt',
    ]);
    expect(await keysUnder(store, 'nothing-here/')).toEqual([]);
  });

  it('a missing object: get is MEDIA_NOT_FOUND, stat is null', async () => {
    await expect(store.get('missing/none.bin')).rejects.toMatchObject({
      code: 'MEDIA_NOT_FOUND',
      status: 404,
    });
    await expect(store.get('missing/none.bin', { start: 0, end: 10 })).rejects.toMatchObject({
      code: 'MEDIA_NOT_FOUND',
    });
    expect(await store.stat('missing/none.bin')).toBeNull();
  });

  it('a body that fails half-way: put rejects with its error and leaves nothing behind', async () => {
    const error = new Error('the client went away');
    const body = failingStream(7 * MiB, error);
    await expect(store.put('abort/partial.bin', body, type)).rejects.toBe(error);
    expect(body.destroyed).toBe(true);
    expect(await keysUnder(store, 'abort/')).toEqual([]);
    expect(await store.stat('abort/partial.bin')).toBeNull();
    expect(await store.listIncompleteUploads('abort/')).toEqual([]);
  });

  it('concurrent puts of 20 keys all land', async () => {
    const bodies = Array.from({ length: 20 }, (_, i) => ({
      key: `concurrent/${String(i).padStart(2, '0')}.bin`,
      data: randomBytes(1000 + i * 997),
    }));
    await Promise.all(bodies.map(({ key, data }) => store.put(key, data, type)));
    expect(await keysUnder(store, 'concurrent/')).toEqual(bodies.map((b) => b.key));
    for (const { key, data } of bodies) {
      expect(hash(await readAll(await store.get(key)))).toBe(hash(data));
    }
    expect(await store.listIncompleteUploads('concurrent/')).toEqual([]);
  });
});

describe('S3: one PUT or parts, payloads signed with their SHA-256', () => {
  const type = { contentType: 'application/octet-stream' };
  let harness: Harness;
  beforeAll(async () => {
    harness = await makeS3();
  });
  afterAll(async () => {
    await harness?.cleanup();
  });

  it('sends a body within the single-PUT bound (two 5 MiB parts here) as one PUT, a larger one in parts', async () => {
    // An S3 ETag tells: a multipart object's is "<hash>-<parts>".
    const within = randomStream(8 * MiB + 1);
    await harness.store.put('signed/within.bin', within.stream, type);
    expect((await harness.store.stat('signed/within.bin'))?.etag).toMatch(/^[0-9a-f]{32}$/);
    expect(hash(await readAll(await harness.store.get('signed/within.bin')))).toBe(within.sha256());
    const over = randomStream(10 * MiB + 1);
    await harness.store.put('signed/over.bin', over.stream, type);
    expect((await harness.store.stat('signed/over.bin'))?.etag).toMatch(/-3$/);
    expect(hash(await readAll(await harness.store.get('signed/over.bin')))).toBe(over.sha256());
  });

  it('refuses a single PUT whose caller’s hash does not match the bytes, and stores nothing', async () => {
    const body = randomStream(20_000);
    await expect(
      harness.store.put('signed/wrong.bin', body.stream, {
        contentType: 'application/octet-stream',
        sha256: () => hash(Buffer.from('other bytes')),
      }),
    ).rejects.toThrow();
    expect(await harness.store.stat('signed/wrong.bin')).toBeNull();
  });
});
