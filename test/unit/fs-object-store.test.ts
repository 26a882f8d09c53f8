/**
 * What only the file-system store has (the shared behaviour is in
 * test/integration/storage/object-store.contract.test.ts): key validation, the
 * sidecar, temporary files. Works in a fresh temporary directory.
 */
import { mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { META_SUFFIX, TEMP_DIR } from '../../shared/storage/fs-keys';
import { FsObjectStore } from '../../shared/storage/fs-object-store';
import { eventually } from '../support/eventually';

const type = { contentType: 'image/jpeg' };

async function keys(store: FsObjectStore, prefix = ''): Promise<string[]> {
  const out: string[] = [];
  for await (const o of store.list(prefix)) out.push(o.key);
  return out;
}

describe('FsObjectStore', () => {
  let dir: string;
  let store: FsObjectStore;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fs-store-'));
    store = new FsObjectStore({ root: join(dir, 'storage') });
    await store.init();
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('describes itself with its absolute root', () => {
    expect(store.description).toBe(`file system ${join(dir, 'storage')}`);
  });

  it("gives addresses as <endpoint>/<bucket>/<key>, never with the server's path", () => {
    expect(store.address('acme/a-x.jpg')).toBe('file:///media/acme/a-x.jpg');
    const named = new FsObjectStore({
      root: join(dir, 'storage'),
      bucket: 'uploads',
      publicEndpoint: 'https://files.example.com',
    });
    expect(named.address('merged_1.pdf')).toBe('https://files.example.com/uploads/merged_1.pdf');
    expect(store.address('merged_1.pdf')).not.toContain(dir);
    expect(() => store.address('../escape')).toThrow(/Invalid object key/);
  });

  it.each([
    '../escape',
    'a/../../escape',
    'a/./b',
    '/etc/passwd',
    'a//b',
    'a/',
    '',
    'back\\slash',
    'nul\0byte',
    `${TEMP_DIR}/x`,
    `photo${META_SUFFIX}`,
  ])('refuses the key %j', async (key) => {
    await expect(store.put(key, Buffer.from('x'), type)).rejects.toThrow(/Invalid object key/);
    await expect(store.get(key)).rejects.toThrow(/Invalid object key/);
    await expect(store.stat(key)).rejects.toThrow(/Invalid object key/);
    await expect(store.remove(key)).rejects.toThrow(/Invalid object key/);
    await expect(store.copy('a', key)).rejects.toThrow(/Invalid object key/);
    expect(await readdir(dir)).toEqual(['storage']);
  });

  it('lists nothing for a prefix that would leave the root', async () => {
    await store.put('a/b', Buffer.from('x'), type);
    expect(await keys(store, '../')).toEqual([]);
    expect(await keys(store, 'a/../')).toEqual([]);
    expect(await keys(store, `${TEMP_DIR}/`)).toEqual([]);
  });

  it('keeps the content type in a sidecar that list never shows', async () => {
    await store.put('org/photo.jpg', Buffer.from('jpeg'), type);
    await store.copy('org/photo.jpg', 'org/copy.jpg');
    expect(await readdir(join(dir, 'storage', 'org'))).toEqual(
      expect.arrayContaining(['photo.jpg', `photo.jpg${META_SUFFIX}`]),
    );
    expect(await keys(store)).toEqual(['org/copy.jpg', 'org/photo.jpg']);
    expect(await store.contentType('org/photo.jpg')).toBe('image/jpeg');
    expect(await store.contentType('org/copy.jpg')).toBe('image/jpeg');
    expect(await store.contentType('org/none.jpg')).toBeUndefined();
    await store.remove('org/photo.jpg');
    await store.remove('org/copy.jpg');
    // Nothing left, not even the emptied directory.
    expect(await readdir(join(dir, 'storage'))).toEqual([TEMP_DIR]);
  });

  it('lists in key order', async () => {
    for (const key of ['a/b', 'a-c', 'a/a/z', 'b', 'A'])
      await store.put(key, Buffer.from(key), type);
    expect(await keys(store)).toEqual(['A', 'a-c', 'a/a/z', 'a/b', 'b']);
  });

  it('a key under an existing object is a conflict (409), not a 503', async () => {
    await store.put('a', Buffer.from('x'), type);
    await expect(store.put('a/b', Buffer.from('y'), type)).rejects.toMatchObject({
      code: 'CONFLICT',
      status: 409,
    });
    expect(await store.stat('a/b')).toBeNull();
    await expect(store.get('a/b')).rejects.toMatchObject({ code: 'MEDIA_NOT_FOUND' });
  });

  it('a put in progress shows as an incomplete upload, then is gone', async () => {
    const body = new Readable({ read() {} });
    const push = (chunk: Buffer | null) => void body.push(chunk);
    const put = store.put('slow/file.bin', body, type);
    push(Buffer.alloc(1000));
    // The temporary file appears once the put has opened it.
    await eventually(
      async () => expect(await store.listIncompleteUploads('slow/')).toEqual(['slow/file.bin']),
      5_000,
      10,
    );
    expect(await store.listIncompleteUploads('other/')).toEqual([]);
    expect(await keys(store)).toEqual([]);
    push(null);
    await expect(put).resolves.toEqual({ bytes: 1000 });
    expect(await store.listIncompleteUploads('')).toEqual([]);
  });

  it('init removes stale temporary files (a crashed put) and keeps fresh ones', async () => {
    const temp = join(dir, 'storage', TEMP_DIR);
    const stale = join(temp, `crashed~${Buffer.from('x/y').toString('base64url')}`);
    const fresh = join(temp, `running~${Buffer.from('x/z').toString('base64url')}`);
    await writeFile(stale, 'partial');
    await writeFile(fresh, 'partial');
    const old = new Date(Date.now() - 2 * 60 * 60 * 1000);
    await utimes(stale, old, old);
    expect(await store.listIncompleteUploads('x/')).toEqual(['x/y', 'x/z']);
    await store.init();
    expect(await readdir(temp)).toEqual([fresh.slice(temp.length + 1)]);
  });

  it('ping fails with 503 when the root is not a writable directory', async () => {
    await store.ping();
    const file = join(dir, 'a-file');
    await writeFile(file, 'x');
    const broken = new FsObjectStore({ root: file });
    await expect(broken.ping()).rejects.toMatchObject({
      code: 'DEPENDENCY_UNAVAILABLE',
      status: 503,
    });
    await expect(broken.init()).rejects.toMatchObject({ status: 503 });
  });

  it('a file-system failure during put is a 503 and leaves nothing behind', async () => {
    // The temporary directory replaced by a file: creating the temporary file fails (ENOTDIR).
    await rm(join(dir, 'storage', TEMP_DIR), { recursive: true });
    await writeFile(join(dir, 'storage', TEMP_DIR), '');
    await expect(store.put('k', Buffer.from('x'), type)).rejects.toMatchObject({ status: 503 });
    await expect(store.put('k', Readable.from([Buffer.from('x')]), type)).rejects.toMatchObject({
      status: 503,
    });
    expect(await keys(store)).toEqual([]);
  });

  it('an object where a directory of keys is (or the reverse) is a conflict, and leaves no sidecar', async () => {
    await store.put('d/e', Buffer.from('x'), type);
    await expect(store.put('d', Buffer.from('y'), type)).rejects.toMatchObject({ status: 409 });
    await expect(store.copy('d/e', 'd')).rejects.toMatchObject({ status: 409 });
    expect(await readdir(join(dir, 'storage'))).toEqual([TEMP_DIR, 'd'].sort());
    expect(await readdir(join(dir, 'storage', TEMP_DIR))).toEqual([]);
  });
});
