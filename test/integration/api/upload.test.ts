/**
 * The upload and download endpoints end to end over real HTTP, real S3 and
 * real MongoDB: what the client gets back, what it can download, and what is
 * left in the bucket and the database.
 */
import { randomBytes } from 'node:crypto';
import { parse as parseDisposition } from 'content-disposition';
import sharp from 'sharp';
import type { MediaView as Media } from '../../../api/domain/media-view';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { fixture, form, sha256 } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';

type Envelope<T> = { statusCode: number; message: string; data: T };

let api: TestApi;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('upload');
  org = await api.createOrg('acme');
});
afterAll(() => api.close());

async function post<T>(path: string, body: FormData | object, auth = org.auth) {
  const isForm = body instanceof FormData;
  const res = await fetch(`${api.url}${path}`, {
    method: 'POST',
    headers: isForm ? auth : { ...auth, 'Content-Type': 'application/json' },
    body: isForm ? body : JSON.stringify(body),
  });
  const json = (await res.json()) as T;
  expectMatchesSpec('POST', path.split('?')[0]!, res.status, json, res.headers);
  return { res, body: json };
}

async function download(key: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${api.url}/media/download?media=${encodeURIComponent(key)}`, {
    headers: { ...org.auth, ...headers },
  });
  const json = res.headers.get('content-type')?.startsWith('application/json')
    ? await res.clone().json()
    : undefined;
  expectMatchesSpec('GET', '/media/download', res.status, json, res.headers);
  return res;
}

/** The record in MongoDB and the object in the bucket agree with the response. */
async function expectStored(media: Media, bytes: Buffer) {
  const record = await api.ctx.models.Media.findOne({ id: media.id }).lean();
  expect(record).toMatchObject({
    organizationId: media.organizationId,
    // Upload answers carry no folderId (the interface's form); base64 answers do, the
    // root folder's id for a file in no folder (kept as none on the record).
    ...('folderId' in media
      ? { folderId: media.folderId === org.organization.rootFolderId ? null : media.folderId }
      : {}),
    key: media.key,
    name: media.name,
    mimetype: media.mimetype,
    bytes: bytes.length,
    checksum: sha256(bytes),
  });
  const stat = await api.ctx.store.stat(media.key);
  expect(stat?.size).toBe(bytes.length);
  const res = await download(media.key);
  expect(res.status).toBe(200);
  expect(Buffer.from(await res.arrayBuffer()).equals(bytes)).toBe(true);
}

describe('POST /media/upload', () => {
  it('stores a JPEG and answers 201 with the complete record', async () => {
    const bytes = fixture('Canon_40D.jpg');
    const { res, body } = await post<Envelope<Media>>(
      '/media/upload',
      form([['file', bytes, 'Canon 40D.jpg']]),
    );
    expect(res.status).toBe(201);
    expect(body.statusCode).toBe(200);
    expect(body.message).toBe('Success');
    const media = body.data;
    expect(media).not.toHaveProperty('folderId');
    expect(media).toMatchObject({
      organizationId: org.organization.id,
      name: 'Canon 40D.jpg',
      mimetype: 'image/jpeg',
      bytes: bytes.length,
      size: Math.round((bytes.length / 1024) * 100) / 100,
      checksum: sha256(bytes),
    });
    expect(media.key).toMatch(/^acme\/Canon-40D-[A-Za-z0-9_-]{12}\.jpg$/);
    expect(media.url).toBe(`${api.env.config.publicBaseUrl}/media/download?media=${media.key}`);
    expect(Number.isInteger(media.id)).toBe(true);
    await expectStored(media, bytes);
  });

  it('decides the type from the bytes, not from the name or declared type', async () => {
    const bytes = fixture('minimal-document.pdf');
    const fd = new FormData();
    fd.append('file', new Blob([bytes], { type: 'image/png' }), 'picture.png');
    const { res, body } = await post<Envelope<Media>>('/media/upload', fd);
    expect(res.status).toBe(201);
    expect(body.data.mimetype).toBe('application/pdf');
    expect(body.data.name).toBe('picture.png');
    expect(body.data.key).toMatch(/^acme\/picture-[A-Za-z0-9_-]{12}\.pdf$/);
    await expectStored(body.data, bytes);
  });

  it('puts the file in a folder named before the file part, creating it once', async () => {
    const bytes = fixture('xmp-BlueSquare.jpg');
    const first = await post<Envelope<Media>>(
      '/media/upload',
      form([
        ['folder', 'Holiday Photos'],
        ['file', bytes, 'blue.jpg'],
      ]),
    );
    expect(first.res.status).toBe(201);
    expect(first.body.data.key).toMatch(/^acme\/holiday-photos\/blue-[A-Za-z0-9_-]{12}\.jpg$/);
    expect(first.body.data).not.toHaveProperty('folderId');
    const folder = await api.ctx.models.Folder.findOne({
      organizationId: org.organization.id,
      name: 'Holiday Photos',
    }).lean();
    const folderId = folder!.id;
    expect(Number.isInteger(folderId)).toBe(true);

    // The same folder by id, and by name again after the file part (stored without a folder, then moved).
    const byId = await post<Envelope<Media>>(
      '/media/upload',
      form([
        ['folderId', String(folderId)],
        ['file', bytes, 'blue.jpg'],
      ]),
    );
    const after = await post<Envelope<Media>>(
      '/media/upload',
      form([
        ['file', bytes, 'blue.jpg'],
        ['folder', 'Holiday Photos'],
      ]),
    );
    for (const r of [byId, after]) {
      expect(r.res.status).toBe(201);
      expect(r.body.data).not.toHaveProperty('folderId');
      expect((await api.ctx.models.Media.findOne({ id: r.body.data.id }).lean())?.folderId).toBe(
        folderId,
      );
      expect(r.body.data.key).toMatch(/^acme\/holiday-photos\/blue-/);
      await expectStored(r.body.data, bytes);
    }
    expect(
      await api.ctx.models.Folder.countDocuments({ organizationId: org.organization.id }),
    ).toBe(1);
    // Nothing is left at the folder-less key the last file first streamed to.
    expect(await api.objectKeys('acme/blue-')).toEqual([]);
  });

  it.each([
    ['heic-samplefilehub.heif', 'image/heic', 'heic'],
    ['tiff-BSG1.tiff', 'image/tiff', 'tiff'],
  ])('accepts %s as %s', async (file, mime, ext) => {
    const bytes = fixture(file);
    const { res, body } = await post<Envelope<Media>>(
      '/media/upload',
      form([['file', bytes, file]]),
    );
    expect(res.status).toBe(201);
    expect(body.data.mimetype).toBe(mime);
    expect(body.data.key.endsWith(`.${ext}`)).toBe(true);
    await expectStored(body.data, bytes);
  });

  it.each(['png', 'webp', 'gif', 'avif'] as const)('accepts a %s image', async (format) => {
    const bytes = await sharp({
      create: { width: 8, height: 8, channels: 3, background: '#3366ff' },
    })
      .toFormat(format)
      .toBuffer();
    const { res, body } = await post<Envelope<Media>>(
      '/media/upload',
      form([['file', bytes, `tiny.${format}`]]),
    );
    expect(res.status).toBe(201);
    expect(body.data.mimetype).toBe(`image/${format}`);
    expect(body.data.key).toMatch(new RegExp(`^acme/tiny-[A-Za-z0-9_-]{12}\\.${format}$`));
    await expectStored(body.data, bytes);
  });
  it('streams a file larger than one storage part and reads back the same bytes', async () => {
    // 25 MB: four 8 MiB parts, the last one short, chunk boundaries everywhere.
    const bytes = Buffer.concat([fixture('Canon_40D.jpg'), randomBytes(25 * 1024 * 1024)]);
    const { res, body } = await post<Envelope<Media>>(
      '/media/upload',
      form([['file', bytes, 'big.jpg']]),
    );
    expect(res.status).toBe(201);
    expect(body.data.bytes).toBe(bytes.length);
    expect(body.data.checksum).toBe(sha256(bytes));
    await expectStored(body.data, bytes);
  });
});

describe('POST /media/upload/multiple', () => {
  it('stores every file and answers 201 with complete records', async () => {
    const files = [
      ['Canon_40D.jpg', fixture('Canon_40D.jpg')],
      ['minimal-document.pdf', fixture('minimal-document.pdf')],
      ['orientation-landscape_6.jpg', fixture('orientation-landscape_6.jpg')],
    ] as const;
    const { res, body } = await post<Envelope<{ media: Media[] }>>(
      '/media/upload/multiple?files=3',
      form([['folder', 'batch'], ...files.map(([n, b]) => ['files', b, n] as const)]),
    );
    expect(res.status).toBe(201);
    expect(body.data.media).toHaveLength(3);
    const byName = new Map(body.data.media.map((m) => [m.name, m]));
    for (const [name, bytes] of files) {
      const media = byName.get(name)!;
      expect(media).toBeDefined();
      expect(media.key).toMatch(/^acme\/batch\//);
      await expectStored(media, bytes);
    }
    expect(new Set(body.data.media.map((m) => m.id)).size).toBe(3);
  });
});

describe('POST /media/upload/base64', () => {
  it('stores a data URL; the detected type wins over the declared one', async () => {
    const bytes = fixture('Canon_40D.jpg');
    const { res, body } = await post<Envelope<Media>>('/media/upload/base64', {
      file: `data:image/png;base64,${bytes.toString('base64')}`,
      mimetype: 'image/png',
      name: 'camera.png',
      folder: 'inbox',
    });
    expect(res.status).toBe(201);
    expect(body.data).toMatchObject({ name: 'camera.png', mimetype: 'image/jpeg' });
    expect(body.data.key).toMatch(/^acme\/inbox\/camera-[A-Za-z0-9_-]{12}\.jpg$/);
    await expectStored(body.data, bytes);
  });

  it('names the file "file" when no name is given', async () => {
    const bytes = fixture('minimal-document.pdf');
    const { res, body } = await post<Envelope<Media>>('/media/upload/base64', {
      file: `data:application/pdf;base64,${bytes.toString('base64')}`,
    });
    expect(res.status).toBe(201);
    expect(body.data.name).toBe('file');
    expect(body.data.key).toMatch(/^acme\/file-[A-Za-z0-9_-]{12}\.pdf$/);
    await expectStored(body.data, bytes);
  });
});

describe('GET /media/download', () => {
  let media: Media;
  const bytes = fixture('tiff-BSG1.tiff');

  beforeAll(async () => {
    const { body } = await post<Envelope<Media>>(
      '/media/upload',
      form([['file', bytes, 'Ünïcödé "quoted" name;.tiff']]),
    );
    media = body.data;
  });

  it('sends the bytes with type, length, validators and the record name', async () => {
    const res = await download(media.key);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('image/tiff');
    expect(res.headers.get('content-length')).toBe(String(bytes.length));
    expect(res.headers.get('etag')).toBe(`"${media.checksum.slice('sha256:'.length)}"`);
    expect(new Date(res.headers.get('last-modified')!).getTime()).toBeGreaterThan(0);
    const disposition = res.headers.get('content-disposition')!;
    expect(disposition).toMatch(/^attachment; filename="/);
    // What a browser or client library makes of the header is the record's name.
    expect(parseDisposition(disposition)).toMatchObject({
      type: 'attachment',
      parameters: { filename: media.name },
    });
    expect(media.name).toBe('Ünïcödé %22quoted%22 name;.tiff'); // FormData sends " as %22
    expect(Buffer.from(await res.arrayBuffer()).equals(bytes)).toBe(true);
  });

  it('answers a Range with 206 and exactly those bytes', async () => {
    const res = await download(media.key, { Range: 'bytes=100-1099' });
    expect(res.status).toBe(206);
    expect(res.headers.get('content-range')).toBe(`bytes 100-1099/${bytes.length}`);
    expect(res.headers.get('content-length')).toBe('1000');
    expect(Buffer.from(await res.arrayBuffer()).equals(bytes.subarray(100, 1100))).toBe(true);

    const suffix = await download(media.key, { Range: 'bytes=-10' });
    expect(suffix.status).toBe(206);
    expect(Buffer.from(await suffix.arrayBuffer()).equals(bytes.subarray(bytes.length - 10))).toBe(
      true,
    );
  });

  it('answers an unsatisfiable Range with 416', async () => {
    const res = await download(media.key, { Range: `bytes=${bytes.length + 10}-` });
    expect(res.status).toBe(416);
    expect(res.headers.get('content-range')).toBe(`bytes */${bytes.length}`);
    expect(((await res.json()) as { error: string }).error).toBe('RANGE_NOT_SATISFIABLE');
  });

  it('answers a matching If-None-Match with 304 and no body', async () => {
    const etag = (await download(media.key)).headers.get('etag')!;
    const res = await download(media.key, { 'If-None-Match': `W/${etag}, "other"` });
    expect(res.status).toBe(304);
    expect(res.headers.get('etag')).toBe(etag);
    expect((await res.arrayBuffer()).byteLength).toBe(0);
    expect((await download(media.key, { 'If-None-Match': '"nope"' })).status).toBe(200);
  });
});
