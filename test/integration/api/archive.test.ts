/**
 * Archives through the real API, MongoDB and S3: POST /media/archive of a
 * folder (alone, and with the folders named under it), of keys, and of the
 * root folder, each ZIP read back entry by entry with yauzl (names, SHA-256
 * of the bytes, stored or deflated); unsafe folder names and duplicate names
 * made safe; another organization's key or folder 404 (no byte of a ZIP
 * sent); an empty selection 400; the entry and byte limits 413; the `read`
 * scope; the signed form, read without a token, and refused once changed.
 */
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import sharp from 'sharp';
import yauzl from 'yauzl';
import { createApp } from '../../../api/app';
import { createHttpServer } from '../../../api/http-server';
import { ArchiveService } from '../../../api/services/archive.service';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { fixture, sha256 } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';

const SIGNING_KEY = 'archive-signing-key-0123456789abcdef01234567';

type Json = Record<string, unknown>;
interface Entry {
  name: string;
  sha256: string;
  stored: boolean;
}

let api: TestApi;
let alpha: TestOrg;
let beta: TestOrg;
const jpeg = fixture('Canon_40D.jpg');
const pdf = fixture('minimal-document.pdf');
const tiff = fixture('tiff-BSG1.tiff');
let png: Buffer;
const folders = { photos: 0, year: 0, lookalike: 0, unsafe: 0, empty: 0, beta: 0 };
const keys = { jpeg: '', pdf: '', png: '', tiff: '', beta: '' };

/** Reads a ZIP entry by entry: each name, its bytes' SHA-256, and whether it was stored. */
async function unzip(zip: Buffer): Promise<Entry[]> {
  const file = await new Promise<yauzl.ZipFile>((resolve, reject) =>
    yauzl.fromBuffer(zip, { lazyEntries: true }, (err, opened) =>
      err ? reject(err) : resolve(opened),
    ),
  );
  const entries: Entry[] = [];
  await new Promise<void>((resolve, reject) => {
    file.on('error', reject);
    file.on('end', resolve);
    file.on('entry', (entry: yauzl.Entry) => {
      file.openReadStream(entry, (err, stream) => {
        if (err) {
          reject(err);
          return;
        }
        const hash = createHash('sha256');
        stream.on('data', (chunk: Buffer) => hash.update(chunk));
        stream.on('error', reject);
        stream.on('end', () => {
          entries.push({
            name: entry.fileName,
            sha256: hash.digest('hex'),
            stored: entry.compressionMethod === 0,
          });
          file.readEntry();
        });
      });
    });
    file.readEntry();
  });
  return entries;
}

/** POST /media/archive; the answer (a ZIP or an error) checked against the spec. */
async function archive(body: Json, org: TestOrg = alpha, base = api.url) {
  const res = await fetch(`${base}/media/archive`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const bytes = Buffer.from(await res.arrayBuffer());
  expectMatchesSpec('POST', '/media/archive', res.status, bytes, res.headers);
  const json = res.headers.get('content-type')?.startsWith('application/json')
    ? (JSON.parse(bytes.toString()) as Json & { data: Json; details?: Json[] })
    : undefined;
  return { res, bytes, json };
}

async function createFolder(org: TestOrg, name: string): Promise<number> {
  const res = await fetch(`${api.url}/media/folders`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ name }),
  });
  const body = (await res.json()) as { data: { id: number } };
  expect(res.status).toBe(201);
  return body.data.id;
}

const hex = (data: Buffer) => sha256(data).replace(/^sha256:/, '');

/** `url` (signed for PUBLIC_BASE_URL) sent to the test API. */
const at = (url: string) => api.url + url.slice(new URL(url).origin.length);

const servers: Server[] = [];
/** An app on the API's own services with other archive limits. */
async function appWithLimits(limits: { maxEntries: number; maxBytes: number }): Promise<string> {
  const archives = new ArchiveService({
    media: api.ctx.media,
    folders: api.ctx.repositories.folders,
    store: api.ctx.store,
    scan: { enabled: false, defaultPolicy: api.env.config.scan.defaultPolicy },
    limits,
    signedUrls: api.ctx.signedUrls,
  });
  const server = createHttpServer(createApp({ ...api.ctx, archives }), api.ctx.logger);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  servers.push(server);
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

beforeAll(async () => {
  api = await startApi('archive', { env: { URL_SIGNING_KEYS: SIGNING_KEY } });
  alpha = await api.createOrg('archiver');
  beta = await api.createOrg('outsider');
  png = await sharp({
    create: { width: 64, height: 48, channels: 3, background: { r: 200, g: 30, b: 90 } },
  })
    .png()
    .toBuffer();
  folders.photos = await createFolder(alpha, 'photos');
  folders.year = await createFolder(alpha, 'photos/2024');
  folders.lookalike = await createFolder(alpha, 'photosx');
  folders.unsafe = await createFolder(alpha, '../../escape');
  folders.empty = await createFolder(alpha, 'empty');
  folders.beta = await createFolder(beta, 'photos');
  keys.jpeg = await alpha.upload(jpeg, 'camera.jpg', { folderId: folders.photos });
  keys.pdf = await alpha.upload(pdf, 'contract.pdf', { folderId: folders.photos });
  // The same name twice in one folder, and once more in another case.
  await alpha.upload(png, 'dup.png', { folderId: folders.photos });
  await alpha.upload(jpeg, 'dup.png', { folderId: folders.photos });
  await alpha.upload(pdf, 'DUP.png', { folderId: folders.photos });
  keys.tiff = await alpha.upload(tiff, 'scan.tiff', { folderId: folders.year });
  await alpha.upload(png, 'not-mine.png', { folderId: folders.lookalike });
  await alpha.upload(jpeg, 'escaped.jpg', { folderId: folders.unsafe });
  keys.png = await alpha.upload(png, 'root.png');
  keys.beta = await beta.upload(jpeg, 'theirs.jpg', { folderId: folders.beta });
});
afterAll(async () => {
  for (const server of servers) {
    server.closeAllConnections();
    server.close();
  }
  await api.close();
});

describe('POST /media/archive', () => {
  it('streams a ZIP of a folder: its files only, read back with their names and bytes', async () => {
    const { res, bytes } = await archive({ folderId: folders.photos });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/zip');
    expect(res.headers.get('content-disposition')).toBe('attachment; filename=photos.zip');
    // In the order they were stored.
    const entries = await unzip(bytes);
    expect(entries.map((e) => e.name)).toEqual([
      'camera.jpg',
      'contract.pdf',
      'dup.png',
      'dup (2).png',
      'DUP (3).png',
    ]);
    const of = (name: string) => entries.find((e) => e.name === name)!;
    expect(of('camera.jpg').sha256).toBe(hex(jpeg));
    expect(of('contract.pdf').sha256).toBe(hex(pdf));
    // The oldest keeps the name: uploaded in this order.
    expect(of('dup.png').sha256).toBe(hex(png));
    expect(of('dup (2).png').sha256).toBe(hex(jpeg));
    expect(of('DUP (3).png').sha256).toBe(hex(pdf));
    // Compressed formats are stored as they are.
    expect(entries.every((e) => e.stored)).toBe(true);
  });

  it('with recursive, adds the folders named under it (and not a name that only starts alike)', async () => {
    const { res, bytes } = await archive({ folderId: folders.photos, recursive: true });
    expect(res.status).toBe(200);
    const entries = await unzip(bytes);
    expect(entries.map((e) => e.name)).toEqual([
      'camera.jpg',
      'contract.pdf',
      'dup.png',
      'dup (2).png',
      'DUP (3).png',
      '2024/scan.tiff',
    ]);
    const scan = entries.find((e) => e.name === '2024/scan.tiff')!;
    expect(scan.sha256).toBe(hex(tiff));
    // TIFF is deflated.
    expect(scan.stored).toBe(false);
  });

  it('archives the root folder: its own files, or with recursive every file, with safe names', async () => {
    const root = alpha.organization.rootFolderId;
    const only = await unzip((await archive({ folderId: root })).bytes);
    expect(only).toEqual([{ name: 'root.png', sha256: hex(png), stored: true }]);
    const all = await unzip((await archive({ folderId: root, recursive: true })).bytes);
    const names = all.map((e) => e.name);
    expect(names).toHaveLength(9);
    expect(names).toContain('escape/escaped.jpg');
    expect(names).toContain('photosx/not-mine.png');
    expect(names).toContain('photos/2024/scan.tiff');
    for (const name of names) {
      expect(name.startsWith('/')).toBe(false);
      expect(name.split('/')).not.toContain('..');
    }
  });

  it('archives keys in their order, a repeated key once', async () => {
    const { res, bytes } = await archive({ mediaKeys: [keys.png, keys.tiff, keys.png, keys.jpeg] });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-disposition')).toBe('attachment; filename=archive.zip');
    expect((await unzip(bytes)).map((e) => [e.name, e.sha256])).toEqual([
      ['root.png', hex(png)],
      ['scan.tiff', hex(tiff)],
      ['camera.jpg', hex(jpeg)],
    ]);
  });

  it("404s for another organization's key or folder, before any byte of a ZIP", async () => {
    const key = await archive({ mediaKeys: [keys.jpeg, keys.beta] });
    expect(key.res.status).toBe(404);
    expect(key.json).toMatchObject({ error: 'MEDIA_NOT_FOUND' });
    const folder = await archive({ folderId: folders.beta });
    expect(folder.res.status).toBe(404);
    expect(folder.json).toMatchObject({ error: 'FOLDER_NOT_FOUND' });
    // Their own folder and key work for them.
    const theirs = await archive({ mediaKeys: [keys.beta] }, beta);
    expect((await unzip(theirs.bytes)).map((e) => e.sha256)).toEqual([hex(jpeg)]);
  });

  it('refuses an empty selection and a malformed one with 400', async () => {
    for (const body of [
      { mediaKeys: [] },
      { folderId: folders.empty },
      {},
      { mediaKeys: [keys.png], folderId: folders.photos },
      { mediaKeys: [keys.png], recursive: true },
      { folderId: 'photos' },
      { mediaKeys: [keys.png], expiresIn: 60 },
    ]) {
      const { res, json } = await archive(body);
      expect({ body, status: res.status, error: json?.error }).toEqual({
        body,
        status: 400,
        error: 'VALIDATION_FAILED',
      });
    }
  });

  it('refuses a selection over the entry or byte limit with 413, before any byte', async () => {
    const fewEntries = await appWithLimits({ maxEntries: 4, maxBytes: 1 << 30 });
    const entries = await archive({ folderId: folders.photos }, alpha, fewEntries);
    expect(entries.res.status).toBe(413);
    expect(entries.json).toMatchObject({ error: 'TOO_MANY_FILES' });
    const byKeys = await archive({ mediaKeys: [keys.png, keys.tiff] }, alpha, fewEntries);
    expect(byKeys.res.status).toBe(200);
    const fewBytes = await appWithLimits({ maxEntries: 100, maxBytes: jpeg.length });
    const bytes = await archive({ mediaKeys: [keys.jpeg, keys.png] }, alpha, fewBytes);
    expect(bytes.res.status).toBe(413);
    expect(bytes.json).toMatchObject({ error: 'PAYLOAD_TOO_LARGE' });
    expect((await archive({ mediaKeys: [keys.jpeg] }, alpha, fewBytes)).res.status).toBe(200);
  });

  it('needs the read scope', async () => {
    const orgId = alpha.organization.id;
    const noRead = await api.ctx.tokens.issue(orgId, { scopes: ['write', 'delete'] });
    const readOnly = await api.ctx.tokens.issue(orgId, { scopes: ['read'] });
    const as = (token: string) => ({ ...alpha, auth: { Authorization: `Bearer ${token}` } });
    const refused = await archive({ mediaKeys: [keys.png] }, as(noRead.token));
    expect(refused.res.status).toBe(403);
    expect(refused.json).toMatchObject({ error: 'INSUFFICIENT_SCOPE' });
    const allowed = await archive({ mediaKeys: [keys.png] }, as(readOnly.token));
    expect(allowed.res.status).toBe(200);
    expect((await unzip(allowed.bytes)).map((e) => e.name)).toEqual(['root.png']);
  });
});

describe('signed archives', () => {
  it('answers a signed GET URL that reads the ZIP without a token', async () => {
    const { res, json } = await archive({
      folderId: folders.photos,
      recursive: true,
      signed: true,
      expiresIn: 600,
    });
    expect(res.status).toBe(200);
    const data = json!.data as { url: string; entries: number; bytes: number; expiresAt: string };
    expect(data.entries).toBe(6);
    expect(data.bytes).toBe(jpeg.length * 2 + pdf.length * 2 + png.length + tiff.length);
    expect(Date.parse(data.expiresAt) - Date.now()).toBeGreaterThan(500_000);
    const got = await fetch(at(data.url));
    const zip = Buffer.from(await got.arrayBuffer());
    expectMatchesSpec('GET', '/media/archive', got.status, zip, got.headers);
    expect(got.status).toBe(200);
    expect((await unzip(zip)).map((e) => e.name)).toContain('2024/scan.tiff');

    // Changed (another selection under the same signature): refused.
    const changed = new URL(at(data.url));
    changed.searchParams.set(
      'selection',
      Buffer.from(JSON.stringify({ mediaKeys: [keys.beta] })).toString('base64url'),
    );
    const refused = await fetch(changed);
    expect(refused.status).toBe(403);
    expect(await refused.json()).toMatchObject({ error: 'SIGNED_URL_INVALID' });
    // Without its signature and without a token: no access.
    changed.searchParams.delete('signature');
    expect((await fetch(changed)).status).toBe(401);
  });

  it("checks the selection when signing: another organization's key 404s", async () => {
    const { res, json } = await archive({ mediaKeys: [keys.beta], signed: true });
    expect(res.status).toBe(404);
    expect(json).toMatchObject({ error: 'MEDIA_NOT_FOUND' });
  });
});
