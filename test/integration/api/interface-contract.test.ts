/**
 * The interface document's contract, field by field: every endpoint it lists,
 * called the way it shows (multipart on GET for metadata, JSON for base64 and
 * convert), through the real API, worker, Redis, S3 and MongoDB. For each
 * answer it asserts every field the interface gives: its presence or absence,
 * its type and its documented form (see docs/api.md, "The interface, field by
 * field"). Each answer is also checked against api/openapi.yaml.
 */
import { request } from 'node:http';
import { isIP } from 'node:net';
import { mergedKey } from '../../../shared/media/naming';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
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
  api = await startApi('contract', { env: { PUBLIC_BASE_URL }, host: '::' });
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
 * upload/multiple) or the expected value (base64, convert, merge-pdfs).
 */
function expectMediaRecord(
  record: Json,
  expected: {
    folderId: 'absent' | number | null;
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

  it('answers folderId null when no folder is given', async () => {
    const { body } = await call('POST', '/media/upload/base64', {
      body: JSON.stringify({ file: `data:application/pdf;base64,${pdf.toString('base64')}` }),
      headers: { 'Content-Type': 'application/json' },
    });
    expectMediaRecord(expectEnvelope(body), {
      folderId: null,
      mimetype: 'application/pdf',
      bytes: pdf.length,
    });
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
      folderId: stored!.folderId,
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
    expect(record).toHaveProperty('folderId', null);
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
    const keys = merges.map(({ body }) => String(expectEnvelope(body).key));
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
