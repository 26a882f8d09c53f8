/**
 * ResultsService.readMany (the merge worker's input reads): every distinct
 * key read once, at most INPUT_READ_CONCURRENCY at a time, over a real
 * file-system store; the first failure is thrown and no read starts after it.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { isAppError } from '../../shared/errors';
import { createLogger } from '../../shared/logger';
import type { MediaCreation } from '../../shared/media-creation';
import type { FoldersRepository } from '../../shared/repositories/folders.repository';
import type { MediaRepository } from '../../shared/repositories/media.repository';
import { FsObjectStore } from '../../shared/storage/fs-object-store';
import { INPUT_READ_CONCURRENCY, ResultsService } from '../../worker/services/results.service';

/** The store, with the reads it was asked for and the most that were open at once. */
class CountingStore extends FsObjectStore {
  gets: string[] = [];
  open = 0;
  maxOpen = 0;

  override async get(key: string): Promise<Readable> {
    this.gets.push(key);
    this.open++;
    this.maxOpen = Math.max(this.maxOpen, this.open);
    try {
      await new Promise((resolve) => setTimeout(resolve, 5)); // a store round trip
      return await super.get(key);
    } finally {
      this.open--;
    }
  }
}

let dir: string;
let store: CountingStore;
let results: ResultsService;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'read-many-'));
  store = new CountingStore({ root: dir });
  await store.init();
  results = new ResultsService({
    store,
    // readMany touches neither repository, nor records anything.
    media: {} as MediaRepository,
    folders: {} as FoldersRepository,
    creation: {} as MediaCreation,
    logger: createLogger({ level: 'silent' }),
  });
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

it('reads each distinct key once, a bounded number at a time, and returns every one whole', async () => {
  const keys = Array.from({ length: 30 }, (_, i) => `org/input-${i}.pdf`);
  for (const [i, key] of keys.entries()) {
    await store.put(key, Buffer.from(`%PDF-1.7 input ${i}`), { contentType: 'application/pdf' });
  }
  const asked = [...keys, keys[3]!, keys[3]!, keys[17]!];

  const bytes = await results.readMany(asked, 1024);

  expect(store.gets.sort()).toEqual([...keys].sort());
  expect(store.maxOpen).toBe(INPUT_READ_CONCURRENCY);
  expect([...bytes.keys()].sort()).toEqual([...keys].sort());
  for (const [i, key] of keys.entries()) {
    expect(bytes.get(key)!.toString()).toBe(`%PDF-1.7 input ${i}`);
  }
});

it('throws the first failure and starts no read after it', async () => {
  const keys = Array.from({ length: 30 }, (_, i) => `org/input-${i}.pdf`);
  for (const key of keys) {
    if (key !== keys[2])
      await store.put(key, Buffer.from('%PDF-1.7'), { contentType: 'application/pdf' });
  }

  const failure = await results.readMany(keys, 1024).catch((err: unknown) => err);

  expect(isAppError(failure) && failure.status).toBe(404);
  // Those already in flight when keys[2] failed finish; nothing new starts.
  expect(store.gets.length).toBeLessThanOrEqual(2 + INPUT_READ_CONCURRENCY);
  expect(store.gets.length).toBeLessThan(keys.length);
});

it('refuses an input over the size limit', async () => {
  await store.put('org/big.pdf', Buffer.alloc(2048, 1), { contentType: 'application/pdf' });
  const failure = await results.readMany(['org/big.pdf'], 1024).catch((err: unknown) => err);
  expect(isAppError(failure) && failure.status).toBe(413);
});
