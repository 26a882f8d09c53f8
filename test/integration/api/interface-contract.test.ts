/**
 * The interface document's contract, field by field: every endpoint it lists,
 * called the way it shows (multipart on GET for metadata, JSON for base64 and
 * convert), through the real API, worker, Redis, S3 and MongoDB. For each
 * answer it asserts every field the interface gives: its presence or absence,
 * its type and its documented form (see docs/api.md, "The interface, field by
 * field"). Each answer is also checked against api/openapi.yaml. `folderId`
 * is an integer in every answer that carries it (a file in no folder answers
 * its organization's root folder id), and the root folder's id works as a
 * folder id; a merged PDF's name on the file-system store does not tell the
 * server's paths.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { isIP } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../../shared/logger';
import { mergedKey } from '../../../shared/media/naming';
import { createObjectStore } from '../../../shared/storage/create-object-store';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { isolatedEnv } from '../../support/context';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

const PUBLIC_BASE_URL = 'http://media.example.test';
const USER_AGENT = 'interface-contract/1.0 (+jest)';

type Json = Record<string, unknown>;
interface Envelope {
  statusCode: number;
  message: string;
  data: Json;
}

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;
let other: TestOrg;

beforeAll(async () => {
  // Listening like production (dual-stack), so an IPv4 client shows as `::ffff:127.0.0.1`.
  // One token makes every call of this file, more than its default rate budget a minute.
  api = await startApi('contract', { env: { PUBLIC_BASE_URL, RATE_LIMIT_MAX: '0' }, host: '::' });
  worker = await startWorker(api.env.env);
  org = await api.createOrg('acme');
  other = await api.createOrg('globex');
});
afterAll(async () => {
  await worker.close();
  await api.close();
});

const headers = (extra: Record<string, string> = {}) => ({
  ...org.auth,
  'User-Agent': USER_AGENT,
  ...extra,
});

async function call(
  method: string,
  path: string,
  init: { body?: FormData | string; headers?: Record<string, string> } = {},
): Promise<{ status: number; body: Envelope }> {
  const res = await fetch(`${api.url}${path}`, {
    method,
    headers: headers(init.headers),
    body: init.body,
  });
  const body = (await res.json()) as Envelope;
  expectMatchesSpec(method, path.split('?')[0]!, res.status, body, res.headers);
  return { status: res.status, body };
}

/** GET with a multipart body, as the interface shows the metadata request (fetch cannot). */
async function getWithForm(
  path: string,
  form: FormData,
): Promise<{ status: number; body: Envelope }> {
  const encoded = new Response(form);
  const payload = Buffer.from(await encoded.arrayBuffer());
  const url = new URL(`${api.url}${path}`);
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'GET',
        headers: {
          ...headers(),
          'Content-Type': encoded.headers.get('content-type')!,
          'Content-Length': String(payload.length),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Envelope;
          try {
            expectMatchesSpec('GET', path, res.statusCode!, body, res.headers);
            resolve({ status: res.statusCode!, body });
          } catch (err) {
            reject(err instanceof Error ? err : new Error(String(err)));
          }
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

const fileForm = (field: string, files: [Buffer, string][], fields: [string, string][] = []) => {
  const fd = new FormData();
  for (const [name, value] of fields) fd.append(name, value);
  for (const [bytes, name] of files) fd.append(field, new Blob([bytes]), name);
  return fd;
};

/** The envelope: statusCode 200 and message "Success" in the body, whatever the HTTP status. */
function expectEnvelope(body: Envelope): Json {
  expect(Object.keys(body).sort()).toEqual(['data', 'message', 'statusCode']);
  expect(body.statusCode).toBe(200);
  expect(body.message).toBe('Success');
  expect(typeof body.data).toBe('object');
  expect(body.data).not.toBeNull();
  return body.data;
}

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/**
 * Every field of the interface's media record. `folderId`: 'absent' (upload,
 * upload/multiple) or the expected value, an integer (base64, convert,
 * merge-pdfs, and the reads outside the interface).
 */
function expectMediaRecord(
  record: Json,
  expected: {
    folderId: 'absent' | number;
    mimetype: string;
    bytes: number;
    userAgent?: string;
  },
): void {
  expect(Number.isInteger(record.id)).toBe(true);
  expect(record.organizationId).toBe(org.organization.id);
  expect(Number.isInteger(record.organizationId)).toBe(true);
  expect(typeof record.name).toBe('string');
  expect(typeof record.key).toBe('string');
  // url: <host>/media/download?media=<key>, the key as it is.
  expect(record.url).toBe(`${PUBLIC_BASE_URL}/media/download?media=${String(record.key)}`);
  expect(record.bucket).toBe(api.env.bucket);
  expect(record.mimetype).toBe(expected.mimetype);
  expect(typeof record.size).toBe('number');
  expect(record.size).toBeCloseTo(expected.bytes / 1024, 2);
  const metaData = record.metaData as { ipAddress: unknown; userAgent: unknown };
  expect(Object.keys(metaData).sort()).toEqual(['ipAddress', 'userAgent']);
  expect(metaData.userAgent).toBe(expected.userAgent ?? USER_AGENT);
  const ipAddress = String(metaData.ipAddress);
  expect(isIP(ipAddress)).not.toBe(0);
  expect(ipAddress).toBe('::ffff:127.0.0.1');
  if (expected.folderId === 'absent') {
    expect(record).not.toHaveProperty('folderId');
  } else {
    expect(Number.isInteger(record.folderId)).toBe(true);
    expect(record).toHaveProperty('folderId', expected.folderId);
  }
  expect(record.createdAt).toMatch(ISO_MS);
  expect(record.updatedAt).toBe(record.createdAt);
}

/** `<org_slug>/<folder>/<name>-<hash>.<ext>` or `<org_slug>/<name>-<hash>.<ext>`. */
function keyPattern(folder: string | null, name: string, ext: string): RegExp {
  const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(
    `^${esc(org.organization.slug)}/${folder ? `${esc(folder)}/` : ''}${esc(name)}-[A-Za-z0-9_-]+\\.${ext}$`,
  );
}

async function downloadByUrl(record: Json, as: TestOrg = org): Promise<Response> {
  // The record's url, with the test server's address for its host.
  const url = String(record.url).replace(PUBLIC_BASE_URL, api.url);
  return fetch(url, { headers: as.auth });
}

const canon = fixture('Canon_40D.jpg');
const blueSquare = fixture('xmp-BlueSquare.jpg');
const pdf = fixture('minimal-document.pdf');
const pdf4 = fixture('pdflatex-4-pages.pdf');

describe('POST /media/upload', () => {
  it('answers one media record without folderId, in the envelope', async () => {
    const { status, body } = await call('POST', '/media/upload', {
      body: fileForm('file', [[canon, 'Canon_40D.jpg']]),
    });
    expect(status).toBe(201);
    const record = expectEnvelope(body);
    expectMediaRecord(record, { folderId: 'absent', mimetype: 'image/jpeg', bytes: canon.length });
    expect(record.name).toBe('Canon_40D.jpg');
    expect(record.key).toMatch(keyPattern(null, 'Canon_40D', 'jpe?g'));
    const res = await downloadByUrl(record);
    expect(res.status).toBe(200);
    expect(Buffer.from(await res.arrayBuffer()).equals(canon)).toBe(true);
  });

  it('puts the folder in the key (folder, then folderId naming it)', async () => {
    const first = await call('POST', '/media/upload', {
      body: fileForm('file', [[canon, 'Canon_40D.jpg']], [['folder', 'Avatars']]),
    });
    const record = expectEnvelope(first.body);
    expectMediaRecord(record, { folderId: 'absent', mimetype: 'image/jpeg', bytes: canon.length });
    expect(record.key).toMatch(keyPattern('avatars', 'Canon_40D', 'jpe?g'));
    const folder = await api.ctx.models.Folder.findOne({
      organizationId: org.organization.id,
      name: 'Avatars',
    }).lean();
    const second = await call('POST', '/media/upload', {
      body: fileForm('file', [[canon, 'Canon_40D.jpg']], [['folderId', String(folder!.id)]]),
    });
    const again = expectEnvelope(second.body);
    expectMediaRecord(again, { folderId: 'absent', mimetype: 'image/jpeg', bytes: canon.length });
    expect(again.key).toMatch(keyPattern('avatars', 'Canon_40D', 'jpe?g'));
    // folderId is stored on the record all the same.
    const stored = await api.ctx.models.Media.findOne({ id: Number(again.id) }).lean();
    expect(stored?.folderId).toBe(folder!.id);
  });

  it('keeps an empty userAgent when the request sends none', async () => {
    const form = new Response(fileForm('file', [[canon, 'Canon_40D.jpg']]));
    const payload = Buffer.from(await form.arrayBuffer());
    const body = await new Promise<Envelope>((resolve, reject) => {
      const req = request(
        `${api.url}/media/upload`,
        {
          method: 'POST',
          headers: {
            ...org.auth,
            'Content-Type': form.headers.get('content-type')!,
            'Content-Length': String(payload.length),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve(JSON.parse(Buffer.concat(chunks).toString()) as Envelope));
        },
      );
      req.on('error', reject);
      req.end(payload);
    });
    expectMediaRecord(expectEnvelope(body), {
      folderId: 'absent',
      mimetype: 'image/jpeg',
      bytes: canon.length,
      userAgent: '',
    });
  });
});

describe('POST /media/upload/multiple', () => {
  it('answers 201 with data.media, one record per file, without folderId', async () => {
    const { status, body } = await call('POST', '/media/upload/multiple?files=2', {
      body: fileForm(
        'files',
        [
          [canon, 'Canon_40D.jpg'],
          [pdf, 'minimal-document.pdf'],
        ],
        [['folderId', '']],
      ),
    });
    expect(status).toBe(201);
    const data = expectEnvelope(body);
    expect(Object.keys(data)).toEqual(['media']);
    const media = data.media as Json[];
    expect(Array.isArray(media)).toBe(true);
    expect(media).toHaveLength(2);
    const byName = new Map(media.map((m) => [m.name, m]));
    expectMediaRecord(byName.get('Canon_40D.jpg')!, {
      folderId: 'absent',
      mimetype: 'image/jpeg',
      bytes: canon.length,
    });
    expectMediaRecord(byName.get('minimal-document.pdf')!, {
      folderId: 'absent',
      mimetype: 'application/pdf',
      bytes: pdf.length,
    });
    expect(byName.get('minimal-document.pdf')!.key).toMatch(
      keyPattern(null, 'minimal-document', 'pdf'),
    );
  });
});

describe('POST /media/upload/base64', () => {
  it('answers one record with folderId; the detected type wins over the declared one', async () => {
    const { status, body } = await call('POST', '/media/upload/base64', {
      body: JSON.stringify({
        file: `data:image/png;base64,${canon.toString('base64')}`,
        mimetype: 'image/png',
        folder: 'Uploads',
      }),
      headers: { 'Content-Type': 'application/json' },
    });
    expect(status).toBe(201);
    const record = expectEnvelope(body);
    const folder = await api.ctx.models.Folder.findOne({
      organizationId: org.organization.id,
      name: 'Uploads',
    }).lean();
    expectMediaRecord(record, {
      folderId: folder!.id,
      mimetype: 'image/jpeg',
      bytes: canon.length,
    });
    expect(record.key).toMatch(keyPattern('uploads', 'file', 'jpe?g'));
  });

  it("answers the organization's root folder id as folderId when no folder is given", async () => {
    const { body } = await call('POST', '/media/upload/base64', {
      body: JSON.stringify({ file: `data:application/pdf;base64,${pdf.toString('base64')}` }),
      headers: { 'Content-Type': 'application/json' },
    });
    const record = expectEnvelope(body);
    expectMediaRecord(record, {
      folderId: org.organization.rootFolderId,
      mimetype: 'application/pdf',
      bytes: pdf.length,
    });
    // The key keeps the form without a folder segment.
    expect(record.key).toMatch(keyPattern(null, 'file', 'pdf'));
  });
});

describe('GET /media/metadata', () => {
  it('answers the image metadata record for a multipart mediaKey, Buffers as Buffer objects', async () => {
    const upload = await call('POST', '/media/upload', {
      body: fileForm('file', [[blueSquare, 'xmp-BlueSquare.jpg']]),
    });
    const key = String(expectEnvelope(upload.body).key);
    const form = new FormData();
    form.append('mediaKey', key);
    const { status, body } = await getWithForm('/media/metadata', form);
    expect(status).toBe(200);
    const meta = expectEnvelope(body);
    expect(meta).toMatchObject({
      format: 'jpeg',
      size: blueSquare.length,
      width: 360,
      height: 216,
      space: 'srgb',
      channels: 3,
      depth: 'uchar',
      density: 72,
      isProgressive: false,
      resolutionUnit: 'inch',
      hasProfile: true,
      hasAlpha: false,
    });
    for (const field of ['size', 'width', 'height', 'channels', 'density']) {
      expect([field, Number.isInteger(meta[field])]).toEqual([field, true]);
    }
    expect(meta.chromaSubsampling).toMatch(/^\d:\d:\d$/);
    for (const field of ['isProgressive', 'hasProfile', 'hasAlpha']) {
      expect([field, typeof meta[field]]).toEqual([field, 'boolean']);
    }
    for (const field of ['exif', 'iptc', 'xmp']) {
      const buffer = meta[field] as { type: unknown; data: unknown };
      expect([field, Object.keys(buffer).sort()]).toEqual([field, ['data', 'type']]);
      expect(buffer.type).toBe('Buffer');
      const data = buffer.data as number[];
      expect(data.length).toBeGreaterThan(0);
      expect(data.every((b) => Number.isInteger(b) && b >= 0 && b <= 255)).toBe(true);
    }
    // xmp is the XML text as bytes.
    expect(Buffer.from((meta.xmp as { data: number[] }).data).toString('utf8')).toContain(
      '<x:xmpmeta',
    );
  });

  it("takes mediaKey from the query whatever the Content-Type says (a browser's fetch)", async () => {
    const upload = await call('POST', '/media/upload', {
      body: fileForm('file', [[blueSquare, 'xmp-BlueSquare.jpg']]),
    });
    const key = String(expectEnvelope(upload.body).key);
    const path = `/media/metadata?mediaKey=${encodeURIComponent(key)}`;
    for (const contentType of [
      'multipart/form-data',
      'multipart/form-data; boundary=----unused',
      'application/json',
      undefined,
    ]) {
      const { status, body } = await call('GET', path, {
        headers: contentType ? { 'Content-Type': contentType } : {},
      });
      expect([contentType, status]).toEqual([contentType, 200]);
      expect(expectEnvelope(body)).toMatchObject({ format: 'jpeg', width: 360, height: 216 });
    }
  });
});

describe('POST /media/convert', () => {
  it('answers a record with folderId, the source name kept, the key and url with the new extension', async () => {
    const upload = await call('POST', '/media/upload', {
      body: fileForm('file', [[blueSquare, 'xmp-BlueSquare.jpg']], [['folder', 'Avatars']]),
    });
    const source = expectEnvelope(upload.body);
    const { status, body } = await call('POST', '/media/convert', {
      body: JSON.stringify({ mediaKey: source.key, format: 'png' }),
      headers: { 'Content-Type': 'application/json' },
    });
    expect(status).toBe(201);
    const record = expectEnvelope(body);
    const stored = await api.ctx.models.Media.findOne({ id: Number(source.id) }).lean();
    const res = await downloadByUrl(record);
    const bytes = Buffer.from(await res.arrayBuffer());
    expectMediaRecord(record, {
      folderId: stored!.folderId!,
      mimetype: 'image/png',
      bytes: bytes.length,
    });
    expect(record.name).toBe('xmp-BlueSquare.jpg');
    expect(record.key).toMatch(keyPattern('avatars', 'xmp-BlueSquare', 'png'));
    expect(String(record.url).endsWith('.png')).toBe(true);
  });

  it('converts to jpeg, the interface example', async () => {
    const upload = await call('POST', '/media/upload', {
      body: fileForm('file', [[fixture('tiff-BSG1.tiff'), 'BSG1.tiff']]),
    });
    const { status, body } = await call('POST', '/media/convert', {
      body: JSON.stringify({ mediaKey: expectEnvelope(upload.body).key, format: 'jpeg' }),
      headers: { 'Content-Type': 'application/json' },
    });
    expect(status).toBe(201);
    const record = expectEnvelope(body);
    expect(record.mimetype).toBe('image/jpeg');
    expect(record.name).toBe('BSG1.tiff');
    expect(record.key).toMatch(keyPattern(null, 'BSG1', 'jpe?g'));
    expect(record).toHaveProperty('folderId', org.organization.rootFolderId);
  });
});

describe('POST /media/merge-pdfs', () => {
  it('answers a PDF record with folderId, key merged_<timestamp>.pdf and name the object address', async () => {
    const stored = expectEnvelope(
      (await call('POST', '/media/upload', { body: fileForm('file', [[pdf4, 'four.pdf']]) })).body,
    );
    const before = Date.now();
    const fd = fileForm('files', [[pdf, 'one.pdf']], [['folder', 'Contracts']]);
    fd.append('mediaKeys', String(stored.key));
    const { status, body } = await call('POST', '/media/merge-pdfs', { body: fd });
    expect(status).toBe(201);
    const record = expectEnvelope(body);
    const res = await downloadByUrl(record);
    expect(res.status).toBe(200);
    const bytes = Buffer.from(await res.arrayBuffer());
    const folder = await api.ctx.models.Folder.findOne({
      organizationId: org.organization.id,
      name: 'Contracts',
    }).lean();
    expectMediaRecord(record, {
      folderId: folder!.id,
      mimetype: 'application/pdf',
      bytes: bytes.length,
    });
    expect(record.key).toMatch(/^merged_\d{13}\.pdf$/);
    const timestamp = Number(/^merged_(\d+)\.pdf$/.exec(String(record.key))![1]);
    expect(timestamp).toBeGreaterThanOrEqual(before - 1000);
    expect(timestamp).toBeLessThanOrEqual(Date.now());
    expect(record.name).toBe(
      `${api.env.config.s3!.endpoint}/${api.env.bucket}/${String(record.key)}`,
    );
    expect(bytes.subarray(0, 5).toString('latin1')).toBe('%PDF-');

    // The key has no organization in it: tenancy comes from the record.
    const foreign = await downloadByUrl(record, other);
    expect(foreign.status).toBe(404);
    const fd2 = new FormData();
    fd2.append('mediaKeys', String(record.key));
    const res2 = await fetch(`${api.url}/media/merge-pdfs`, {
      method: 'POST',
      headers: other.auth,
      body: fd2,
    });
    expect(res2.status).toBe(404);
  });

  it('gives concurrent merges different keys', async () => {
    const merges = await Promise.all(
      [0, 1, 2].map(() =>
        call('POST', '/media/merge-pdfs', { body: fileForm('files', [[pdf, 'one.pdf']]) }),
      ),
    );
    const records = merges.map(({ body }) => expectEnvelope(body));
    for (const record of records) {
      expect(record).toHaveProperty('folderId', org.organization.rootFolderId);
    }
    const keys = records.map((record) => String(record.key));
    expect(new Set(keys).size).toBe(3);
    for (const key of keys) expect(key).toMatch(/^merged_\d{13}\.pdf$/);
  });

  it('takes the next free millisecond when another merge holds one, and gives a retry its key back', async () => {
    const ms = 1_700_000_000_000 + Math.floor(Math.random() * 1e9);
    const claims = await Promise.all(
      ['a', 'b', 'c', 'd'].map((job) =>
        api.ctx.media.claimKey(`pdf-claim-${job}-${ms}`, org.organization.id, ms, mergedKey),
      ),
    );
    expect([...claims].sort()).toEqual([0, 1, 2, 3].map((i) => mergedKey(ms + i)));
    // Another attempt of the same job: the same key.
    expect(
      await api.ctx.media.claimKey(`pdf-claim-b-${ms}`, org.organization.id, ms + 50, mergedKey),
    ).toBe(claims[1]);
    await api.ctx.models.KeyClaim.deleteMany({ jobId: { $regex: `^pdf-claim-.*-${ms}$` } });
  });
});

describe('folderId outside the interface answers, and the root folder', () => {
  const rootId = () => org.organization.rootFolderId;
  const base64 = (fields: Json) =>
    call('POST', '/media/upload/base64', {
      body: JSON.stringify({
        file: `data:image/jpeg;base64,${canon.toString('base64')}`,
        ...fields,
      }),
      headers: { 'Content-Type': 'application/json' },
    });

  it('every listed and read record carries an integer folderId', async () => {
    const inRoot = expectEnvelope(
      (await call('POST', '/media/upload', { body: fileForm('file', [[canon, 'root.jpg']]) })).body,
    );
    const inFolder = expectEnvelope((await base64({ name: 'albums.jpg', folder: 'Albums' })).body);
    const listed = expectEnvelope((await call('GET', '/media?limit=1000')).body).media as Json[];
    expect(listed.length).toBeGreaterThanOrEqual(2);
    for (const record of listed) expect(Number.isInteger(record.folderId)).toBe(true);
    const byId = new Map(listed.map((r) => [r.id, r]));
    expect(byId.get(inRoot.id)).toHaveProperty('folderId', rootId());
    expect(byId.get(inFolder.id)).toHaveProperty('folderId', inFolder.folderId);
    expect(inFolder.folderId).not.toBe(rootId());

    for (const path of [
      `/media/record?media=${String(inRoot.key)}`,
      `/media/${String(inRoot.id)}`,
    ]) {
      const { status, body } = await call('GET', path);
      expect(status).toBe(200);
      expect(expectEnvelope(body)).toHaveProperty('folderId', rootId());
    }
    // A delete answers the deleted record, with its folderId too.
    const deleted = await call('DELETE', `/media/${String(inFolder.id)}`);
    expect(deleted.status).toBe(200);
    expect(expectEnvelope(deleted.body)).toHaveProperty('folderId', inFolder.folderId);
    const gone = await call('DELETE', `/media/record?media=${String(inRoot.key)}`);
    expect(gone.status).toBe(200);
    expect(expectEnvelope(gone.body)).toHaveProperty('folderId', rootId());
  });

  it("a job's status URL answers the record with an integer folderId", async () => {
    const source = expectEnvelope(
      (await call('POST', '/media/upload', { body: fileForm('file', [[canon, 'later.jpg']]) }))
        .body,
    );
    const queued = await call('POST', '/media/convert', {
      body: JSON.stringify({ mediaKey: source.key, format: 'webp' }),
      headers: { 'Content-Type': 'application/json', Prefer: 'respond-async' },
    });
    expect(queued.status).toBe(202);
    const jobId = String((queued.body.data as { jobId: string }).jobId);
    const done = await eventually(async () => {
      const answer = await call('GET', `/media/jobs/${jobId}`);
      expect(answer.status).toBe(200);
      return expectEnvelope(answer.body);
    }, 20_000);
    expect(done).toHaveProperty('folderId', rootId());
    expect(done.key).toMatch(keyPattern(null, 'later', 'webp'));
  });

  it('folders list the root folder apart, with its integer id', async () => {
    const { status, body } = await call('GET', '/media/folders');
    expect(status).toBe(200);
    const data = expectEnvelope(body) as { folders: Json[]; root: Json };
    expect(data.root).toEqual({
      id: rootId(),
      files: expect.any(Number) as number,
      bytes: expect.any(Number) as number,
    });
    expect(data.folders.length).toBeGreaterThan(0);
    for (const folder of data.folders) {
      expect(Number.isInteger(folder.id)).toBe(true);
      expect(folder.id).not.toBe(rootId());
    }
  });

  it('takes the root folder id as a folder id: no folder in the key, listed with the files in no folder', async () => {
    const viaForm = expectEnvelope(
      (
        await call('POST', '/media/upload', {
          body: fileForm('file', [[canon, 'rooted.jpg']], [['folderId', String(rootId())]]),
        })
      ).body,
    );
    expect(viaForm.key).toMatch(keyPattern(null, 'rooted', 'jpe?g'));
    const viaJson = expectEnvelope((await base64({ name: 'rooted.jpg', folderId: rootId() })).body);
    expect(viaJson).toHaveProperty('folderId', rootId());
    expect(viaJson.key).toMatch(keyPattern(null, 'rooted', 'jpe?g'));
    const merged = await call('POST', '/media/merge-pdfs', {
      body: fileForm('files', [[pdf, 'one.pdf']], [['folderId', String(rootId())]]),
    });
    expect(merged.status).toBe(201);
    expect(expectEnvelope(merged.body)).toHaveProperty('folderId', rootId());

    const inFolder = expectEnvelope((await base64({ name: 'kept.jpg', folder: 'Kept' })).body);
    const listed = expectEnvelope(
      (await call('GET', `/media?folderId=${rootId()}&limit=1000`)).body,
    ).media as Json[];
    const ids = listed.map((r) => r.id);
    expect(ids).toEqual(expect.arrayContaining([viaForm.id, viaJson.id]));
    expect(ids).not.toContain(inFolder.id);
    for (const record of listed) expect(record).toHaveProperty('folderId', rootId());

    // The root folder has no name: a folder name beside its id names another folder.
    const mismatch = await call('POST', '/media/upload', {
      body: fileForm(
        'file',
        [[canon, 'x.jpg']],
        [
          ['folderId', String(rootId())],
          ['folder', 'Kept'],
        ],
      ),
    });
    expect(mismatch.status).toBe(400);
    expect(mismatch.body).toMatchObject({ error: 'FOLDER_MISMATCH' });
  });

  it('refuses to read, rename or delete the root folder as a folder (409 ROOT_FOLDER)', async () => {
    for (const [method, body] of [
      ['GET', undefined],
      ['PATCH', JSON.stringify({ name: 'Renamed' })],
      ['DELETE', undefined],
    ] as const) {
      const answer = await call(method, `/media/folders/${rootId()}`, {
        ...(body ? { body, headers: { 'Content-Type': 'application/json' } } : {}),
      });
      expect([method, answer.status]).toEqual([method, 409]);
      expect(answer.body).toMatchObject({ statusCode: 409, error: 'ROOT_FOLDER' });
    }
    // Its files are still there.
    const listed = await call('GET', `/media?folderId=${rootId()}&limit=1`);
    expect((expectEnvelope(listed.body).media as Json[]).length).toBe(1);
  });

  it('gives an organization made before root folders one, once, on its first read', async () => {
    const legacy = await api.createOrg('legacy');
    await api.ctx.models.Organization.updateOne(
      { id: legacy.organization.id },
      { $unset: { rootFolderId: 1 } },
    );
    const upload = () =>
      fetch(`${api.url}/media/upload/base64`, {
        method: 'POST',
        headers: { ...legacy.auth, 'Content-Type': 'application/json' },
        body: JSON.stringify({ file: `data:application/pdf;base64,${pdf.toString('base64')}` }),
      }).then(async (res) => ({ status: res.status, body: (await res.json()) as Envelope }));
    const answers = await Promise.all([upload(), upload()]);
    const stored = await api.ctx.models.Organization.findOne({
      id: legacy.organization.id,
    }).lean();
    expect(Number.isInteger(stored?.rootFolderId)).toBe(true);
    for (const answer of answers) {
      expect(answer.status).toBe(201);
      expect(answer.body.data).toHaveProperty('folderId', stored!.rootFolderId);
    }
  });
});

describe('The file-system store', () => {
  it("answers a merged PDF's name without the server's storage path", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'contract-fs-'));
    const storageDir = join(dir, 'private-storage-dir');
    // The same environment as the other tests, without S3: the store is the file system.
    const { env, config } = isolatedEnv('contract-fs', {
      S3_ENDPOINT: '',
      STORAGE_DIR: storageDir,
    });
    const store = createObjectStore(config, createLogger({ level: 'silent' }));
    // (Its own store: startApi leaves the store and the database, named here, to this test.)
    const fsApi = await startApi('contract-fs', { env, store });
    const fsWorker = await startWorker(env);
    try {
      const acme = await fsApi.createOrg('files');
      const fd = fileForm('files', [[pdf, 'one.pdf']]);
      const res = await fetch(`${fsApi.url}/media/merge-pdfs`, {
        method: 'POST',
        headers: acme.auth,
        body: fd,
      });
      const text = await res.text();
      expect(res.status).toBe(201);
      expect(text).not.toContain(dir);
      expect(text).not.toContain('private-storage-dir');
      const record = (JSON.parse(text) as Envelope).data;
      expect(record.name).toBe(`file:///${String(record.bucket)}/${String(record.key)}`);
      expect(record).toHaveProperty('folderId', acme.organization.rootFolderId);
      // The bytes are where the store keeps them, and downloadable through url.
      const download = await fetch(String(record.url).replace(/^https?:\/\/[^/]+/, fsApi.url), {
        headers: acme.auth,
      });
      expect(download.status).toBe(200);
      expect(
        Buffer.from(await download.arrayBuffer())
          .subarray(0, 5)
          .toString('latin1'),
      ).toBe('%PDF-');
    } finally {
      await fsWorker.close();
      await fsApi.ctx.connection.dropDatabase();
      await fsApi.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('Authentication', () => {
  it('requires the bearer header on every operation', async () => {
    for (const [method, path] of [
      ['POST', '/media/upload'],
      ['POST', '/media/upload/multiple'],
      ['POST', '/media/upload/base64'],
      ['GET', '/media/metadata'],
      ['POST', '/media/convert'],
      ['POST', '/media/merge-pdfs'],
      ['GET', '/media/download?media=x'],
    ] as const) {
      const res = await fetch(`${api.url}${path}`, { method });
      expect([method, path, res.status]).toEqual([method, path, 401]);
    }
  });
});

describe('TRUST_PROXY', () => {
  it('counts a forwarded address only from a trusted proxy', async () => {
    const trusting = await startApi('contract-proxy', { env: { TRUST_PROXY: 'loopback' } });
    try {
      const acme = await trusting.createOrg('proxied');
      const send = async (on: TestApi, auth: TestOrg['auth']) => {
        const res = await fetch(`${on.url}/media/upload`, {
          method: 'POST',
          headers: { ...auth, 'X-Forwarded-For': '203.0.113.7' },
          body: fileForm('file', [[canon, 'Canon_40D.jpg']]),
        });
        return ((await res.json()) as Envelope).data.metaData as { ipAddress: string };
      };
      expect((await send(trusting, acme.auth)).ipAddress).toBe('203.0.113.7');
      // Off by default: the socket's address, whatever the header says.
      expect((await send(api, org.auth)).ipAddress).toBe('::ffff:127.0.0.1');
    } finally {
      await trusting.close();
    }
  });
});
