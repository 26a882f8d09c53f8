/**
 * Consistency under races, through the real API, Redis, S3 and MongoDB:
 *
 * - the first concurrent uploads of an organization that has a quota but no
 *   usage count yet are all counted (none refused as "over quota");
 * - a file counted against the quota whose writer stopped before writing its
 *   record (a worker stuck or killed between the two) is given back on its
 *   own once its booking expires (USAGE_BOOKING_TTL_MS, short here), with no
 *   reconcile; the bookings' rules (settled, renewed, given back once);
 * - uploads committing into a folder while it is deleted (recursively or
 *   not) leave no record pointing at a missing folder, and records and
 *   objects agree.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import sharp from 'sharp';
import { UsageRepository } from '../../../shared/repositories/usage.repository';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture, form } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Json = Record<string, unknown>;

let api: TestApi;
/** A small PNG (a few hundred bytes), each call a distinct one. */
let seed = 0;
const smallPng = () =>
  sharp({
    create: { width: 8, height: 8, channels: 3, background: { r: seed++ % 256, g: 0, b: 0 } },
  })
    .png()
    .toBuffer();

/** Bookings expire after this here (10 minutes by default). */
const BOOKING_TTL_MS = 2_000;

beforeAll(async () => {
  api = await startApi('races', {
    env: {
      USAGE_BOOKING_TTL_MS: String(BOOKING_TTL_MS),
      MAX_UPLOADS_IN_FLIGHT: '64',
      RATE_LIMIT_MAX: '0',
    },
  });
});
afterAll(async () => {
  await api.close();
});

async function upload(
  org: TestOrg,
  bytes: Buffer,
  name: string,
  fields: [string, string][] = [],
): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${api.url}/media/upload`, {
    method: 'POST',
    headers: org.auth,
    body: form([...fields, ['file', bytes, name]]),
  });
  const body = (await res.json()) as Json;
  expectMatchesSpec('POST', '/media/upload', res.status, body, res.headers);
  return { status: res.status, body };
}

const recordsOf = (org: TestOrg) =>
  api.ctx.models.Media.find({ organizationId: org.organization.id }).lean();

describe('quota: the first uploads of an organization', () => {
  it('counts eight concurrent small uploads of an organization with a quota and no usage yet (all 201)', async () => {
    const org = await api.createOrg('first-uploads');
    await api.ctx.organizations.setQuota(org.organization.id, 1024 * 1024);
    // No usage count exists yet: the first reservations race to create it.
    expect(await api.ctx.models.Usage.countDocuments({ _id: org.organization.id })).toBe(0);
    const files = await Promise.all(Array.from({ length: 8 }, () => smallPng()));
    const answers = await Promise.all(files.map((f, i) => upload(org, f, `first-${i}.png`)));
    expect(answers.map((a) => [a.status, a.body.error])).toEqual(
      Array.from({ length: 8 }, () => [201, undefined]),
    );
    const bytes = files.reduce((n, f) => n + f.length, 0);
    expect(await api.ctx.repositories.usage.get(org.organization.id)).toEqual({ bytes, files: 8 });
    expect(await recordsOf(org)).toHaveLength(8);
  });
});

describe('quota: a file counted whose record never came', () => {
  const jpeg = fixture('Canon_40D.jpg');
  const usageAnswer = async (org: TestOrg) => {
    const res = await fetch(`${api.url}/media/usage`, { headers: org.auth });
    return ((await res.json()) as { data: { quota: { remaining: number } } }).data.quota;
  };

  it('a worker stopped between counting a conversion and writing its record: given back once the booking expires, no reconcile', async () => {
    const org = await api.createOrg('stuck-writer');
    const source = await upload(org, jpeg, 'source.jpg');
    expect(source.status).toBe(201);
    const sourceKey = (source.body.data as { key: string }).key;
    const quota = jpeg.length * 20;
    await api.ctx.organizations.setQuota(org.organization.id, quota);
    const worker = await startWorker(api.env.env, { JOB_TIMEOUT_MS: '3000' });
    // The worker counts the result and writes its object, then never writes the
    // record: what a worker killed at that moment leaves behind.
    const insertAll = worker.ctx.media.insertAll.bind(worker.ctx.media);
    worker.ctx.media.insertAll = () => new Promise(() => undefined);
    try {
      const converted = await fetch(`${api.url}/media/convert`, {
        method: 'POST',
        headers: { ...org.auth, 'Content-Type': 'application/json' },
        body: JSON.stringify({ mediaKey: sourceKey, format: 'png' }),
      });
      expect(converted.status).toBe(422);
      expect(((await converted.json()) as Json).error).toBe('PROCESSING_TIMEOUT');
      // Counted, with no record: the quota's count is over the records.
      const counted = await api.ctx.models.Usage.findById(org.organization.id).lean();
      expect(counted!.files).toBe(2);
      expect(await recordsOf(org)).toHaveLength(1);
      // Given back once the booking expires, at the next read of the count.
      const givenBack = Date.now();
      await eventually(async () => {
        expect(await usageAnswer(org)).toEqual({ bytes: quota, remaining: quota - jpeg.length });
      }, 15_000);
      expect(Date.now() - givenBack).toBeLessThan(BOOKING_TTL_MS + 10_000);
      expect(await api.ctx.repositories.usage.get(org.organization.id)).toEqual({
        bytes: jpeg.length,
        files: 1,
      });
    } finally {
      worker.ctx.media.insertAll = insertAll;
      await worker.close();
      // The object the stopped write left (a real crash leaves it for reconcile).
      const recorded = new Set((await recordsOf(org)).map((r) => r.key));
      const left = (await api.objectKeys(`${org.organization.slug}/`)).filter(
        (k) => !recorded.has(k),
      );
      await api.ctx.store.removeMany(left);
    }
  });

  it('a booking without its record holds the quota until it expires, then the next upload that needs the room is taken', async () => {
    const org = await api.createOrg('expired-booking');
    const file = await smallPng();
    await api.ctx.organizations.setQuota(org.organization.id, file.length * 3);
    const usage = api.ctx.repositories.usage;
    // What a process killed after booking two files' worth leaves.
    const [id] = await api.ctx.media.nextIds(1);
    const booked = await usage.book(
      org.organization.id,
      id!,
      { bytes: file.length * 2, files: 1 },
      file.length * 3,
    );
    expect(booked).not.toBeNull();
    const first = await upload(org, file, 'first.png');
    expect(first.status).toBe(201);
    // Held: no room for a second file while the booking stands.
    const refused = await upload(org, await smallPng(), 'refused.png');
    expect([refused.status, refused.body.error]).toEqual([413, 'QUOTA_EXCEEDED']);
    // Once it expires, the reservation that needs its room takes it back first (no other read between).
    await eventually(
      async () => {
        expect((await upload(org, file, 'second.png')).status).toBe(201);
      },
      BOOKING_TTL_MS + 10_000,
      250,
    );
    expect(await usage.get(org.organization.id)).toEqual({ bytes: file.length * 2, files: 2 });
  });

  it('a booking is settled by its record, renewed under a writer at work, given back once, and goes with its record', async () => {
    const org = await api.createOrg('booking-rules');
    const orgId = org.organization.id;
    let now = Date.now();
    const usage = new UsageRepository(api.ctx.models, {
      bookingTtlMs: 60_000,
      now: () => new Date(now),
    });
    const one = { bytes: 100, files: 1 };
    const book = async () => {
      const [id] = await api.ctx.media.nextIds(1);
      return (await usage.book(orgId, id!, one, null))!;
    };
    const insert = (id: number) =>
      api.ctx.media.insert(
        {
          organizationId: orgId,
          folderId: null,
          key: `${org.organization.slug}/rules-${id}.png`,
          name: `rules-${id}.png`,
          mimetype: 'image/png',
          bytes: one.bytes,
          checksum: 'sha256:00',
          metaData: { ipAddress: '', userAgent: '' },
          createdBy: null,
        },
        id,
      );
    const recorded = await book(); // its record comes, its settle is lost
    const renewed = await book(); // a long upload's first file
    const cancelled = await book(); // its write fails after its expiry was applied
    const deleted = await book(); // its record comes and is deleted before any settle
    await insert(recorded.id);
    await insert(deleted.id);
    expect(await usage.get(orgId)).toEqual({ bytes: 400, files: 4 });

    now += 40_000; // past half their life: the writer renews before it writes
    expect(await usage.keep([renewed], null)).toBe(true);
    now += 30_000; // the others past their expiry
    expect(await usage.get(orgId)).toEqual({ bytes: 300, files: 3 }); // only `cancelled` given back
    await usage.cancel([cancelled]); // not given back twice
    await insert(renewed.id);
    await usage.settle([renewed]);
    expect(await usage.get(orgId)).toEqual({ bytes: 300, files: 3 });
    // Deleting a record gives its bytes back once, its pending booking with them.
    await api.ctx.media.removeByIds([deleted.id]);
    await usage.release(orgId, one, [deleted.id]);
    now += 120_000;
    expect(await usage.get(orgId)).toEqual({ bytes: 200, files: 2 });
    expect((await api.ctx.models.Usage.findById(orgId).lean())!.pending).toEqual([]);
    // The count agrees with the records: reconcile finds nothing to fix.
    const records = await recordsOf(org);
    expect(records.map((r) => r.id).sort()).toEqual([recorded.id, renewed.id].sort());
    await api.ctx.media.removeByIds(records.map((r) => r.id));
    await usage.release(orgId, { bytes: 200, files: 2 });
  });
});

describe('folders: writes committing into a folder deleted at the same moment', () => {
  const jpeg = fixture('Canon_40D.jpg');
  /** A JPEG of about 400 KB (the sample's header, then random bytes): a few ms of streaming. */
  const photo = () => Buffer.concat([jpeg, randomBytes(400 * 1024)]);

  async function call(on: TestApi, org: TestOrg, method: string, path: string, body?: Json) {
    const res = await fetch(`${on.url}${path}`, {
      method,
      headers: { ...org.auth, ...(body ? { 'Content-Type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, body: (await res.json()) as Json };
  }

  async function uploadTo(on: TestApi, org: TestOrg, bytes: Buffer, fields: [string, string][]) {
    const res = await fetch(`${on.url}/media/upload`, {
      method: 'POST',
      headers: org.auth,
      body: form([...fields, ['file', bytes, 'photo.jpg']]),
    });
    const body = (await res.json()) as Json;
    expectMatchesSpec('POST', '/media/upload', res.status, body, res.headers);
    return { status: res.status, body };
  }

  /** Waits for a recursive delete's job (its 202 answer) to end, and answers its result. */
  async function finished(on: TestApi, org: TestOrg, accepted: { body: Json }) {
    const { jobId } = accepted.body.data as { jobId: string };
    return eventually(async () => {
      const res = await call(on, org, 'GET', `/media/jobs/${jobId}`);
      expect(res.status).toBe(200);
      return res.body.data as { deleted: { files: number } };
    }, 30_000);
  }

  /**
   * No record of the organization points at a folder that does not exist;
   * its records and objects are the same keys; its usage count is its records'.
   */
  async function expectConsistent(on: TestApi, org: TestOrg) {
    const records = await on.ctx.models.Media.find({ organizationId: org.organization.id }).lean();
    const folders = new Set(
      (await on.ctx.models.Folder.find({ organizationId: org.organization.id }).lean()).map(
        (f) => f.id,
      ),
    );
    const dangling = records.filter((r) => r.folderId !== null && !folders.has(r.folderId));
    expect(dangling.map((r) => [r.key, r.folderId])).toEqual([]);
    await eventually(async () => {
      expect((await on.objectKeys(`${org.organization.slug}/`)).sort()).toEqual(
        records.map((r) => r.key).sort(),
      );
    });
    expect(await on.ctx.repositories.usage.get(org.organization.id)).toEqual({
      bytes: records.reduce((n, r) => n + r.bytes, 0),
      files: records.length,
    });
  }

  it('DELETE of a folder while uploads by id and by name commit into it: none is left in a missing folder', async () => {
    const org = await api.createOrg('race-delete');
    const outcomes: Record<string, number> = {};
    const count = (what: string, a: { status: number; body: Json }) => {
      const error = typeof a.body.error === 'string' ? ` ${a.body.error}` : '';
      const key = `${what} ${a.status}${error}`;
      outcomes[key] = (outcomes[key] ?? 0) + 1;
    };
    for (let round = 0; round < 4; round++) {
      const name = `round-${round}`;
      const created = await call(api, org, 'POST', '/media/folders', { name });
      const id = String((created.body.data as { id: number }).id);
      // Uploads naming the folder (by id, or by name) start before and after the delete.
      const uploads = Array.from({ length: 16 }, async (_, i) => {
        await sleep(i * 6);
        return uploadTo(api, org, photo(), [i % 2 ? ['folderId', id] : ['folder', name]]);
      });
      await sleep(10 + round * 8);
      count('delete', await call(api, org, 'DELETE', `/media/folders/${id}`));
      for (const a of await Promise.all(uploads)) count('upload', a);
    }
    // Each upload is kept in a folder that exists (201), or was taken back with its
    // folder (404), or named a folder being deleted (409); each delete removed an
    // empty folder (200) or found files (409).
    for (const outcome of Object.keys(outcomes)) {
      expect([
        'delete 200',
        'delete 409 FOLDER_NOT_EMPTY',
        'upload 201',
        'upload 404 FOLDER_NOT_FOUND',
        'upload 409 CONFLICT',
      ]).toContain(outcome);
    }
    await expectConsistent(api, org);
  });

  it('while a delete holds a folder it is gone for lookups and uploads (by name: 409), and shows again when let go', async () => {
    const org = await api.createOrg('held-folder');
    const created = await call(api, org, 'POST', '/media/folders', { name: 'Held' });
    const id = (created.body.data as { id: number }).id;
    const folders = api.ctx.repositories.folders;
    expect(await folders.holdForDelete(org.organization.id, id)).not.toBeNull();
    // A second delete finds nothing to hold.
    expect((await call(api, org, 'DELETE', `/media/folders/${id}`)).status).toBe(404);
    expect((await call(api, org, 'GET', `/media/folders/${id}`)).status).toBe(404);
    expect((await call(api, org, 'PATCH', `/media/folders/${id}`, { name: 'Moved' })).status).toBe(
      404,
    );
    const listed = await call(api, org, 'GET', '/media/folders');
    expect((listed.body.data as { folders: Json[] }).folders).toEqual([]);
    const byId = await uploadTo(api, org, jpeg, [['folderId', String(id)]]);
    expect([byId.status, byId.body.error]).toEqual([404, 'FOLDER_NOT_FOUND']);
    const byName = await uploadTo(api, org, jpeg, [['folder', 'Held']]);
    expect([byName.status, byName.body.error]).toEqual([409, 'CONFLICT']);
    // Let go (a refused delete, or one whose hold ran out): a folder like any other.
    await folders.release(org.organization.id, id);
    expect((await call(api, org, 'GET', `/media/folders/${id}`)).status).toBe(200);
    expect((await uploadTo(api, org, jpeg, [['folder', 'Held']])).status).toBe(201);
    await expectConsistent(api, org);
  });

  describe('a write whose record comes after its folder was deleted', () => {
    let worker: TestWorker;
    beforeAll(async () => {
      worker = await startWorker(api.env.env);
    });
    afterAll(async () => {
      await worker.close();
    });

    /**
     * Holds `target[method]` at its call until `open()`: `arrived` resolves
     * when a write reaches it (its folder looked up, its object stored).
     */
    function gate<T extends object, K extends keyof T>(target: T, method: K) {
      const original = target[method] as (...args: unknown[]) => Promise<unknown>;
      let arrived!: () => void;
      const atCall = new Promise<void>((resolve) => (arrived = resolve));
      let open!: () => void;
      const opened = new Promise<void>((resolve) => (open = resolve));
      target[method] = (async (...args: unknown[]) => {
        arrived();
        await opened;
        return original.apply(target, args);
      }) as T[K];
      return {
        arrived: atCall,
        open,
        restore() {
          open();
          target[method] = original as T[K];
        },
      };
    }

    for (const recursive of [false, true]) {
      for (const by of ['folderId', 'folder'] as const) {
        it(`an upload naming it by ${by}, its records written after the folder was deleted${recursive ? ' recursively' : ''}: 404 FOLDER_NOT_FOUND, nothing left`, async () => {
          const org = await api.createOrg(`late-${recursive ? 'r' : 'n'}-${by.toLowerCase()}`);
          const created = await call(api, org, 'POST', '/media/folders', { name: 'Trips' });
          const id = (created.body.data as { id: number }).id;
          if (recursive) {
            // A recursive delete of an empty folder needs no job: give it a file first.
            const first = await uploadTo(api, org, jpeg, [['folderId', String(id)]]);
            expect(first.status).toBe(201);
          }
          const door = gate(api.ctx.media, 'insertAll');
          try {
            // The upload has its folder and its object; its records wait at the door.
            const pending = uploadTo(api, org, photo(), [
              [by, by === 'folder' ? 'Trips' : String(id)],
            ]);
            await door.arrived;
            const deleted = await call(
              api,
              org,
              'DELETE',
              `/media/folders/${id}${recursive ? '?recursive=true' : ''}`,
            );
            if (recursive) {
              expect(deleted.status).toBe(202);
              expect((await finished(api, org, deleted)).deleted.files).toBe(1);
            } else {
              expect(deleted.status).toBe(200);
            }
            expect(await api.ctx.models.Folder.countDocuments({ id })).toBe(0);
            door.open();
            const answer = await pending;
            expect([answer.status, answer.body.error]).toEqual([404, 'FOLDER_NOT_FOUND']);
          } finally {
            door.restore();
          }
          expect(
            await api.ctx.models.Media.countDocuments({ organizationId: org.organization.id }),
          ).toBe(0);
          await expectConsistent(api, org);
        });
      }
    }

    it('a conversion whose record is written after its folder was deleted recursively: 404 FOLDER_NOT_FOUND, nothing left', async () => {
      const org = await api.createOrg('late-convert');
      const source = await uploadTo(api, org, jpeg, [['folder', 'Scans']]);
      expect(source.status).toBe(201);
      const { key, id: sourceId } = source.body.data as { key: string; id: number };
      const folderId = (await api.ctx.models.Media.findOne({ id: sourceId }).lean())!.folderId!;
      // The conversion's record waits at the door until the folder is gone.
      const door = gate(worker.ctx.media, 'insertAll');
      try {
        const converted = call(api, org, 'POST', '/media/convert', {
          mediaKey: key,
          format: 'png',
        });
        await door.arrived;
        const deleted = await call(api, org, 'DELETE', `/media/folders/${folderId}?recursive=true`);
        expect(deleted.status).toBe(202);
        expect((await finished(api, org, deleted)).deleted.files).toBe(1);
        door.open();
        const answer = await converted;
        expect([answer.status, answer.body.error]).toEqual([404, 'FOLDER_NOT_FOUND']);
      } finally {
        door.restore();
      }
      expect(
        await api.ctx.models.Media.countDocuments({ organizationId: org.organization.id }),
      ).toBe(0);
      await expectConsistent(api, org);
    });
  });
});
