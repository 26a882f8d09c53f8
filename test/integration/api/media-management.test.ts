/**
 * Managing what is stored, through the real API, worker, Redis, S3 and
 * MongoDB: listing (filters, newest first, cursor pages that neither repeat
 * nor skip while others upload, a changed cursor refused), getting and
 * deleting one record (nothing left: object, record, usage; a second delete
 * 404; a delete cut off at each step finished by `reconcile --fix`; a job
 * whose input was deleted fails with 404), folders (rules, recursive delete as
 * a job with progress), usage, and the indexes behind every list filter.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { cliSession, type CliSession } from '../../support/cli';
import { startApi, type TestApi, type TestOrg, type UploadedMedia } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Json = Record<string, unknown>;
type Media = { id: number; key: string; name: string; mimetype: string; folderId: number | null };
type Page = { media: Media[]; nextCursor: string | null };

let api: TestApi;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('manage');
  org = await api.createOrg('keeper');
});
afterAll(() => api.close());

async function call<T = Json>(
  method: string,
  path: string,
  body?: FormData | Json,
  as: TestOrg = org,
): Promise<{ status: number; body: { data: T; error?: string; statusCode: number } }> {
  const json = body !== undefined && !(body instanceof FormData);
  const res = await fetch(`${api.url}${path}`, {
    method,
    headers: { ...as.auth, ...(json ? { 'Content-Type': 'application/json' } : {}) },
    body: json ? JSON.stringify(body) : body,
  });
  const parsed = (await res.json()) as { data: T; error?: string; statusCode: number };
  const template = path
    .split('?')[0]!
    .replace(/^\/media\/folders\/\d+$/, '/media/folders/{id}')
    .replace(/^\/media\/\d+$/, '/media/{id}')
    .replace(/^\/media\/jobs\/[^/]+$/, '/media/jobs/{id}');
  expectMatchesSpec(method, template, res.status, parsed, res.headers);
  return { status: res.status, body: parsed };
}

const upload = (name: string, bytes = fixture('Canon_40D.jpg'), folder?: string) =>
  org.uploadRecord(bytes, name, folder ? { folder } : {});

const list = (query = '') => call<Page>('GET', `/media${query ? `?${query}` : ''}`);

describe('GET /media', () => {
  let made: UploadedMedia[] = [];
  beforeAll(async () => {
    made = [];
    for (let i = 0; i < 7; i++)
      made.push(await upload(`photo-${i}.jpg`, undefined, i < 3 ? 'Trips' : undefined));
    made.push(await upload('invoice.pdf', fixture('minimal-document.pdf')));
  });

  it('lists newest first, a page at a time, to a null cursor', async () => {
    const seen: number[] = [];
    let cursor: string | null = null;
    do {
      const { status, body } = await list(`limit=3${cursor ? `&cursor=${cursor}` : ''}`);
      expect(status).toBe(200);
      expect(body.data.media.length).toBeLessThanOrEqual(3);
      seen.push(...body.data.media.map((m) => m.id));
      cursor = body.data.nextCursor;
    } while (cursor);
    expect(seen).toEqual(made.map((m) => m.id).sort((a, b) => b - a));
    // Every record shows its folderId.
    expect((await list('limit=1')).body.data.media[0]).toHaveProperty('folderId');
  });

  it('filters by folder (id or name), type, name prefix and creation time', async () => {
    const ids = async (query: string) =>
      (await list(query)).body.data.media.map((m) => m.id).sort();
    const trips = made
      .slice(0, 3)
      .map((m) => m.id)
      .sort();
    const folderId = (await api.ctx.models.Folder.findOne({ name: 'Trips' }).lean())!.id;
    expect(await ids(`folderId=${folderId}`)).toEqual(trips);
    expect(await ids('folder=Trips')).toEqual(trips);
    expect(await ids('type=pdf')).toEqual([made[7]!.id]);
    expect(await ids('type=application/pdf')).toEqual([made[7]!.id]);
    expect(await ids('type=image')).toEqual(
      made
        .slice(0, 7)
        .map((m) => m.id)
        .sort(),
    );
    expect(await ids('name=photo-1')).toEqual([made[1]!.id]);
    const fourth = await api.ctx.models.Media.findOne({ id: made[3]!.id }).lean();
    const after = new Date(fourth!.createdAt.getTime() - 1).toISOString();
    expect((await ids(`createdAfter=${after}`)).length).toBeGreaterThanOrEqual(5);
    expect(await ids(`createdBefore=${new Date(0).toISOString()}`)).toEqual([]);
    expect((await list('folder=Nowhere')).status).toBe(404);
  });

  it('sorts both ways by name, size and creation, paging over cursors of that sort', async () => {
    const all = (await list('limit=1000')).body.data.media;
    const walk = async (sort: string) => {
      const seen: Media[] = [];
      let cursor: string | null = null;
      do {
        const { status, body } = await list(
          `sort=${sort}&limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
        );
        expect(status).toBe(200);
        seen.push(...body.data.media);
        cursor = body.data.nextCursor;
      } while (cursor);
      return seen.map((m) => m.id);
    };
    const sizes = new Map(
      (await api.ctx.models.Media.find({ id: { $in: all.map((m) => m.id) } }).lean()).map((d) => [
        d.id,
        d.bytes,
      ]),
    );
    const by = (cmp: (a: Media, b: Media) => number) => [...all].sort(cmp).map((m) => m.id);
    const byName = (a: Media, b: Media) =>
      a.name < b.name ? -1 : a.name > b.name ? 1 : a.id - b.id;
    const bySize = (a: Media, b: Media) => sizes.get(a.id)! - sizes.get(b.id)! || a.id - b.id;
    expect(await walk('name')).toEqual(by(byName));
    expect(await walk('-name')).toEqual(by(byName).reverse());
    expect(await walk('size')).toEqual(by(bySize));
    expect(await walk('-size')).toEqual(by(bySize).reverse());
    expect(await walk('createdAt')).toEqual(by((a, b) => a.id - b.id));
    expect(await walk('-createdAt')).toEqual(by((a, b) => b.id - a.id));
    // A cursor of one sort is refused under another.
    const { body } = await list('sort=name&limit=2');
    const other = await list(
      `sort=size&limit=2&cursor=${encodeURIComponent(body.data.nextCursor!)}`,
    );
    expect([other.status, other.body.error]).toEqual([400, 'VALIDATION_FAILED']);
  });

  it('searches names on the server: any part, any case, with the other filters', async () => {
    const names = async (query: string) =>
      (await list(query)).body.data.media.map((m) => m.name).sort();
    expect(await names('q=OTO-3')).toEqual(['photo-3.jpg']);
    expect(await names('q=voice')).toEqual(['invoice.pdf']);
    expect(await names('q=.&type=pdf')).toEqual(['invoice.pdf']);
    expect(await names('q=(')).toEqual([]);
  });

  it('refuses a changed cursor, a cursor of other filters, and bad parameters (400)', async () => {
    const { body } = await list('limit=2');
    const cursor = body.data.nextCursor!;
    const [payload, check] = cursor.split('.');
    const forged = `${Buffer.from(
      JSON.stringify({ ...JSON.parse(Buffer.from(payload!, 'base64url').toString()), b: 999999 }),
    ).toString('base64url')}.${check}`;
    for (const query of [
      `cursor=${forged}`,
      `cursor=${cursor}x`,
      `cursor=${cursor}&type=pdf`,
      'limit=0',
      'limit=1001',
      'type=text',
      'createdAfter=yesterday',
      'sort=color',
      'q=',
    ]) {
      const answer = await list(query);
      expect([query, answer.status, answer.body.error]).toEqual([query, 400, 'VALIDATION_FAILED']);
    }
  });

  it('never repeats or skips a record while others upload', async () => {
    const before = (await list('limit=1000')).body.data.media.map((m) => m.id);
    const seen: number[] = [];
    let cursor: string | null = null;
    const uploading = (async () => {
      for (let i = 0; i < 12; i++) await upload(`during-${i}.jpg`);
    })();
    do {
      const { body } = await list(`limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      seen.push(...body.data.media.map((m) => m.id));
      cursor = body.data.nextCursor;
      await sleep(5);
    } while (cursor);
    await uploading;
    expect(new Set(seen).size).toBe(seen.length);
    for (const id of before) expect(seen).toContain(id);
  });
});

describe('one record: get and delete', () => {
  it('gets by key and by id; deletes, leaving no object, record or usage; a second delete is 404', async () => {
    const media = await upload('gone.jpg');
    const byKey = await call<Media>('GET', `/media/record?media=${media.key}`);
    const byId = await call<Media>('GET', `/media/${media.id}`);
    expect(byKey.body.data).toEqual(byId.body.data);
    expect(byKey.body.data).toMatchObject({ id: media.id, key: media.key });
    const usageBefore = await api.ctx.repositories.usage.get(org.organization.id);

    const deleted = await call<Media>('DELETE', `/media/record?media=${media.key}`);
    expect(deleted.status).toBe(200);
    expect(deleted.body.data).toEqual(byKey.body.data);
    expect(await api.ctx.store.stat(media.key)).toBeNull();
    expect(await api.ctx.models.Media.countDocuments({ id: media.id })).toBe(0);
    const usageAfter = await api.ctx.repositories.usage.get(org.organization.id);
    expect(usageAfter).toEqual({
      bytes: usageBefore.bytes - fixture('Canon_40D.jpg').length,
      files: usageBefore.files - 1,
    });
    for (const path of [`/media/record?media=${media.key}`, `/media/${media.id}`]) {
      const again = await call('DELETE', path);
      expect([path, again.status, again.body.error]).toEqual([path, 404, 'MEDIA_NOT_FOUND']);
      expect((await call('GET', path)).status).toBe(404);
    }
    const byIdDelete = await upload('gone-by-id.jpg');
    expect((await call('DELETE', `/media/${byIdDelete.id}`)).status).toBe(200);
    expect(await api.ctx.store.stat(byIdDelete.key)).toBeNull();
  });

  it('finishes, with reconcile --fix, a delete cut off after each step', async () => {
    // reconcile's runs go one after another through one CLI process (the CLI's own
    // runCli), which starts while the cut-off deletes are made.
    const starting = cliSession(api.env.env);
    starting.catch(() => undefined);
    try {
      await cutOffDeletes(starting);
    } finally {
      await (await starting.catch(() => undefined))?.close();
    }
  });

  async function cutOffDeletes(session: Promise<CliSession>) {
    const { media, usage } = api.ctx.repositories;
    const a = await upload('cut-after-mark.jpg');
    const b = await upload('cut-after-object.jpg');
    const c = await upload('cut-after-record.jpg');
    const marked = new Date(Date.now() - 5_000);
    // a: marked only. b: marked, object removed. c: all but the usage.
    for (const m of [a, b, c]) expect(await media.markDeleting(m.id, marked)).toBe(true);
    await api.ctx.store.remove(b.key);
    await api.ctx.store.remove(c.key);
    await media.removeByIds([c.id]);
    // Hidden from every lookup meanwhile.
    for (const m of [a, b]) expect((await call('GET', `/media/${m.id}`)).status).toBe(404);

    const reconcile = async (...args: string[]) => {
      const cli = await session;
      const out = await cli.run('reconcile', '--org', 'keeper', '--older-than', '0', ...args);
      expect(out.code).toBe(0);
      return JSON.parse(out.stdout) as {
        clean: boolean;
        deletesInProgress: { id: number }[];
        usageDrift: { organizationId: number }[];
        recordsWithoutObject: unknown[];
      };
    };
    await sleep(1_100); // storage times are whole seconds
    const found = await reconcile();
    expect(found.deletesInProgress.map((r) => r.id).sort()).toEqual([a.id, b.id].sort());
    expect(found.usageDrift.map((d) => d.organizationId)).toEqual([org.organization.id]);
    expect(found.recordsWithoutObject).toEqual([]);
    await reconcile('--fix');
    expect((await reconcile()).clean).toBe(true);
    expect(await api.ctx.store.stat(a.key)).toBeNull();
    expect(await api.ctx.models.Media.countDocuments({ id: { $in: [a.id, b.id, c.id] } })).toBe(0);
    const live = await api.ctx.models.Media.find({ organizationId: org.organization.id }).lean();
    expect(await usage.get(org.organization.id)).toEqual({
      bytes: live.reduce((n, r) => n + r.bytes, 0),
      files: live.length,
    });
  }

  /** A conversion queued (no worker runs yet), then its source deleted. */
  async function convertOfDeleted(name: string) {
    const source = await upload(name);
    const queued = await fetch(`${api.url}/media/convert`, {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json', Prefer: 'respond-async' },
      body: JSON.stringify({ mediaKey: source.key, format: 'png' }),
    });
    expect(queued.status).toBe(202);
    const { jobId } = ((await queued.json()) as { data: { jobId: string } }).data;
    expect((await call('DELETE', `/media/${source.id}`)).status).toBe(200);
    return { source, jobId };
  }

  it('a job whose input is deleted before it runs fails with 404, leaving nothing', async () => {
    const { source, jobId } = await convertOfDeleted('convert-me.jpg');
    const recordsBefore = await api.ctx.models.Media.countDocuments({});
    const worker: TestWorker = await startWorker(api.env.env);
    try {
      const status = await eventually(async () => {
        const res = await call('GET', `/media/jobs/${jobId}`);
        if (res.status === 202) throw new Error('still running');
        return res;
      });
      // Every field is compared, so a failure shows the message the job failed with.
      expect({ status: status.status, ...status.body }).toEqual({
        status: 404,
        statusCode: 404,
        error: 'MEDIA_NOT_FOUND',
        message: expect.stringContaining(source.key) as unknown,
        jobId,
        requestId: expect.any(String) as unknown,
      });
    } finally {
      await worker.close();
    }
    expect(await api.ctx.models.Media.countDocuments({})).toBe(recordsBefore);
  });

  it('a status URL asked while its job fails answers pending or the job’s own error, never 500', async () => {
    // Read in the wrong order (the job, then its state), a job found active and failed a
    // moment later had no failure reason yet, and its status answered 500 INTERNAL. The
    // moment between the two reads is widened here: the job's read is held back until the
    // job has failed, as a loaded machine can.
    const { jobId } = await convertOfDeleted('gone.jpg');
    const bull = api.ctx.queue.queue('image');
    const getJob = bull.getJob.bind(bull);
    bull.getJob = async (id: string) => {
      const job = await getJob(id);
      await eventually(async () => expect(await bull.getJobState(id)).toBe('failed'));
      return job;
    };
    const worker: TestWorker = await startWorker(api.env.env);
    try {
      // Pending when its state was read before the worker failed it (the job's read then
      // waits for the failure), else the failure itself: both right, a 500 never.
      const first = await call('GET', `/media/jobs/${jobId}`);
      if (first.status !== 202) {
        expect([first.status, first.body.error]).toEqual([404, 'MEDIA_NOT_FOUND']);
      }
      const then = await call('GET', `/media/jobs/${jobId}`);
      expect([then.status, then.body.error]).toEqual([404, 'MEDIA_NOT_FOUND']);
    } finally {
      bull.getJob = getJob;
      await worker.close();
    }
  });
});

describe('folders', () => {
  it('creates, refuses a second of the same name, lists with files and bytes, gets, renames', async () => {
    const created = await call<Json>('POST', '/media/folders', { name: 'Albums' });
    expect(created.status).toBe(201);
    expect(created.body.data).toMatchObject({ name: 'Albums', files: 0, bytes: 0 });
    const id = created.body.data.id as number;
    expect((await call('POST', '/media/folders', { name: 'Albums' })).status).toBe(409);
    expect((await call('POST', '/media/folders', { name: '  ' })).status).toBe(400);
    const inside = await upload('in-album.jpg', undefined, 'Albums');
    const listed = await call<{ folders: Json[] }>('GET', '/media/folders');
    expect(listed.body.data.folders.find((f) => f.id === id)).toMatchObject({
      name: 'Albums',
      files: 1,
      bytes: fixture('Canon_40D.jpg').length,
    });
    expect((await call<Json>('GET', `/media/folders/${id}`)).body.data).toMatchObject({ files: 1 });

    // A rename changes the name, never an existing key; new keys use the new name.
    const renamed = await call<Json>('PATCH', `/media/folders/${id}`, { name: 'Family Albums' });
    expect(renamed.body.data).toMatchObject({ id, name: 'Family Albums', files: 1 });
    expect((await call<Media>('GET', `/media/${inside.id}`)).body.data.key).toBe(inside.key);
    expect(inside.key).toMatch(/^keeper\/albums\//);
    const after = await upload('after-rename.jpg', undefined, 'Family Albums');
    expect(after.key).toMatch(/^keeper\/family-albums\//);
    expect((await call('PATCH', `/media/folders/${id}`, { name: 'Trips' })).status).toBe(409);
    expect((await call('GET', '/media/folders/999999')).status).toBe(404);
  });

  it('deletes an empty folder, refuses one with files (409), deletes it recursively as a job', async () => {
    const empty = (await call<Json>('POST', '/media/folders', { name: 'Empty' })).body.data;
    const gone = await call<Json>('DELETE', `/media/folders/${String(empty.id)}`);
    expect([gone.status, gone.body.data.name]).toEqual([200, 'Empty']);

    const files = [];
    for (let i = 0; i < 5; i++) files.push(await upload(`old-${i}.jpg`, undefined, 'Archive'));
    const id = (await api.ctx.models.Folder.findOne({ name: 'Archive' }).lean())!.id;
    const refused = await call('DELETE', `/media/folders/${id}`);
    expect([refused.status, refused.body.error]).toEqual([409, 'FOLDER_NOT_EMPTY']);

    const accepted = await call<{ jobId: string; statusUrl: string }>(
      'DELETE',
      `/media/folders/${id}?recursive=true`,
    );
    expect(accepted.status).toBe(202);
    const worker = await startWorker(api.env.env);
    try {
      const done = await eventually(async () => {
        const res = await call<Json>('GET', `/media/jobs/${accepted.body.data.jobId}`);
        if (res.status === 202) throw new Error('running');
        return res;
      });
      expect(done.status).toBe(200);
      expect(done.body.data).toEqual({
        folder: { id, name: 'Archive' },
        deleted: { files: 5, bytes: 5 * fixture('Canon_40D.jpg').length },
      });
    } finally {
      await worker.close();
    }
    expect((await call('GET', `/media/folders/${id}`)).status).toBe(404);
    for (const f of files) expect(await api.ctx.store.stat(f.key)).toBeNull();
    expect(await api.ctx.models.Media.countDocuments({ folderId: id })).toBe(0);
  });
});

describe('usage', () => {
  it('answers bytes and files by type, matching the records, and the quota', async () => {
    const { body } = await call<{
      bytes: number;
      files: number;
      byType: Record<string, { bytes: number; files: number }>;
      quota: { bytes: number | null; remaining: number | null };
    }>('GET', '/media/usage');
    const records = await api.ctx.models.Media.find({ organizationId: org.organization.id }).lean();
    expect(body.data.files).toBe(records.length);
    expect(body.data.bytes).toBe(records.reduce((n, r) => n + r.bytes, 0));
    expect(body.data.byType['application/pdf']).toEqual({
      files: 1,
      bytes: fixture('minimal-document.pdf').length,
    });
    expect(body.data.quota).toEqual({ bytes: null, remaining: null });
  });
});

it('serves every list filter with an index that starts with the organization', async () => {
  const indexes = (await api.ctx.models.Media.collection.indexes()).map((i) => i.key);
  const starts = (fields: string[]) =>
    indexes.some((key) => {
      const names = Object.keys(key);
      return names[0] === 'organizationId' && fields.every((f, i) => names[i + 1] === f);
    });
  for (const fields of [
    ['id'],
    ['folderId', 'id'],
    ['mimetype', 'id'],
    ['name', 'id'],
    ['bytes', 'id'],
    ['createdAt', 'id'],
    ['key'],
  ]) {
    expect([fields.join(','), starts(fields)]).toEqual([fields.join(','), true]);
  }
});
