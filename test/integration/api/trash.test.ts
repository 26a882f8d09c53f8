/**
 * The trash, through the real API, worker, Redis, S3 and MongoDB: a delete
 * (while the organization keeps a trash) hides the file everywhere but
 * `GET /media/trash` and keeps its object and its bytes in the usage; a
 * restore brings it back to its folder (re-created if gone); a purge (now,
 * or the repeatable job after the retention) deletes object, variants and
 * record; `permanent=true` and a retention of 0 skip the trash. Events are
 * read from the outbox and from a recording listener the worker hands them
 * to. A restore or purge cut off after its mark is finished by reconcile.
 *
 * The API here keeps a trash for an hour (TRASH_RETENTION_S=3600; the
 * test environment's default is 0, deletes as the interface has them); the
 * purge tests shorten one organization's retention (its own setting), and
 * the worker purges every 300 ms.
 */
import type { DomainEvent } from '../../../shared/events/events';
import { MediaDeletion } from '../../../shared/media-deletion';
import { MediaRestore } from '../../../shared/media-restore';
import { OffboardingService } from '../../../api/services/offboarding.service';
import { ReconcileService } from '../../../api/services/reconcile.service';
import { createLogger } from '../../../shared/logger';
import type { Listener } from '../../../worker/listeners/listener';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

let api: TestApi;
let worker: TestWorker;

/** Events the worker handed to the recording listener, by id. */
const seen = new Map<string, DomainEvent>();
const recorder: Listener = {
  name: 'test.trash-recorder',
  events: ['media.trashed', 'media.restored', 'media.deleted'],
  handle(event) {
    seen.set(event.id, event);
    return Promise.resolve();
  },
};

beforeAll(async () => {
  api = await startApi('trash', {
    env: {
      RATE_LIMIT_MAX: '0',
      TRASH_RETENTION_S: '3600',
      URL_SIGNING_KEYS: 'trash-test-signing-key-0123456789abcdef',
    },
  });
  worker = await startWorker(
    api.env.env,
    { TRASH_PURGE_INTERVAL_MS: '300' },
    { listeners: [recorder] },
  );
}, 60_000);
afterAll(async () => {
  await worker?.close();
  await api?.close();
});

/** What the answers used here carry (each route fills its own part). */
interface Data {
  id: number;
  key: string;
  name: string;
  folderId: number;
  media: Data[];
  nextCursor: string | null;
  jobId: string;
  deletedAt: string;
  purgeAt: string;
  bytes: number;
  files: number;
  trash: { bytes: number; files: number };
  quota: unknown;
}
type Json = { data: Data } & Record<string, unknown>;

async function call(
  org: TestOrg | { auth: Record<string, string> },
  method: string,
  path: string,
  specPath?: string,
): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${api.url}${path}`, { method, headers: org.auth });
  const text = await res.text();
  const body = (text ? JSON.parse(text) : {}) as Json;
  if (specPath) expectMatchesSpec(method, specPath, res.status, body, res.headers);
  return { status: res.status, body };
}

const JPEG = fixture('Canon_40D.jpg');
const SMALL = fixture('xmp-BlueSquare.jpg');

const usageOf = async (org: TestOrg) => (await call(org, 'GET', '/media/usage')).body.data;
const objectExists = async (key: string) => (await api.objectKeys(key)).includes(key);
const trashIds = async (org: TestOrg) =>
  (await call(org, 'GET', '/media/trash', '/media/trash')).body.data.media.map((m) => m.id);
/** Event ids of a record in the outbox, by type. */
async function eventsOf(id: number): Promise<string[]> {
  const docs = await api.ctx.models.Event.find({ 'data.media.id': id }).lean().exec();
  return docs.map((d) => d.type).sort();
}

describe('a delete moves the file to the trash', () => {
  it('hides it everywhere, keeps its object and usage, and restores it with its bytes', async () => {
    const org = await api.createOrg();
    const uploaded = await org.uploadRecord(JPEG, 'photo.jpg', { folder: 'Holiday' });
    const before = await call(org, 'GET', `/media/record?media=${uploaded.key}`);
    const usageBefore = await usageOf(org);

    const deleted = await call(org, 'DELETE', `/media/record?media=${uploaded.key}`);
    // The interface's answer: the record as it was.
    expect(deleted).toEqual({ status: 200, body: before.body });

    // Gone for every route, as after a delete without a trash.
    for (const path of [
      `/media/record?media=${uploaded.key}`,
      `/media/${uploaded.id}`,
      `/media/download?media=${uploaded.key}`,
      `/media/metadata?mediaKey=${uploaded.key}`,
      `/media/render?media=${uploaded.key}&w=40`,
    ]) {
      expect([path, (await call(org, 'GET', path)).status]).toEqual([path, 404]);
    }
    const sign = await fetch(`${api.url}/media/sign`, {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ mediaKey: uploaded.key }),
    });
    expect(sign.status).toBe(404);
    expect((await call(org, 'GET', '/media')).body.data.media).toEqual([]);
    expect((await call(org, 'DELETE', `/media/record?media=${uploaded.key}`)).status).toBe(404);
    expect((await call(org, 'DELETE', `/media/${uploaded.id}`)).status).toBe(404);

    // In the trash, with its object and its bytes still counted.
    const trash = await call(org, 'GET', '/media/trash', '/media/trash');
    expect(trash.status).toBe(200);
    const [item] = trash.body.data.media;
    expect(item).toMatchObject({
      id: uploaded.id,
      key: uploaded.key,
      folderId: before.body.data.folderId,
    });
    expect(Date.parse(item!.purgeAt) - Date.parse(item!.deletedAt)).toBe(3_600_000);
    expect(await objectExists(uploaded.key)).toBe(true);
    const usageTrashed = await usageOf(org);
    expect(usageTrashed).toMatchObject({
      bytes: usageBefore.bytes,
      files: 1,
      trash: { bytes: JPEG.length, files: 1 },
      quota: usageBefore.quota,
    });

    const restored = await call(
      org,
      'POST',
      `/media/trash/${uploaded.id}/restore`,
      '/media/trash/{id}/restore',
    );
    expect(restored.status).toBe(200);
    expect(restored.body.data).toMatchObject({
      id: uploaded.id,
      key: uploaded.key,
      folderId: before.body.data.folderId,
    });
    const download = await fetch(`${api.url}/media/download?media=${uploaded.key}`, {
      headers: org.auth,
    });
    expect(download.status).toBe(200);
    expect(Buffer.from(await download.arrayBuffer()).equals(JPEG)).toBe(true);
    expect(await trashIds(org)).toEqual([]);
    expect((await usageOf(org)).trash).toEqual({ bytes: 0, files: 0 });

    // Both events recorded with their changes and handed to the listener.
    await eventually(async () =>
      expect(await eventsOf(uploaded.id)).toEqual([
        'media.created',
        'media.restored',
        'media.trashed',
      ]),
    );
    await eventually(() =>
      expect(
        [...seen.values()]
          .filter((e) => (e.data as { media?: { id: number } }).media?.id === uploaded.id)
          .map((e) => e.type)
          .sort(),
      ).toEqual(['media.restored', 'media.trashed']),
    );
  });

  it('pages the trash newest first with the cursor of GET /media', async () => {
    const org = await api.createOrg();
    const ids: number[] = [];
    for (let i = 0; i < 3; i++) ids.push((await org.uploadRecord(SMALL, `p${i}.jpg`)).id);
    for (const id of ids) expect((await call(org, 'DELETE', `/media/${id}`)).status).toBe(200);
    const first = await call(org, 'GET', '/media/trash?limit=2', '/media/trash');
    expect(first.body.data.media.map((m) => m.id)).toEqual([ids[2], ids[1]]);
    const second = await call(
      org,
      'GET',
      `/media/trash?limit=2&cursor=${first.body.data.nextCursor!}`,
      '/media/trash',
    );
    expect(second.body.data.media.map((m) => m.id)).toEqual([ids[0]]);
    expect(second.body.data.nextCursor).toBeNull();
    // A cursor that is not one of this listing's is refused.
    expect((await call(org, 'GET', '/media/trash?cursor=abc.def')).status).toBe(400);
    for (const id of ids) await call(org, 'DELETE', `/media/trash/${id}`);
  });

  it('purges one now: object, record and usage go', async () => {
    const org = await api.createOrg();
    const uploaded = await org.uploadRecord(SMALL, 'dot.jpg');
    await call(org, 'DELETE', `/media/${uploaded.id}`);
    const purged = await call(org, 'DELETE', `/media/trash/${uploaded.id}`, '/media/trash/{id}');
    expect(purged.status).toBe(200);
    expect(purged.body.data).toMatchObject({ id: uploaded.id, key: uploaded.key });
    expect(await objectExists(uploaded.key)).toBe(false);
    expect(await api.ctx.models.Media.countDocuments({ id: uploaded.id })).toBe(0);
    expect(await usageOf(org)).toMatchObject({ bytes: 0, files: 0, trash: { bytes: 0, files: 0 } });
    expect((await api.ctx.repositories.usage.counters(org.organization.id)).bytes).toBe(0);
    expect((await call(org, 'DELETE', `/media/trash/${uploaded.id}`)).status).toBe(404);
    expect((await call(org, 'POST', `/media/trash/${uploaded.id}/restore`)).status).toBe(404);
    await eventually(async () =>
      expect(await eventsOf(uploaded.id)).toEqual([
        'media.created',
        'media.deleted',
        'media.trashed',
      ]),
    );
  });

  it('skips the trash with permanent=true, by key and by id', async () => {
    const org = await api.createOrg();
    const a = await org.uploadRecord(SMALL, 'a.jpg');
    const b = await org.uploadRecord(SMALL, 'b.jpg');
    const byKey = await call(org, 'DELETE', `/media/record?media=${a.key}&permanent=true`);
    const byId = await call(org, 'DELETE', `/media/${b.id}?permanent=true`);
    expect([byKey.status, byId.status]).toEqual([200, 200]);
    expect([await objectExists(a.key), await objectExists(b.key)]).toEqual([false, false]);
    expect(await trashIds(org)).toEqual([]);
    expect(await usageOf(org)).toMatchObject({ bytes: 0, files: 0 });
    expect((await call(org, 'DELETE', `/media/${b.id}?permanent=maybe`)).status).toBe(400);
    await eventually(async () =>
      expect(await eventsOf(a.id)).toEqual(['media.created', 'media.deleted']),
    );
  });

  it('a trashed file is not a duplicate', async () => {
    const org = await api.createOrg();
    const first = await org.uploadRecord(JPEG, 'one.jpg');
    await call(org, 'DELETE', `/media/${first.id}`);
    const fd = new FormData();
    fd.append('file', new Blob([JPEG]), 'again.jpg');
    const res = await fetch(`${api.url}/media/upload?onDuplicate=reject`, {
      method: 'POST',
      headers: org.auth,
      body: fd,
    });
    expect(res.status).toBe(201);
    const again = ((await res.json()) as Json).data;
    expect(again.key).not.toBe(first.key);
    // reuse does not answer the trashed record either.
    const fd2 = new FormData();
    fd2.append('file', new Blob([JPEG]), 'third.jpg');
    const reused = await fetch(`${api.url}/media/upload?onDuplicate=reuse`, {
      method: 'POST',
      headers: org.auth,
      body: fd2,
    });
    expect(((await reused.json()) as Json).data.id).toBe(again.id);
    await call(org, 'DELETE', `/media/trash/${first.id}`);
  });

  it("is each organization's own: another's trashed id is a 404", async () => {
    const owner = await api.createOrg();
    const other = await api.createOrg();
    const uploaded = await owner.uploadRecord(SMALL, 'mine.jpg');
    await call(owner, 'DELETE', `/media/${uploaded.id}`);
    expect(await trashIds(other)).toEqual([]);
    expect((await call(other, 'POST', `/media/trash/${uploaded.id}/restore`)).status).toBe(404);
    expect((await call(other, 'DELETE', `/media/trash/${uploaded.id}`)).status).toBe(404);
    expect(await trashIds(owner)).toEqual([uploaded.id]);
    expect(await objectExists(uploaded.key)).toBe(true);
    await call(owner, 'DELETE', `/media/trash/${uploaded.id}`);
  });

  it('reads with the read scope; restores and purges with the delete scope', async () => {
    const org = await api.createOrg();
    const uploaded = await org.uploadRecord(SMALL, 'scoped.jpg');
    await call(org, 'DELETE', `/media/${uploaded.id}`);
    const reader = await api.ctx.tokens.issue(org.organization.id, { scopes: ['read', 'write'] });
    const asReader = { auth: { Authorization: `Bearer ${reader.token}` } };
    expect((await call(asReader, 'GET', '/media/trash')).status).toBe(200);
    expect((await call(asReader, 'POST', `/media/trash/${uploaded.id}/restore`)).status).toBe(403);
    expect((await call(asReader, 'DELETE', `/media/trash/${uploaded.id}`)).status).toBe(403);
    await call(org, 'DELETE', `/media/trash/${uploaded.id}`);
  });
});

it('webhook endpoints subscribe to the trash events', async () => {
  const org = await api.createOrg();
  const res = await fetch(`${api.url}/media/webhooks`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    // A public address literal: registration resolves nothing and sends nothing.
    body: JSON.stringify({
      url: 'https://93.184.215.14/hook',
      events: ['media.trashed', 'media.restored', 'media.deleted'],
    }),
  });
  const body = (await res.json()) as { data: { events: string[] } };
  expectMatchesSpec('POST', '/media/webhooks', res.status, body, res.headers);
  expect([res.status, body.data.events]).toEqual([
    201,
    ['media.trashed', 'media.restored', 'media.deleted'],
  ]);
});

describe('folders', () => {
  it('a recursive delete trashes its files; a restore re-creates the folder', async () => {
    const org = await api.createOrg();
    const a = await org.uploadRecord(SMALL, 'a.jpg', { folder: 'Archive' });
    const b = await org.uploadRecord(JPEG, 'b.jpg', { folder: 'Archive' });
    const folderId = (await call(org, 'GET', `/media/record?media=${a.key}`)).body.data.folderId;
    const accepted = await call(org, 'DELETE', `/media/folders/${folderId}?recursive=true`);
    expect(accepted.status).toBe(202);
    await eventually(async () => {
      const job = await call(org, 'GET', `/media/jobs/${accepted.body.data.jobId}`);
      expect(job.status).toBe(200);
    }, 30_000);
    expect((await call(org, 'GET', `/media/folders/${folderId}`)).status).toBe(404);
    expect((await trashIds(org)).sort()).toEqual([a.id, b.id].sort());
    expect([await objectExists(a.key), await objectExists(b.key)]).toEqual([true, true]);
    expect((await usageOf(org)).trash).toEqual({ bytes: SMALL.length + JPEG.length, files: 2 });

    const restored = await call(org, 'POST', `/media/trash/${a.id}/restore`);
    expect(restored.status).toBe(200);
    const newFolderId = restored.body.data.folderId;
    expect(newFolderId).not.toBe(folderId);
    const folder = await call(org, 'GET', `/media/folders/${newFolderId}`);
    expect(folder.body.data).toMatchObject({ name: 'Archive', files: 1 });
    const listed = await call(org, 'GET', '/media?folder=Archive');
    expect(listed.body.data.media.map((m) => m.id)).toEqual([a.id]);
    // The second file goes back to the same (re-created) folder.
    const second = await call(org, 'POST', `/media/trash/${b.id}/restore`);
    expect(second.body.data.folderId).toBe(newFolderId);
  }, 60_000);
});

describe('retention and the purge job', () => {
  it("purges files past the organization's retention: object, record, usage, media.deleted", async () => {
    const org = await api.createOrg();
    const uploaded = await org.uploadRecord(JPEG, 'old.jpg');
    const kept = await api.createOrg();
    const keptFile = await kept.uploadRecord(SMALL, 'kept.jpg');
    await call(kept, 'DELETE', `/media/${keptFile.id}`);
    await api.ctx.organizations.setTrashRetention(org.organization.id, 1);
    await call(org, 'DELETE', `/media/${uploaded.id}`);
    await eventually(async () => {
      expect(await api.ctx.models.Media.countDocuments({ id: uploaded.id })).toBe(0);
      expect(await objectExists(uploaded.key)).toBe(false);
    }, 30_000);
    expect(await trashIds(org)).toEqual([]);
    expect(await usageOf(org)).toMatchObject({ bytes: 0, files: 0 });
    expect((await api.ctx.repositories.usage.counters(org.organization.id)).bytes).toBe(0);
    await eventually(async () => {
      expect(await eventsOf(uploaded.id)).toEqual([
        'media.created',
        'media.deleted',
        'media.trashed',
      ]);
      expect(seen.has(`media.deleted:${uploaded.id}`)).toBe(true);
    });
    // Another organization's trash (an hour) is left alone.
    expect(await trashIds(kept)).toEqual([keptFile.id]);
    expect(await objectExists(keptFile.key)).toBe(true);
    await call(kept, 'DELETE', `/media/trash/${keptFile.id}`);
  }, 60_000);

  it('a retention of 0 deletes at once, as without a trash', async () => {
    const org = await api.createOrg();
    await api.ctx.organizations.setTrashRetention(org.organization.id, 0);
    const uploaded = await org.uploadRecord(SMALL, 'now.jpg');
    expect((await call(org, 'DELETE', `/media/${uploaded.id}`)).status).toBe(200);
    expect(await objectExists(uploaded.key)).toBe(false);
    expect(await trashIds(org)).toEqual([]);
  });
});

describe('a restore or purge cut off is finished by reconcile', () => {
  const reconcile = () => {
    const { media, usage, events, folders } = api.ctx.repositories;
    const logger = createLogger({ level: 'silent' });
    const deletion = new MediaDeletion({ media, usage, store: api.ctx.store, events, logger });
    const restore = new MediaRestore({ media, folders, events });
    return new ReconcileService({ store: api.ctx.store, media, usage, deletion, restore });
  };

  it('a restore cut off after its mark, its folder gone meanwhile', async () => {
    const org = await api.createOrg();
    const a = await org.uploadRecord(SMALL, 'a.jpg', { folder: 'Cut' });
    const folderId = (await call(org, 'GET', `/media/${a.id}`)).body.data.folderId;
    await call(org, 'DELETE', `/media/${a.id}`);
    // The folder goes too (empty of live files: a plain delete).
    expect((await call(org, 'DELETE', `/media/folders/${folderId}`)).status).toBe(200);
    // The restore's first step, then the process died.
    expect(await api.ctx.repositories.media.markRestoring(a.id, new Date())).toBe(true);
    // Still in the trash, and no purge takes it meanwhile.
    expect(await trashIds(org)).toEqual([a.id]);
    const report = await reconcile().run({
      organization: org.organization,
      olderThanMs: 0,
      now: new Date(Date.now() + 1_000),
      fix: true,
      checkUsage: false,
    });
    expect(report.restoresInProgress.map((r) => r.id)).toEqual([a.id]);
    const back = await call(org, 'GET', `/media/${a.id}`);
    expect(back.status).toBe(200);
    const folder = await call(org, 'GET', `/media/folders/${back.body.data.folderId}`);
    expect(folder.body.data).toMatchObject({ name: 'Cut', files: 1 });
    await eventually(async () => expect(await eventsOf(a.id)).toContain('media.restored'));
  });

  it('a purge cut off after its mark', async () => {
    const org = await api.createOrg();
    const a = await org.uploadRecord(SMALL, 'a.jpg');
    await call(org, 'DELETE', `/media/${a.id}`);
    // The purge's mark, then the process died: the object and the record are still there.
    expect(await api.ctx.repositories.media.markDeleting(a.id, new Date())).toBe(true);
    expect(await trashIds(org)).toEqual([]);
    const report = await reconcile().run({
      organization: org.organization,
      olderThanMs: 0,
      now: new Date(Date.now() + 1_000),
      fix: true,
    });
    expect(report.deletesInProgress.map((r) => r.id)).toEqual([a.id]);
    expect(await objectExists(a.key)).toBe(false);
    expect(await api.ctx.models.Media.countDocuments({ id: a.id })).toBe(0);
    expect(report.usageDrift).toEqual([]);
  });

  it('reconcile finds records = objects with files in the trash', async () => {
    const org = await api.createOrg();
    const a = await org.uploadRecord(SMALL, 'kept.jpg');
    await call(org, 'DELETE', `/media/${a.id}`);
    const report = await reconcile().run({
      organization: org.organization,
      olderThanMs: 0,
      now: new Date(Date.now() + 60_000),
      fix: false,
    });
    expect(report).toMatchObject({
      objectsWithoutRecord: [],
      recordsWithoutObject: [],
      restoresInProgress: [],
      usageDrift: [],
    });
    await call(org, 'DELETE', `/media/trash/${a.id}`);
  });
});

it("an organization's offboarding deletes its trash too, a restore in progress included", async () => {
  const org = await api.createOrg();
  await org.uploadRecord(SMALL, 'live.jpg');
  const trashed = await org.uploadRecord(JPEG, 'trashed.jpg');
  const restoring = await org.uploadRecord(JPEG, 'restoring.jpg', { folder: 'Kept' });
  await call(org, 'DELETE', `/media/${trashed.id}`);
  await call(org, 'DELETE', `/media/${restoring.id}`);
  expect(await api.ctx.repositories.media.markRestoring(restoring.id, new Date())).toBe(true);
  const logger = createLogger({ level: 'silent' });
  await new OffboardingService({
    repositories: api.ctx.repositories,
    store: api.ctx.store,
    deletion: new MediaDeletion({ ...api.ctx.repositories, store: api.ctx.store, logger }),
    jobs: api.ctx.queue,
    logger,
  }).delete(org.organization);
  expect(await api.ctx.models.Media.countDocuments({ organizationId: org.organization.id })).toBe(
    0,
  );
  expect(await api.objectKeys(`${org.organization.slug}/`)).toEqual([]);
}, 60_000);
