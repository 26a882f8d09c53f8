/**
 * A plain download's read of the object, started beside its record's lookup
 * (DownloadService.prefetch, docs/performance.md "Downloads"): only a key
 * under the caller's organization's prefix is opened, the stream taken is the
 * one opened, a read discarded is destroyed, and a read that fails (no such
 * object) rejects nothing unless taken. Through real services: a trashed
 * file's object is kept while its download answers 404
 * (test/integration/api/trash.test.ts), another organization's key is 404
 * (test/integration/api/tenant-matrix.test.ts), and every download's bytes.
 */
import { PassThrough, type Readable } from 'node:stream';
import type { MediaRepository } from '@shared/repositories/media.repository';
import type { ObjectStore } from '@shared/storage/object-store';
import { DownloadService } from '../../api/services/download.service';

const caller = {
  organization: { id: 1, slug: 'acme', name: 'Acme', quotaBytes: null, rootFolderId: 1 },
};

function setup(get: (key: string) => Promise<Readable>) {
  const opened: string[] = [];
  const store = {
    get: (key: string) => {
      opened.push(key);
      return get(key);
    },
  } as unknown as ObjectStore;
  const downloads = new DownloadService({
    media: {} as MediaRepository,
    store,
    scan: { enabled: false, defaultPolicy: 'clean-only' },
  });
  return { downloads, opened };
}

it("opens no key outside the caller's organization's prefix", () => {
  const { downloads, opened } = setup(() => Promise.resolve(new PassThrough()));
  expect(downloads.prefetch(caller, 'other/a.jpg')).toBeUndefined();
  expect(downloads.prefetch(caller, 'acme-2/a.jpg')).toBeUndefined();
  expect(downloads.prefetch(caller, 'acmea.jpg')).toBeUndefined();
  expect(opened).toEqual([]);
});

it('takes the stream it opened, and a discard after the take leaves it alone', async () => {
  const body = new PassThrough();
  const { downloads, opened } = setup(() => Promise.resolve(body));
  const early = downloads.prefetch(caller, 'acme/photos/a.jpg')!;
  expect(opened).toEqual(['acme/photos/a.jpg']);
  await expect(early.take()).resolves.toBe(body);
  early.discard();
  await new Promise((resolve) => setImmediate(resolve));
  expect(body.destroyed).toBe(false);
});

it('destroys a read that is discarded untaken', async () => {
  const body = new PassThrough();
  const { downloads } = setup(() => Promise.resolve(body));
  downloads.prefetch(caller, 'acme/a.jpg')!.discard();
  await new Promise((resolve) => setImmediate(resolve));
  expect(body.destroyed).toBe(true);
});

it('rejects nothing for a failed read discarded, and rejects the take of one taken', async () => {
  const missing = () => Promise.reject(new Error('no such object'));
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  try {
    const { downloads } = setup(missing);
    downloads.prefetch(caller, 'acme/gone.jpg')!.discard();
    const taken = downloads.prefetch(caller, 'acme/gone.jpg')!;
    await expect(taken.take()).rejects.toThrow('no such object');
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(unhandled).toEqual([]);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});
