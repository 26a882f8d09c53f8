/**
 * Consistency under races, through the real API, Redis, S3 and MongoDB:
 *
 * - the first concurrent uploads of an organization that has a quota but no
 *   usage count yet are all counted (none refused as "over quota");
 * - a file counted against the quota whose writer stopped before writing its
 *   record (a worker stuck or killed between the two) is given back on its
 *   own once its booking expires (USAGE_BOOKING_TTL_MS, short here), with no
 *   reconcile; the bookings' rules (settled, renewed, given back once).
 */
import sharp from 'sharp';
import { UsageRepository } from '../../../shared/repositories/usage.repository';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture, form } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker } from '../../support/worker';

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
  api = await startApi('races', { env: { USAGE_BOOKING_TTL_MS: String(BOOKING_TTL_MS) } });
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
    const insert = worker.ctx.media.insert.bind(worker.ctx.media);
    worker.ctx.media.insert = () => new Promise(() => undefined);
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
      worker.ctx.media.insert = insert;
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
