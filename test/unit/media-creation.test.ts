/**
 * MediaCreation (shared/media-creation.ts) on its own, with its dependencies
 * as small in-memory fakes: what each outcome of a commit leaves behind
 * (bookings given back or settled, objects removed or kept, records, the
 * `media.created` event carried by the insert). The same protocol through
 * real services is tested by the upload, job and consistency suites.
 */
import { isDuplicateKey } from '../../shared/db/errors';
import { isAppError } from '../../shared/errors';
import { createLogger } from '../../shared/logger';
import { MediaCreation, type FileRecord, type Owner } from '../../shared/media-creation';
import type { MediaRecord, NewMedia } from '../../shared/repositories/media.repository';
import type { Booking } from '../../shared/repositories/usage.repository';

const owner: Owner = { id: 7, quotaBytes: 1_000 };
const file = (key: string, bytes = 100): FileRecord => ({
  key,
  name: `${key}.jpg`,
  mimetype: 'image/jpeg',
  bytes,
  checksum: 'sha256:00',
});
const options = { folderId: null, origin: { ipAddress: '::1', userAgent: 't' }, createdBy: 'tok' };

function fakes(
  over: {
    insertFails?: Error;
    quotaLeft?: number;
    folderLive?: boolean;
    /** The organization's stored records by checksum (duplicates). */
    stored?: Map<string, MediaRecord>;
  } = {},
) {
  let nextId = 100;
  let quotaLeft = over.quotaLeft ?? 1_000;
  const state = {
    booked: [] as Booking[],
    cancelled: [] as number[],
    settled: [] as number[],
    inserted: [] as (NewMedia & { id: number })[],
    removedObjects: [] as string[],
    deleted: [] as number[],
    promoted: [] as number[],
    byJob: new Map<string, MediaRecord>(),
  };
  const background: (() => Promise<unknown>)[] = [];
  const creation = new MediaCreation({
    media: {
      nextIds: (n: number) => Promise.resolve(Array.from({ length: n }, () => nextId++)),
      insertAll: (items: NewMedia[], ids: number[]) => {
        if (over.insertFails) return Promise.reject(over.insertFails);
        const records = items.map((m, i) => ({ ...m, id: ids[i]! }));
        state.inserted.push(...records);
        return Promise.resolve(records as unknown as MediaRecord[]);
      },
      removeByIds: () => Promise.resolve(),
      findByJobId: (jobId: string) => Promise.resolve(state.byJob.get(jobId) ?? null),
      findByChecksums: (org: number, checksums: string[]) =>
        Promise.resolve(
          new Map(
            checksums.flatMap((c) => {
              const r = over.stored?.get(c);
              return r && r.organizationId === org ? [[c, r] as const] : [];
            }),
          ),
        ),
    } as never,
    usage: {
      book: (org: number, id: number, usage: { bytes: number; files: number }) => {
        if (usage.bytes > quotaLeft) return Promise.resolve(null);
        quotaLeft -= usage.bytes;
        const b = { organizationId: org, id, usage, until: new Date(Date.now() + 600_000) };
        state.booked.push(b);
        return Promise.resolve(b);
      },
      keep: () => Promise.resolve(true),
      settle: (bookings: Booking[]) => {
        state.settled.push(...bookings.map((b) => b.id));
        return Promise.resolve();
      },
      cancel: (bookings: Booking[]) => {
        state.cancelled.push(...bookings.map((b) => b.id));
        return Promise.resolve();
      },
    } as never,
    folders: { isLive: () => Promise.resolve(over.folderLive ?? true) },
    deletion: {
      delete: (r: MediaRecord) => {
        state.deleted.push(r.id);
        return Promise.resolve(true);
      },
    },
    store: {
      removeMany: (keys: string[]) => {
        state.removedObjects.push(...keys);
        return Promise.resolve();
      },
    },
    outbox: {
      promoteMedia: (which) => {
        if ('ids' in which) state.promoted.push(...which.ids);
        return Promise.resolve(0);
      },
    },
    logger: createLogger({ level: 'silent' }),
    background: (_what, task) => void background.push(task),
  });
  const settle = async () => {
    for (const task of background.splice(0)) await task();
  };
  return { creation, state, settle };
}

it('records the files in one write, each with its media.created event; settles and promotes off the answer’s path', async () => {
  const { creation, state, settle } = fakes();
  const a = creation.start(owner);
  const b = creation.start(owner);
  a.book(100); // while its bytes stream
  const records = await creation.commit(
    owner,
    [
      { file: a, record: file('a') },
      { file: b, record: file('b') }, // booked by the commit
    ],
    options,
  );
  expect(records.map((r) => r.id)).toEqual([100, 101]);
  expect(state.inserted.map((r) => r.pendingEvents?.map((e) => e.id))).toEqual([
    ['media.created:100'],
    ['media.created:101'],
  ]);
  expect([state.settled, state.promoted]).toEqual([[], []]);
  await settle();
  expect(state.settled).toEqual([100, 101]);
  expect(state.promoted).toEqual([100, 101]);
  expect(state.cancelled).toEqual([]);
  expect(state.removedObjects).toEqual([]);
});

it('past the quota: 413, nothing recorded, what was booked given back, the objects removed', async () => {
  const { creation, state } = fakes({ quotaLeft: 150 });
  const [a, b] = [creation.start(owner), creation.start(owner)];
  const err = await creation
    .commit(
      owner,
      [
        { file: a, record: file('a', 100) },
        { file: b, record: file('b', 100) },
      ],
      options,
    )
    .catch((e: unknown) => e);
  expect(isAppError(err) && [err.status, err.code]).toEqual([413, 'QUOTA_EXCEEDED']);
  expect(state.inserted).toEqual([]);
  expect(state.cancelled).toEqual([100]);
  expect(state.removedObjects.sort()).toEqual(['a', 'b']);
});

it('an insert that fails: its error, bookings given back, objects removed', async () => {
  const boom = new Error('MongoDB is away');
  const { creation, state } = fakes({ insertFails: boom });
  const a = creation.start(owner);
  await expect(creation.commit(owner, [{ file: a, record: file('a') }], options)).rejects.toBe(
    boom,
  );
  expect(state.cancelled).toEqual([100]);
  expect(state.removedObjects).toEqual(['a']);
});

it('a job’s retry whose record an earlier attempt wrote: that record, this booking given back, the object kept', async () => {
  const duplicate = Object.assign(new Error('E11000 duplicate key'), { code: 11000 });
  expect(isDuplicateKey(duplicate)).toBe(true);
  const { creation, state } = fakes({ insertFails: duplicate });
  const earlier = { id: 42, key: 'a' } as MediaRecord;
  state.byJob.set('image-1', earlier);
  const a = creation.start(owner);
  const records = await creation.commit(owner, [{ file: a, record: file('a') }], {
    ...options,
    jobId: 'image-1',
  });
  expect(records).toEqual([earlier]);
  expect(state.cancelled).toEqual([100]);
  expect(state.removedObjects).toEqual([]);
});

it('a folder deleted while the records were written: they are taken back as a delete takes them (404)', async () => {
  const { creation, state } = fakes({ folderLive: false });
  const a = creation.start(owner);
  const err = await creation
    .commit(owner, [{ file: a, record: file('a') }], { ...options, folderId: 9 })
    .catch((e: unknown) => e);
  expect(isAppError(err) && [err.status, err.code]).toEqual([404, 'FOLDER_NOT_FOUND']);
  expect(state.deleted).toEqual([100]);
});

it('a job whose time ran out before the insert records nothing and removes its object', async () => {
  const { creation, state } = fakes();
  const controller = new AbortController();
  controller.abort(new Error('time is up'));
  const a = creation.start(owner);
  await expect(
    creation.commit(owner, [{ file: a, record: file('a') }], {
      ...options,
      jobId: 'image-2',
      signal: controller.signal,
    }),
  ).rejects.toThrow('time is up');
  expect(state.inserted).toEqual([]);
  expect(state.cancelled).toEqual([100]);
  expect(state.removedObjects).toEqual(['a']);
});

it('abandon gives back what files booked before any commit', async () => {
  const { creation, state } = fakes();
  const [a, b] = [creation.start(owner), creation.start(owner)];
  a.book(10);
  await creation.abandon([a, b]);
  expect(state.cancelled).toEqual([100]);
});

describe('onDuplicate', () => {
  const existing = { id: 5, organizationId: owner.id, key: 'old' } as MediaRecord;
  const same = (key: string): FileRecord => ({ ...file(key), checksum: 'sha256:same' });
  const stored = new Map([['sha256:same', existing]]);

  it('reject: 409 DUPLICATE naming the stored key; nothing recorded, every booking given back, every object removed', async () => {
    const { creation, state } = fakes({ stored });
    const [a, b] = [creation.start(owner), creation.start(owner)];
    a.book(100);
    const err = await creation
      .commit(
        owner,
        [
          { file: a, record: file('a') },
          { file: b, record: same('b') },
        ],
        { ...options, onDuplicate: 'reject' },
      )
      .catch((e: unknown) => e);
    expect(isAppError(err) && [err.status, err.code, err.details]).toEqual([
      409,
      'DUPLICATE',
      [expect.objectContaining({ name: 'b.jpg', key: 'old' })],
    ]);
    expect(state.inserted).toEqual([]);
    expect(state.cancelled).toEqual([100]);
    expect(state.removedObjects.sort()).toEqual(['a', 'b']);
  });

  it('reuse: the stored record in the duplicate’s place, its object removed and booking given back; the others recorded', async () => {
    const { creation, state, settle } = fakes({ stored });
    const [a, b, c] = [creation.start(owner), creation.start(owner), creation.start(owner)];
    for (const f of [a, b, c]) f.book(100);
    const records = await creation.commit(
      owner,
      [
        { file: a, record: file('a') },
        { file: b, record: same('b') },
        { file: c, record: file('c') },
      ],
      { ...options, onDuplicate: 'reuse' },
    );
    expect(records.map((r) => r.id)).toEqual([100, 5, 102]);
    expect(state.inserted.map((r) => r.key)).toEqual(['a', 'c']);
    expect(state.cancelled).toEqual([101]);
    expect(state.removedObjects).toEqual(['b']);
    await settle();
    expect(state.settled).toEqual([100, 102]);
  });

  it('reuse of nothing but duplicates writes nothing; allow (the default) records them', async () => {
    const { creation, state } = fakes({ stored });
    const a = creation.start(owner);
    a.book(100);
    const records = await creation.commit(owner, [{ file: a, record: same('a') }], {
      ...options,
      onDuplicate: 'reuse',
    });
    expect(records).toEqual([existing]);
    expect([state.inserted, state.cancelled, state.removedObjects]).toEqual([[], [100], ['a']]);

    const allowed = fakes({ stored });
    const b = allowed.creation.start(owner);
    const kept = await allowed.creation.commit(owner, [{ file: b, record: same('b') }], options);
    expect(kept.map((r) => r.key)).toEqual(['b']);
  });

  it('another organization’s record is not a duplicate', async () => {
    const { creation, state } = fakes({
      stored: new Map([['sha256:same', { ...existing, organizationId: 8 }]]),
    });
    const a = creation.start(owner);
    const records = await creation.commit(owner, [{ file: a, record: same('a') }], {
      ...options,
      onDuplicate: 'reject',
    });
    expect(records.map((r) => r.key)).toEqual(['a']);
    expect(state.removedObjects).toEqual([]);
  });
});
