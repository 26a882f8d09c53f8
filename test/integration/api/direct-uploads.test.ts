/**
 * Direct-to-storage uploads through the real API, Redis, MongoDB and S3
 * (Swift's s3api in the harness: presigned PUT and UploadPart, no POST
 * policies, so the single request is a PUT here), the bytes sent with fetch
 * to the presigned URLs: one PUT, a multipart upload (5 MiB parts, Swift's
 * minimum), a repeated completion, size mismatch, a wrong type (HTML declared
 * image/jpeg: 415, nothing left), checksum mismatch, the quota, another
 * organization's upload (404), a download-scoped token (403), the expiry
 * cleanup (no object, multipart upload or booking left), records = objects.
 * A worker taking the import queue reads each completed object back, copies
 * and records it (upload.complete-direct): the API carries no byte of it.
 */
import { createHash, randomBytes } from 'node:crypto';
import { DirectUploads } from '../../../shared/uploads/direct-uploads';
import { createLogger } from '../../../shared/logger';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { startWorker, type TestWorker } from '../../support/worker';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';

const MiB = 1024 * 1024;
const PATH = '/media/upload/direct';
const EXPIRY_MS = 10 * 60_000;

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;
beforeAll(async () => {
  api = await startApi('direct-uploads', {
    env: {
      DIRECT_UPLOAD_SINGLE: 'put',
      DIRECT_UPLOAD_PART_SIZE: String(5 * MiB),
      DIRECT_UPLOAD_EXPIRY_MS: String(EXPIRY_MS),
    },
  });
  worker = await startWorker(api.env.env, { WORKER_QUEUES: 'import' });
  org = await api.createOrg();
});
afterAll(async () => {
  await worker.close();
  await api.close();
});

interface Ticket {
  id: string;
  method: 'put' | 'post' | 'multipart';
  expiresAt: string;
  url?: string;
  headers?: Record<string, string>;
  partSize?: number;
  parts?: { partNumber: number; url: string }[];
  completeUrl: string;
}

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/** A PDF (as detection sees it) of exactly `size` bytes, its tail random. */
const pdfOf = (size: number) => {
  const head = Buffer.from('%PDF-1.4\n%\xe2\xe3\xcf\xd3\n', 'latin1');
  return Buffer.concat([head, randomBytes(Math.max(0, size - head.length))]).subarray(0, size);
};

async function requestUpload(
  who: { Authorization: string },
  body: Record<string, unknown>,
): Promise<{ status: number; body: { data?: Ticket; error?: string; message?: string } }> {
  const res = await fetch(`${api.url}${PATH}`, {
    method: 'POST',
    headers: { ...who, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as { data?: Ticket };
  expectMatchesSpec('POST', PATH, res.status, json, res.headers);
  return { status: res.status, body: json };
}

/** Sends the bytes where the ticket says (a PUT, or every part). */
async function send(ticket: Ticket, data: Buffer): Promise<void> {
  if (ticket.method === 'put') {
    const res = await fetch(ticket.url!, { method: 'PUT', headers: ticket.headers, body: data });
    expect(res.status).toBe(200);
    return;
  }
  expect(ticket.method).toBe('multipart');
  for (const part of ticket.parts!) {
    const start = (part.partNumber - 1) * ticket.partSize!;
    const res = await fetch(part.url, {
      method: 'PUT',
      body: data.subarray(start, start + ticket.partSize!),
    });
    expect(res.status).toBe(200);
  }
}

async function complete(
  who: { Authorization: string },
  id: string,
): Promise<{ status: number; body: { data?: Record<string, unknown>; error?: string } }> {
  const res = await fetch(`${api.url}${PATH}/${id}/complete`, { method: 'POST', headers: who });
  const json = (await res.json()) as { data?: Record<string, unknown> };
  expectMatchesSpec('POST', `${PATH}/{id}/complete`, res.status, json, res.headers);
  return { status: res.status, body: json };
}

const quarantine = (o: TestOrg) => `${o.organization.slug}/.tmp/direct/`;
const usageOf = (o: TestOrg) => api.ctx.repositories.usage.get(o.organization.id);

describe('direct-to-storage uploads', () => {
  it('one presigned PUT: the record as POST /media/upload answers it, the same again on a repeated completion', async () => {
    const data = fixture('Canon_40D.jpg');
    const asked = await requestUpload(org.auth, {
      name: 'canon.jpg',
      size: data.length,
      type: 'image/jpeg',
      folder: 'Direct',
      sha256: sha256(data),
    });
    expect(asked.status).toBe(201);
    const ticket = asked.body.data!;
    expect(ticket.method).toBe('put');
    expect(ticket.completeUrl).toMatch(new RegExp(`${PATH}/${ticket.id}/complete$`));
    // Booked at once.
    expect((await usageOf(org)).bytes).toBe(data.length);
    await send(ticket, data);
    const done = await complete(org.auth, ticket.id);
    expect(done.status).toBe(201);
    expect(done.body.data).toMatchObject({
      name: 'canon.jpg',
      mimetype: 'image/jpeg',
      bytes: data.length,
      checksum: `sha256:${sha256(data)}`,
    });
    const key = done.body.data!.key as string;
    expect(key).toMatch(new RegExp(`^${org.organization.slug}/direct/`));
    const stored = Buffer.concat((await (await api.ctx.store.get(key)).toArray()) as Buffer[]);
    expect(sha256(stored)).toBe(sha256(data));
    // Idempotent: the same record, nothing more counted.
    const again = await complete(org.auth, ticket.id);
    expect(again.status).toBe(201);
    expect(again.body.data!.id).toBe(done.body.data!.id);
    expect(await usageOf(org)).toEqual({ bytes: data.length, files: 1 });
    await api.expectNoObjects(quarantine(org));
  });

  it('multipart: presigned part URLs (5 MiB parts), completed by the API', async () => {
    const data = pdfOf(5 * MiB + 1);
    const { status, body } = await requestUpload(org.auth, {
      name: 'scan.pdf',
      size: data.length,
      type: 'application/pdf',
    });
    expect(status).toBe(201);
    const ticket = body.data!;
    expect(ticket).toMatchObject({ method: 'multipart', partSize: 5 * MiB });
    expect(ticket.parts!.map((p) => p.partNumber)).toEqual([1, 2]);
    // Completing before every byte is in: 409, the upload stays.
    expect((await complete(org.auth, ticket.id)).status).toBe(409);
    await send(ticket, data);
    const done = await complete(org.auth, ticket.id);
    expect(done.status).toBe(201);
    expect(done.body.data).toMatchObject({
      mimetype: 'application/pdf',
      bytes: data.length,
      checksum: `sha256:${sha256(data)}`,
    });
    await api.expectNoObjects(quarantine(org));
    expect(await api.ctx.store.listIncompleteUploads(quarantine(org))).toEqual([]);
  });

  it('refused at completion (size, type, checksum): 400/415, nothing left, the booking given back', async () => {
    const other = await api.createOrg();
    const jpeg = fixture('Canon_40D.jpg');
    const cases = [
      // The object is not the declared size.
      {
        declared: jpeg.length + 1,
        sent: jpeg,
        sha: undefined,
        status: 400,
        error: 'SIZE_MISMATCH',
      },
      // An HTML file declared image/jpeg.
      {
        declared: 64,
        sent: Buffer.from('<!doctype html><html><body>not a picture</body></html>'.padEnd(64)),
        sha: undefined,
        status: 415,
        error: 'UNSUPPORTED_MEDIA_TYPE',
      },
      // The bytes are not the declared SHA-256.
      {
        declared: jpeg.length,
        sent: jpeg,
        sha: '0'.repeat(64),
        status: 400,
        error: 'CHECKSUM_MISMATCH',
      },
    ];
    for (const c of cases) {
      const { body } = await requestUpload(other.auth, {
        name: 'photo.jpg',
        size: c.declared,
        type: 'image/jpeg',
        ...(c.sha ? { sha256: c.sha } : {}),
      });
      const ticket = body.data!;
      await send(ticket, c.sent);
      const refused = await complete(other.auth, ticket.id);
      expect({ status: refused.status, error: refused.body.error }).toEqual({
        status: c.status,
        error: c.error,
      });
      // Over: a second completion finds no upload.
      expect((await complete(other.auth, ticket.id)).status).toBe(404);
    }
    await api.expectNoObjects(`${other.organization.slug}/`);
    expect(await usageOf(other)).toEqual({ bytes: 0, files: 0 });
  });

  it('checks at the request: MAX_FILE_SIZE and the quota (413), a declared type not accepted (415), control characters (400)', async () => {
    const small = await api.createOrg();
    await api.ctx.organizations.setQuota(small.organization.id, 1000);
    const tooBig = await requestUpload(small.auth, {
      name: 'a.jpg',
      size: 1001,
      type: 'image/jpeg',
    });
    expect({ status: tooBig.status, error: tooBig.body.error }).toEqual({
      status: 413,
      error: 'QUOTA_EXCEEDED',
    });
    const huge = await requestUpload(org.auth, {
      name: 'a.jpg',
      size: api.env.config.limits.maxFileSize + 1,
      type: 'image/jpeg',
    });
    expect({ status: huge.status, error: huge.body.error }).toEqual({
      status: 413,
      error: 'FILE_TOO_LARGE',
    });
    const html = await requestUpload(org.auth, { name: 'a.html', size: 10, type: 'text/html' });
    expect(html.status).toBe(415);
    const crlf = await requestUpload(org.auth, {
      name: 'a\r\nb.jpg',
      size: 10,
      type: 'image/jpeg',
    });
    expect(crlf.status).toBe(400);
    // Within the quota: booked; a second that would pass it is refused.
    const first = await requestUpload(small.auth, { name: 'a.jpg', size: 600, type: 'image/jpeg' });
    expect(first.status).toBe(201);
    const second = await requestUpload(small.auth, {
      name: 'b.jpg',
      size: 600,
      type: 'image/jpeg',
    });
    expect(second.status).toBe(413);
    await cleanupLater();
  });

  it("another organization's upload is 404; a download-scoped token cannot request or complete (403)", async () => {
    const data = fixture('Canon_40D.jpg');
    const { body } = await requestUpload(org.auth, {
      name: 'x.jpg',
      size: data.length,
      type: 'image/jpeg',
    });
    const stranger = await api.createOrg();
    expect((await complete(stranger.auth, body.data!.id)).status).toBe(404);
    const { token } = await api.ctx.tokens.issue(org.organization.id, { scopes: ['read'] });
    const reader = { Authorization: `Bearer ${token}` };
    expect(
      (await requestUpload(reader, { name: 'x.jpg', size: 10, type: 'image/jpeg' })).status,
    ).toBe(403);
    expect((await complete(reader, body.data!.id)).status).toBe(403);
    await cleanupLater();
  });

  it('an upload never completed is removed after its expiry: no object, no multipart upload, no booking', async () => {
    const lone = await api.createOrg();
    const data = pdfOf(5 * MiB + 10);
    const single = (
      await requestUpload(lone.auth, { name: 's.jpg', size: 100, type: 'image/jpeg' })
    ).body.data!;
    await send(single, fixture('Canon_40D.jpg').subarray(0, 100));
    const multi = (
      await requestUpload(lone.auth, { name: 'm.pdf', size: data.length, type: 'application/pdf' })
    ).body.data!;
    // One part of two sent.
    await fetch(multi.parts![0]!.url, { method: 'PUT', body: data.subarray(0, 5 * MiB) });
    expect((await usageOf(lone)).bytes).toBe(100 + data.length);
    expect(await api.ctx.store.listIncompleteUploads(quarantine(lone))).toHaveLength(1);
    // The cleanup the worker's upload.expire-direct job runs, its clock past the expiry.
    await cleanupLater();
    await eventually(async () => {
      expect(await api.objectKeys(`${lone.organization.slug}/`)).toEqual([]);
      expect(await api.ctx.store.listIncompleteUploads(quarantine(lone))).toEqual([]);
      expect(await usageOf(lone)).toEqual({ bytes: 0, files: 0 });
    }, 10_000);
    // Expired: its completion is 404 now that it is gone.
    expect((await complete(lone.auth, single.id)).status).toBe(404);
  });

  it('cancelled (DELETE, 204): multipart upload, object and booking gone at once; then 404; a late PUT is removed at the expiry', async () => {
    const lone = await api.createOrg();
    const cancel = async (who: { Authorization: string }, id: string) => {
      const res = await fetch(`${api.url}${PATH}/${id}`, { method: 'DELETE', headers: who });
      const json = res.status === 204 ? undefined : ((await res.json()) as { error?: string });
      expectMatchesSpec('DELETE', `${PATH}/{id}`, res.status, json, res.headers);
      return { status: res.status, error: json?.error };
    };
    const data = pdfOf(5 * MiB + 10);
    const multi = (
      await requestUpload(lone.auth, { name: 'm.pdf', size: data.length, type: 'application/pdf' })
    ).body.data!;
    await fetch(multi.parts![0]!.url, { method: 'PUT', body: data.subarray(0, 5 * MiB) });
    const single = (
      await requestUpload(lone.auth, { name: 's.jpg', size: 100, type: 'image/jpeg' })
    ).body.data!;
    expect((await usageOf(lone)).bytes).toBe(100 + data.length);
    // Another organization's, or a reading token: refused, nothing cancelled.
    const stranger = await api.createOrg();
    expect(await cancel(stranger.auth, multi.id)).toEqual({
      status: 404,
      error: 'UPLOAD_NOT_FOUND',
    });
    const { token } = await api.ctx.tokens.issue(lone.organization.id, { scopes: ['read'] });
    expect((await cancel({ Authorization: `Bearer ${token}` }, multi.id)).status).toBe(403);
    expect(await api.ctx.store.listIncompleteUploads(quarantine(lone))).toHaveLength(1);

    expect((await cancel(lone.auth, multi.id)).status).toBe(204);
    expect(await api.ctx.store.listIncompleteUploads(quarantine(lone))).toEqual([]);
    expect((await usageOf(lone)).bytes).toBe(100);
    expect(await cancel(lone.auth, multi.id)).toEqual({ status: 404, error: 'UPLOAD_NOT_FOUND' });
    expect((await complete(lone.auth, multi.id)).status).toBe(404);

    // Cancelled before its bytes came: the presigned PUT still works until the expiry, and
    // the cleanup then removes what it put.
    expect((await cancel(lone.auth, single.id)).status).toBe(204);
    expect(await usageOf(lone)).toEqual({ bytes: 0, files: 0 });
    await send(single, fixture('Canon_40D.jpg').subarray(0, 100));
    expect(await api.objectKeys(quarantine(lone))).toHaveLength(1);
    await cleanupLater();
    await eventually(
      async () => expect(await api.objectKeys(`${lone.organization.slug}/`)).toEqual([]),
      10_000,
    );
    expect(await usageOf(lone)).toEqual({ bytes: 0, files: 0 });
    // Counted: the two cancels, and the uploads requested and completed in this file.
    const metrics = await (await fetch(`${api.url}/metrics`)).text();
    expect(metrics).toMatch(/^media_direct_uploads_total\{outcome="cancelled"\} 2$/m);
    expect(metrics).toMatch(/^media_direct_uploads_total\{outcome="requested"\} [1-9]\d*$/m);
    expect(metrics).toMatch(/^media_direct_uploads_total\{outcome="completed"\} [1-9]\d*$/m);
    expect(metrics).toMatch(/^media_direct_uploads_total\{outcome="refused"\} [1-9]\d*$/m);
  });

  it('a completed upload is a record: its cancel is 409, the record stays', async () => {
    const data = fixture('Canon_40D.jpg');
    const ticket = (
      await requestUpload(org.auth, { name: 'kept.jpg', size: data.length, type: 'image/jpeg' })
    ).body.data!;
    await send(ticket, data);
    const done = await complete(org.auth, ticket.id);
    expect(done.status).toBe(201);
    const res = await fetch(`${api.url}${PATH}/${ticket.id}`, {
      method: 'DELETE',
      headers: org.auth,
    });
    expect(res.status).toBe(409);
    expect(((await res.json()) as { error: string }).error).toBe('CONFLICT');
    expect(await api.objectKeys(`${org.organization.slug}/`)).toContain(done.body.data!.key);
  });

  it('a completion cut off after its record was written: the next one answers that record and removes what was left', async () => {
    const data = pdfOf(5 * MiB + 1);
    const { body } = await requestUpload(org.auth, {
      name: 'cut.pdf',
      size: data.length,
      type: 'application/pdf',
    });
    const ticket = body.data!;
    await send(ticket, data);
    const first = await complete(org.auth, ticket.id);
    expect(first.status).toBe(201);
    // As a completion cut off between the worker's record and its last step leaves it: the
    // multipart upload completed, its object still in quarantine, the upload not marked done.
    const uploads = directUploads();
    const state = (await uploads.get(ticket.id))!;
    expect(state.completed).toEqual({ mediaId: first.body.data!.id });
    delete state.completed;
    const stateKey = `${api.env.config.queuePrefix}:direct:{${ticket.id}}`;
    await api.ctx.redis!.set(stateKey, JSON.stringify(state), 'PX', EXPIRY_MS);
    await api.ctx.store.put(state.key, data, { contentType: 'application/pdf' });

    const again = await complete(org.auth, ticket.id);
    expect(again.status).toBe(201);
    expect(again.body.data).toEqual(first.body.data);
    await api.expectNoObjects(quarantine(org));
    expect((await uploads.get(ticket.id))!.completed).toEqual({ mediaId: first.body.data!.id });
    const records = await api.ctx.models.Media.countDocuments({
      key: first.body.data!.key as string,
    });
    expect(records).toBe(1);
  });

  it('records = objects', async () => {
    await cleanupLater();
    const records = await api.ctx.models.Media.find({ organizationId: org.organization.id }).lean();
    const keys = await api.objectKeys(`${org.organization.slug}/`);
    expect(keys).toEqual(records.map((r) => r.key).sort());
  });
});

function directUploads(): DirectUploads {
  return new DirectUploads({
    redis: () => api.ctx.redis,
    store: api.ctx.store,
    usage: api.ctx.repositories.usage,
    queuePrefix: api.env.config.queuePrefix,
    logger: createLogger({ level: 'silent' }),
  });
}

/** Runs the expiry cleanup as if its clock were past every upload's expiry. */
async function cleanupLater(): Promise<number> {
  return directUploads().cleanupExpired(Date.now() + EXPIRY_MS + 60_000);
}
