/**
 * Resumable uploads (tus 1.0) through the real API, Redis, S3 and MongoDB,
 * with tus-js-client as the client: the sizes around S3's 5 MiB part
 * minimum, with and without a deferred length, read back byte for byte; the
 * protocol's MUSTs (412, 415, 409 with the current offset, 413, 460 with the
 * offset unchanged, 403 on PATCH to a final upload, 404/410 after
 * termination or expiry, Cache-Control: no-store on HEAD); tenancy, scopes,
 * metadata checks, concatenation, the lock, and the expiry cleanup.
 */
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import { Readable } from 'node:stream';
import * as tus from 'tus-js-client';
import { ReconcileService } from '../../../api/services/reconcile.service';
import { createLogger } from '../../../shared/logger';
import { MediaDeletion } from '../../../shared/media-deletion';
import { createRepositories } from '../../../shared/repositories';
import { resumableKeys, type ResumableState } from '../../../shared/resumable-uploads';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { startWorker } from '../../support/worker';

const MiB = 1024 * 1024;
const PATH = '/media/upload/resumable';
const TUS = { 'Tus-Resumable': '1.0.0' };

/**
 * Parts of S3's smallest size (5 MiB), and at most 4 of them: an upload of
 * more than 20 MiB (and every deferred length, bounded by MAX_FILE_SIZE)
 * has larger parts.
 */
const PART = 5 * MiB;
const MAX_FILE = 24 * MiB;

let api: TestApi;
beforeAll(async () => {
  api = await startApi('resumable', {
    env: {
      RESUMABLE_MAX_INCOMPLETE: '5',
      S3_PART_SIZE: String(PART),
      RESUMABLE_MAX_PARTS: '4',
      MAX_FILE_SIZE: String(MAX_FILE),
    },
  });
});
afterAll(async () => {
  await api.close();
});

/** A PDF (as detection sees it) of exactly `size` bytes, its tail random. */
const pdfOf = (size: number) => {
  const head = Buffer.from('%PDF-1.4\n%\xe2\xe3\xcf\xd3\n', 'latin1');
  return Buffer.concat([head, randomBytes(Math.max(0, size - head.length))]).subarray(0, size);
};

const b64 = (s: string) => Buffer.from(s).toString('base64');

interface Finished {
  url: string;
  mediaKey: string | undefined;
  body: { data?: { key: string; bytes: number; checksum: string; id: number } } | undefined;
}

/** Uploads `data` with tus-js-client; resolves with the upload URL, the Media-Key header and the last answer's body. */
function tusUpload(
  org: TestOrg,
  data: Buffer,
  options: Partial<tus.UploadOptions> & { deferred?: boolean } = {},
): Promise<Finished> {
  const { deferred, ...rest } = options;
  return new Promise((resolve, reject) => {
    let mediaKey: string | undefined;
    let body: string | undefined;
    const upload = new tus.Upload(deferred ? Readable.from([data]) : data, {
      endpoint: `${api.url}${PATH}`,
      headers: org.auth,
      metadata: { filename: 'scan.pdf', filetype: 'application/pdf' },
      retryDelays: [],
      uploadLengthDeferred: deferred ?? false,
      ...(deferred ? { chunkSize: rest.chunkSize ?? 2 * MiB } : {}),
      onAfterResponse: (_req, res) => {
        const key = res.getHeader('Media-Key');
        if (key) {
          mediaKey = key;
          body = res.getBody();
        }
      },
      onError: reject,
      onSuccess: () =>
        resolve({
          url: upload.url!,
          mediaKey,
          body: body ? (JSON.parse(body) as Finished['body']) : undefined,
        }),
      ...rest,
    });
    upload.start();
  });
}

async function storedBytes(key: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of await api.ctx.store.get(key)) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

async function create(org: TestOrg, headers: Record<string, string>) {
  return fetch(`${api.url}${PATH}`, {
    method: 'POST',
    headers: { ...TUS, ...org.auth, ...headers },
  });
}

async function patch(
  org: TestOrg,
  url: string,
  offset: number,
  body: Buffer | ReadableStream<Uint8Array>,
  headers: Record<string, string> = {},
  signal?: AbortSignal,
) {
  return fetch(new URL(url, api.url), {
    method: 'PATCH',
    headers: {
      ...TUS,
      ...org.auth,
      'Content-Type': 'application/offset+octet-stream',
      'Upload-Offset': String(offset),
      ...headers,
    },
    body,
    // A stream is sent as it comes (fetch wants to be told).
    ...(body instanceof ReadableStream ? { duplex: 'half' as const } : {}),
    ...(signal ? { signal } : {}),
  });
}

/** A metric of the API (`name{labels} value`), 0 when not there yet. */
async function metric(pattern: RegExp): Promise<number> {
  const text = await (await fetch(`${api.url}/metrics`)).text();
  return Number(pattern.exec(text)?.[1] ?? 0);
}
const received = () => metric(/^media_resumable_bytes_received_total (\d+)/m);
/** Parts sent to the store as they came (docs/resumable-uploads.md, "A PATCH's parts streamed"). */
const streamedParts = () =>
  metric(
    /^media_dependency_duration_seconds_count\{dependency="storage",operation="streamPart"\} (\d+)/m,
  );
const streamFailures = () =>
  metric(/^media_dependency_errors_total\{dependency="storage",operation="streamPart"\} (\d+)/m);

async function head(org: TestOrg, url: string) {
  return fetch(new URL(url, api.url), { method: 'HEAD', headers: { ...TUS, ...org.auth } });
}

describe('sizes, with tus-js-client, with and without a deferred length', () => {
  let org: TestOrg;
  beforeAll(async () => {
    org = await api.createOrg();
  });

  /** Around the part size, and one whose parts grow (22 MiB / 4 parts: 5.5 MiB; deferred: 24 / 4). */
  const sizes = [PART - 1, PART, PART + 1, 22 * MiB + 3];
  for (const deferred of [false, true]) {
    for (const size of sizes) {
      it(`${size} bytes${deferred ? ', length deferred' : ''}: the record's bytes are the file's`, async () => {
        const data = pdfOf(size);
        const streamedBefore = await streamedParts();
        const done = await tusUpload(org, data, { deferred, chunkSize: PART });
        // The parts of a PATCH whose Content-Length is sent (tus-js-client sends it) went to
        // the store as they came, the last (shorter) one too; a file smaller than a part is
        // no multipart upload; a deferred length's 5 MiB PATCHes fill no larger part.
        if (!deferred && size <= 4 * PART) {
          const parts = size < PART ? 0 : Math.ceil(size / PART);
          expect((await streamedParts()) - streamedBefore).toBe(parts);
        }
        expect(done.mediaKey).toBeDefined();
        expect(done.body?.data).toMatchObject({ key: done.mediaKey, bytes: size });
        expect(done.body?.data?.checksum).toBe(`sha256:${sha256(data)}`);
        const stored = await storedBytes(done.mediaKey!);
        expect(stored.length).toBe(size);
        expect(sha256(stored)).toBe(sha256(data));
        // A later HEAD carries the same key; the temporary objects are gone.
        const later = await head(org, done.url);
        expect([later.status, later.headers.get('media-key')]).toEqual([200, done.mediaKey]);
        await api.expectNoObjects(`${org.organization.slug}/.tmp/`);
        expect(await api.ctx.store.listIncompleteUploads(`${org.organization.slug}/`)).toEqual([]);
        const records = await api.ctx.models.Media.countDocuments({ key: done.mediaKey });
        expect(records).toBe(1);
        // Joined by the store from at most RESUMABLE_MAX_PARTS parts (S3's ETag says how many).
        const parts = /-(\d+)$/.exec((await api.ctx.store.stat(done.mediaKey!))!.etag)?.[1];
        expect(Number(parts ?? 1)).toBeLessThanOrEqual(4);
      });
    }
  }

  it('0 and 1 bytes are refused as POST /media/upload refuses them (400 empty, 415 unknown type)', async () => {
    const empty = await create(org, { 'Upload-Length': '0' });
    expect(empty.status).toBe(400);
    const one = await create(org, { 'Upload-Length': '1' });
    expect(one.status).toBe(201);
    const refused = await patch(org, one.headers.get('location')!, 0, Buffer.from('x'));
    expect(refused.status).toBe(415);
    expect(refused.headers.get('tus-resumable')).toBe('1.0.0');
    expect((await head(org, one.headers.get('location')!)).status).toBe(404);
    // Deferred: the empty file is known empty by its last (empty) PATCH.
    const deferred = await create(org, { 'Upload-Defer-Length': '1' });
    const last = await patch(org, deferred.headers.get('location')!, 0, Buffer.alloc(0), {
      'Upload-Length': '0',
    });
    expect(last.status).toBe(400);
    // Deferred, one byte: kept by a first PATCH, refused by the last (empty) one that says the length.
    const deferredOne = await create(org, { 'Upload-Defer-Length': '1' });
    const oneUrl = deferredOne.headers.get('location')!;
    const first = await patch(org, oneUrl, 0, Buffer.from('x'));
    expect([first.status, first.headers.get('upload-offset')]).toEqual([204, '1']);
    const end = await patch(org, oneUrl, 1, Buffer.alloc(0), { 'Upload-Length': '1' });
    expect(end.status).toBe(415);
    expect((await head(org, oneUrl)).status).toBe(404);
    await api.expectNoObjects(`${org.organization.slug}/.tmp/`);
  });
});

describe('the protocol', () => {
  let org: TestOrg;
  beforeAll(async () => {
    org = await api.createOrg();
  });

  it('OPTIONS names the version, extensions, max size and checksum algorithms, without a token', async () => {
    const res = await fetch(`${api.url}${PATH}`, { method: 'OPTIONS' });
    expect(res.status).toBe(204);
    expect(res.headers.get('tus-version')).toBe('1.0.0');
    expect(res.headers.get('tus-extension')!.split(',')).toEqual(
      expect.arrayContaining([
        'creation',
        'creation-with-upload',
        'creation-defer-length',
        'termination',
        'expiration',
        'checksum',
        'concatenation',
      ]),
    );
    expect(res.headers.get('tus-checksum-algorithm')).toBe('sha1,sha256');
    expect(Number(res.headers.get('tus-max-size'))).toBeGreaterThan(0);
  });

  it('412 without Tus-Resumable 1.0.0; 415 for a PATCH of another type; 409 with the offset on a mismatch', async () => {
    const noVersion = await fetch(`${api.url}${PATH}`, {
      method: 'POST',
      headers: { ...org.auth, 'Upload-Length': '10' },
    });
    expect(noVersion.status).toBe(412);
    expect(noVersion.headers.get('tus-version')).toBe('1.0.0');
    const data = pdfOf(10_000);
    const created = await create(org, { 'Upload-Length': String(data.length) });
    expect(created.status).toBe(201);
    expect(created.headers.get('upload-expires')).toBeTruthy();
    const url = created.headers.get('location')!;
    const wrongType = await patch(org, url, 0, data.subarray(0, 100), {
      'Content-Type': 'application/octet-stream',
    });
    expect(wrongType.status).toBe(415);
    const first = await patch(org, url, 0, data.subarray(0, 5000));
    expect([first.status, first.headers.get('upload-offset')]).toEqual([204, '5000']);
    expect(first.headers.get('upload-expires')).toBeTruthy();
    const stale = await patch(org, url, 100, data.subarray(100));
    expect([stale.status, stale.headers.get('upload-offset')]).toEqual([409, '5000']);
    const status = await head(org, url);
    expect(status.status).toBe(200);
    expect(status.headers.get('cache-control')).toBe('no-store');
    expect(status.headers.get('upload-offset')).toBe('5000');
    expect(status.headers.get('upload-length')).toBe(String(data.length));
    expect(status.headers.get('upload-expires')).toBeTruthy();
    const last = await patch(org, url, 5000, data.subarray(5000));
    expect(last.status).toBe(200);
    const key = last.headers.get('media-key')!;
    expect(((await last.json()) as { data: { key: string } }).data.key).toBe(key);
    expect(sha256(await storedBytes(key))).toBe(sha256(data));
  });

  it('413 past MAX_FILE_SIZE at creation, and past the given length on PATCH', async () => {
    const tooBig = await create(org, {
      'Upload-Length': String(api.env.config.limits.maxFileSize + 1),
    });
    expect(tooBig.status).toBe(413);
    const created = await create(org, { 'Upload-Length': '5000' });
    const over = await patch(org, created.headers.get('location')!, 0, pdfOf(6000));
    expect(over.status).toBe(413);
    const status = await head(org, created.headers.get('location')!);
    expect(status.headers.get('upload-offset')).toBe('0');
  });

  it('415 from the PATCH that brings the first bytes of an unaccepted type; nothing kept', async () => {
    const org = await api.createOrg();
    const created = await create(org, { 'Upload-Length': String(MiB) });
    const url = created.headers.get('location')!;
    const refused = await patch(org, url, 0, randomBytes(MiB));
    expect(refused.status).toBe(415);
    expect((await head(org, url)).status).toBe(404);
    await api.expectNoObjects(`${org.organization.slug}/`);
  });

  it('460 with the offset unchanged when Upload-Checksum does not match; sha1 and sha256 accepted', async () => {
    const data = pdfOf(20_000);
    const created = await create(org, { 'Upload-Length': String(data.length) });
    const url = created.headers.get('location')!;
    const part = data.subarray(0, 10_000);
    const wrong = createHash('sha1').update('something else').digest('base64');
    const bad = await patch(org, url, 0, part, { 'Upload-Checksum': `sha1 ${wrong}` });
    expect([bad.status, bad.headers.get('upload-offset')]).toEqual([460, '0']);
    expect((await head(org, url)).headers.get('upload-offset')).toBe('0');
    const sha1 = createHash('sha1').update(part).digest('base64');
    const good = await patch(org, url, 0, part, { 'Upload-Checksum': `sha1 ${sha1}` });
    expect([good.status, good.headers.get('upload-offset')]).toEqual([204, '10000']);
    const rest = data.subarray(10_000);
    const sha256b = createHash('sha256').update(rest).digest('base64');
    const done = await patch(org, url, 10_000, rest, { 'Upload-Checksum': `sha256 ${sha256b}` });
    expect(done.status).toBe(200);
    const unknown = await patch(org, url, 0, part, { 'Upload-Checksum': `md5 ${sha1}` });
    expect(unknown.status).toBe(400);
  });

  it('DELETE terminates: 204, then 404, nothing left', async () => {
    const created = await create(org, { 'Upload-Length': '20000' });
    const url = created.headers.get('location')!;
    await patch(org, url, 0, pdfOf(20_000).subarray(0, 8000));
    const gone = await fetch(new URL(url, api.url), {
      method: 'DELETE',
      headers: { ...TUS, ...org.auth },
    });
    expect(gone.status).toBe(204);
    expect((await head(org, url)).status).toBe(404);
    expect((await patch(org, url, 8000, Buffer.alloc(10))).status).toBe(404);
    await api.expectNoObjects(`${org.organization.slug}/.tmp/`);
  });

  it('Upload-Metadata with CR, LF or NUL is 400; the kept values go back base64-encoded', async () => {
    for (const bad of ['a\r\nSet-Cookie: x=1', 'a\nb', 'a\0b']) {
      const res = await create(org, {
        'Upload-Length': '10',
        'Upload-Metadata': `filename ${b64(bad)}`,
      });
      expect(res.status).toBe(400);
    }
    const long = await create(org, {
      'Upload-Length': '10',
      'Upload-Metadata': `filename ${b64('x'.repeat(2000))}`,
    });
    expect(long.status).toBe(400);
    const ok = await create(org, {
      'Upload-Length': '10',
      'Upload-Metadata': `name ${b64('ok.pdf')},type ${b64('application/pdf')},relativePath ${b64('null')}`,
    });
    expect(ok.status).toBe(201);
    const status = await head(org, ok.headers.get('location')!);
    expect(status.headers.get('upload-metadata')).toBe(
      `filename ${b64('ok.pdf')},filetype ${b64('application/pdf')}`,
    );
    await fetch(new URL(ok.headers.get('location')!, api.url), {
      method: 'DELETE',
      headers: { ...TUS, ...org.auth },
    });
  });

  it('a download-scoped token cannot create or PATCH (403); another organization gets 404', async () => {
    const { token } = await api.ctx.tokens.issue(org.organization.id, { scopes: ['read'] });
    const readOnly = { Authorization: `Bearer ${token}` };
    const created = await create(org, { 'Upload-Length': '20000' });
    const url = created.headers.get('location')!;
    const refused = await fetch(`${api.url}${PATH}`, {
      method: 'POST',
      headers: { ...TUS, ...readOnly, 'Upload-Length': '10' },
    });
    expect(refused.status).toBe(403);
    const patched = await fetch(new URL(url, api.url), {
      method: 'PATCH',
      headers: {
        ...TUS,
        ...readOnly,
        'Content-Type': 'application/offset+octet-stream',
        'Upload-Offset': '0',
      },
      body: pdfOf(100),
    });
    expect(patched.status).toBe(403);
    const other = await api.createOrg();
    expect((await head(other, url)).status).toBe(404);
    expect((await patch(other, url, 0, pdfOf(100))).status).toBe(404);
    await fetch(new URL(url, api.url), { method: 'DELETE', headers: { ...TUS, ...org.auth } });
  });

  it('RESUMABLE_MAX_INCOMPLETE uploads in progress per organization, then 429', async () => {
    const own = await api.createOrg();
    const urls: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await create(own, { 'Upload-Length': '100' });
      expect(res.status).toBe(201);
      urls.push(res.headers.get('location')!);
    }
    expect((await create(own, { 'Upload-Length': '100' })).status).toBe(429);
    await fetch(new URL(urls[0]!, api.url), { method: 'DELETE', headers: { ...TUS, ...own.auth } });
    expect((await create(own, { 'Upload-Length': '100' })).status).toBe(201);
  });
});

describe('concatenation', () => {
  it('tus-js-client parallel uploads: one record, its bytes the file', async () => {
    const org = await api.createOrg();
    const data = pdfOf(11 * MiB + 7);
    const done = await tusUpload(org, data, { parallelUploads: 4 });
    expect(sha256(await storedBytes(done.mediaKey!))).toBe(sha256(data));
    expect(await api.ctx.models.Media.countDocuments({ organizationId: org.organization.id })).toBe(
      1,
    );
    await api.expectNoObjects(`${org.organization.slug}/.tmp/`);
  });

  it('two partials of at least 5 MiB: the store copies them into the file’s parts (UploadPartCopy)', async () => {
    const org = await api.createOrg();
    const data = pdfOf(11 * MiB + 7);
    const done = await tusUpload(org, data, { parallelUploads: 2 });
    expect(done.body?.data?.checksum).toBe(`sha256:${sha256(data)}`);
    expect(sha256(await storedBytes(done.mediaKey!))).toBe(sha256(data));
    // Joined from two parts by the store (a streamed 11 MiB file would be one PUT).
    expect((await api.ctx.store.stat(done.mediaKey!))!.etag).toMatch(/-2$/);
    await api.expectNoObjects(`${org.organization.slug}/.tmp/`);
    expect(await api.ctx.store.listIncompleteUploads(`${org.organization.slug}/`)).toEqual([]);
  });

  it('a final naming another organization’s partial is 404; a PATCH to a final is 403', async () => {
    const org = await api.createOrg();
    const other = await api.createOrg();
    const theirs = await create(other, { 'Upload-Length': '100', 'Upload-Concat': 'partial' });
    await patch(other, theirs.headers.get('location')!, 0, randomBytes(100));
    const mine = await create(org, { 'Upload-Length': '6000', 'Upload-Concat': 'partial' });
    const mineUrl = mine.headers.get('location')!;
    await patch(org, mineUrl, 0, pdfOf(6000));
    const stolen = await create(org, {
      'Upload-Concat': `final;${mineUrl} ${theirs.headers.get('location')!}`,
    });
    expect(stolen.status).toBe(404);
    const final = await create(org, { 'Upload-Concat': `final;${mineUrl}` });
    expect(final.status).toBe(201);
    const key = final.headers.get('media-key')!;
    expect(key).toBeTruthy();
    const patched = await patch(org, final.headers.get('location')!, 6000, Buffer.alloc(1));
    expect(patched.status).toBe(403);
    // The other organization's partial is untouched.
    expect((await head(other, theirs.headers.get('location')!)).headers.get('upload-offset')).toBe(
      '100',
    );
  });
});

describe('resuming', () => {
  it('a PATCH cut by the network keeps what arrived; tus-js-client resumes from there', async () => {
    const org = await api.createOrg();
    const data = pdfOf(6 * MiB);
    const created = await create(org, { 'Upload-Length': String(data.length) });
    const url = new URL(created.headers.get('location')!, api.url).toString();
    const before = await received();
    const cut = new AbortController();
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (sent >= 3 * MiB) {
          // The server has some of it: now the network goes.
          await eventually(async () => expect((await received()) - before).toBeGreaterThan(MiB));
          cut.abort();
          return;
        }
        controller.enqueue(data.subarray(sent, sent + 256 * 1024));
        sent += 256 * 1024;
      },
    });
    await patch(org, url, 0, body, {}, cut.signal).catch(() => undefined);
    // The bytes that arrived are kept (once the cut PATCH has let go of the upload).
    let kept = 0;
    await eventually(async () => {
      const status = await head(org, url);
      kept = Number(status.headers.get('upload-offset'));
      expect(kept).toBeGreaterThan(0);
    });
    expect(kept).toBeLessThanOrEqual(3 * MiB);
    const done = await tusUpload(org, data, { uploadUrl: url });
    expect(done.mediaKey).toBeDefined();
    expect(sha256(await storedBytes(done.mediaKey!))).toBe(sha256(data));
    await api.expectNoObjects(`${org.organization.slug}/.tmp/`);
  });
});

describe('resuming a streamed part', () => {
  it('a PATCH cut mid-part, its Content-Length sent: the part being streamed is not stored, what arrived is kept; tus-js-client resumes', async () => {
    const org = await api.createOrg();
    const data = pdfOf(12 * MiB);
    const created = await create(org, { 'Upload-Length': String(data.length) });
    const url = new URL(created.headers.get('location')!, api.url).toString();
    const [before, streamedBefore, failuresBefore] = await Promise.all([
      received(),
      streamedParts(),
      streamFailures(),
    ]);
    const request = http.request(url, {
      method: 'PATCH',
      headers: {
        ...TUS,
        ...org.auth,
        'Content-Type': 'application/offset+octet-stream',
        'Upload-Offset': '0',
        'Content-Length': String(data.length),
      },
    });
    request.on('error', () => undefined);
    request.write(data.subarray(0, 7 * MiB));
    // The server has the first part and some of the second, both streamed: now the network goes.
    await eventually(async () => expect((await received()) - before).toBeGreaterThan(6 * MiB));
    request.destroy();
    let kept = 0;
    await eventually(async () => {
      kept = Number((await head(org, url)).headers.get('upload-offset'));
      expect(kept).toBeGreaterThan(6 * MiB);
    });
    expect(kept).toBeLessThanOrEqual(7 * MiB);
    // Two parts were streamed: the first stored, the second stopped (not a storage failure):
    // its bytes are the upload's tail, sent again by the next PATCH.
    expect((await streamedParts()) - streamedBefore).toBe(2);
    expect((await streamFailures()) - failuresBefore).toBe(0);
    const done = await tusUpload(org, data, { uploadUrl: url });
    expect(done.mediaKey).toBeDefined();
    expect(sha256(await storedBytes(done.mediaKey!))).toBe(sha256(data));
    // Joined from its two whole parts and the last: the stopped part left nothing behind.
    expect((await api.ctx.store.stat(done.mediaKey!))!.etag).toMatch(/-3$/);
    await api.expectNoObjects(`${org.organization.slug}/.tmp/`);
    expect(await api.ctx.store.listIncompleteUploads(`${org.organization.slug}/`)).toEqual([]);
  });
});

describe('the lock and the expiry', () => {
  it('two clients PATCHing one upload: one wins, the other gets 409 or 423 and resumes', async () => {
    const org = await api.createOrg();
    const data = pdfOf(3 * MiB);
    const created = await create(org, { 'Upload-Length': String(data.length) });
    const url = created.headers.get('location')!;
    const [a, b] = await Promise.all([
      patch(org, url, 0, data.subarray(0, 2 * MiB)),
      patch(org, url, 0, data.subarray(0, 2 * MiB)),
    ]);
    const statuses = [a.status, b.status].sort();
    expect(statuses[0]).toBe(204);
    expect([204, 409, 423]).toContain(statuses[1]);
    const offset = Number((await head(org, url)).headers.get('upload-offset'));
    expect(offset).toBeGreaterThan(0);
    const done = await patch(org, url, offset, data.subarray(offset));
    expect(done.status).toBe(200);
    expect(sha256(await storedBytes(done.headers.get('media-key')!))).toBe(sha256(data));
  });

  it('a writer whose lock lapsed and went to another gets 423 and writes nothing over the state', async () => {
    const org = await api.createOrg();
    const data = pdfOf(3 * MiB);
    const created = await create(org, { 'Upload-Length': String(data.length) });
    const url = new URL(created.headers.get('location')!, api.url).toString();
    const keys = resumableKeys(api.env.config.queuePrefix);
    const id = url.split('/').pop()!;
    const redis = api.ctx.redis!;
    const stateBefore = await redis.get(keys.state(id));
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (sent === MiB) {
          // The PATCH holds the lock: as if it stalled past RESUMABLE_LOCK_TTL_MS and
          // another request then took the lock, the lock is now someone else's.
          await eventually(async () => expect(await redis.get(keys.lock(id))).not.toBeNull());
          await redis.set(keys.lock(id), 'another-writer', 'PX', 60_000);
        }
        if (sent >= 2 * MiB) return controller.close();
        controller.enqueue(data.subarray(sent, sent + 256 * 1024));
        sent += 256 * 1024;
      },
    });
    const stale = await patch(org, url, 0, body);
    expect(stale.status).toBe(423);
    // The state is as the other writer would find it: not one byte of the stale PATCH counted.
    expect(await redis.get(keys.state(id))).toBe(stateBefore);
    expect((await head(org, url)).headers.get('upload-offset')).toBe('0');
    // The other writer done (its lock gone), the upload goes on from there.
    await redis.del(keys.lock(id));
    const done = await patch(org, url, 0, data);
    expect(done.status).toBe(200);
    expect(sha256(await storedBytes(done.headers.get('media-key')!))).toBe(sha256(data));
    await api.expectNoObjects(`${org.organization.slug}/.tmp/`);
  });

  it('reconcile leaves an upload in progress alone, and takes its bytes once past the expiry', async () => {
    const org = await api.createOrg();
    const created = await create(org, { 'Upload-Length': '20000' });
    const url = created.headers.get('location')!;
    await patch(org, url, 0, pdfOf(20_000).subarray(0, 7000));
    const { media, usage, events } = createRepositories(api.ctx.models);
    const logger = createLogger({ level: 'silent' });
    const deletion = new MediaDeletion({ media, usage, events, store: api.ctx.store, logger });
    const reconcile = new ReconcileService({
      store: api.ctx.store,
      media,
      usage,
      deletion,
      resumableExpiryMs: api.env.config.limits.resumable.expiryMs,
    });
    const now = await reconcile.run({
      organization: org.organization,
      olderThanMs: 0,
      now: new Date(Date.now() + 60_000),
      fix: true,
      checkUsage: false,
    });
    expect(now.objectsWithoutRecord).toEqual([]);
    expect((await head(org, url)).headers.get('upload-offset')).toBe('7000');
    const later = await reconcile.run({
      organization: org.organization,
      olderThanMs: 0,
      now: new Date(Date.now() + api.env.config.limits.resumable.expiryMs + 60_000),
      fix: true,
      checkUsage: false,
    });
    expect(later.objectsWithoutRecord.map((o) => o.key)).toEqual([
      expect.stringContaining(`${org.organization.slug}/.tmp/tus/`),
    ]);
  });

  it('an expired upload answers 410; the scheduled job aborts its multipart upload and removes its objects, no booking left', async () => {
    const org = await api.createOrg();
    const slug = org.organization.slug;
    const created = await create(org, { 'Upload-Length': String(8 * MiB) });
    const url = created.headers.get('location')!;
    // One whole part (a multipart upload open) and a tail.
    const sent = await patch(org, url, 0, pdfOf(8 * MiB).subarray(0, PART + 1000));
    expect(sent.status).toBe(204);
    expect(await api.ctx.store.listIncompleteUploads(`${slug}/`)).toHaveLength(1);
    expect(await api.objectKeys(`${slug}/.tmp/`)).toHaveLength(1);
    // Its expiry moved to the past, as time would (the job's clock is the real one).
    const keys = resumableKeys(api.env.config.queuePrefix);
    const id = url.split('/').pop()!;
    const redis = api.ctx.redis!;
    const state = JSON.parse((await redis.get(keys.state(id)))!) as ResumableState;
    state.expiresAt = Date.now() - 1000;
    await redis.set(keys.state(id), JSON.stringify(state), 'PX', 60_000);
    await redis.zadd(keys.expiries, state.expiresAt, id);
    expect((await head(org, url)).status).toBe(410);
    const worker = await startWorker(api.env.env, {
      WORKER_QUEUES: 'maintenance',
      RESUMABLE_CLEANUP_INTERVAL_MS: '300',
    });
    try {
      await eventually(async () => {
        expect(await api.ctx.store.listIncompleteUploads(`${slug}/`)).toEqual([]);
        expect(await api.objectKeys(`${slug}/.tmp/`)).toEqual([]);
      }, 20_000);
      await eventually(async () => {
        const metrics = await (await fetch(`${worker.opsUrl}/metrics`)).text();
        expect(metrics).toMatch(/media_resumable_expired_cleaned_total [1-9]/);
      });
    } finally {
      await worker.close();
    }
    expect((await head(org, url)).status).toBe(410);
    expect((await patch(org, url, PART + 1000, Buffer.alloc(10))).status).toBe(410);
    // Nothing was booked for it, and nothing is counted.
    const usage = await api.ctx.models.Usage.findById(org.organization.id).lean();
    expect(usage?.pending ?? []).toEqual([]);
    expect(usage?.bytes ?? 0).toBe(0);
  });
});
