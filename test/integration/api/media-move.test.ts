/**
 * POST /media/move through the real API, S3 and MongoDB: files put into a
 * folder and back into no folder (the root folder's id), their keys and
 * bytes unchanged, the folders' counts following; all or nothing when a key
 * or the folder is unknown or another organization's; the input rules and
 * the write scope.
 */
import { startApi, type TestApi, type TestOrg, type UploadedMedia } from '../../support/api';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';

type Json = Record<string, unknown>;
type Media = { id: number; key: string; name: string; folderId: number };

let api: TestApi;
let org: TestOrg;
let other: TestOrg;
let files: UploadedMedia[];
let folderId: number;

async function call<T = Json>(
  method: string,
  path: string,
  body?: unknown,
  as: { auth: { Authorization: string } } = org,
): Promise<{ status: number; body: { data: T; error?: string; message?: string } }> {
  const res = await fetch(`${api.url}${path}`, {
    method,
    headers: { ...as.auth, ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const parsed = (await res.json()) as { data: T; error?: string; message?: string };
  const template = path.split('?')[0]!.replace(/^\/media\/folders\/\d+$/, '/media/folders/{id}');
  expectMatchesSpec(method, template, res.status, parsed, res.headers);
  return { status: res.status, body: parsed };
}

const move = (body: unknown, as?: { auth: { Authorization: string } }) =>
  call<{ media: Media[] }>('POST', '/media/move', body, as);

async function folderOf(key: string): Promise<number> {
  const res = await call<Media>('GET', `/media/record?media=${encodeURIComponent(key)}`);
  expect(res.status).toBe(200);
  return res.body.data.folderId;
}

beforeAll(async () => {
  api = await startApi('move');
  org = await api.createOrg('mover');
  other = await api.createOrg('stranger');
  files = [];
  for (const name of ['a.jpg', 'b.jpg', 'c.jpg']) {
    files.push(await org.uploadRecord(fixture('Canon_40D.jpg'), name));
  }
  const created = await call<{ id: number }>('POST', '/media/folders', { name: 'Archive' });
  expect(created.status).toBe(201);
  folderId = created.body.data.id;
});
afterAll(() => api.close());

describe('POST /media/move', () => {
  it('puts files into a folder and back into no folder, keys and bytes unchanged', async () => {
    const root = org.organization.rootFolderId;
    const keys = [files[1]!.key, files[0]!.key];
    const moved = await move({ mediaKeys: keys, folderId });
    expect(moved.status).toBe(200);
    expect(moved.body.data.media.map((m) => [m.key, m.folderId])).toEqual([
      [keys[0], folderId],
      [keys[1], folderId],
    ]);
    expect(await folderOf(files[0]!.key)).toBe(folderId);
    expect(await folderOf(files[2]!.key)).toBe(root);
    // Listed in the folder now, and the folders' counts follow.
    const listed = await call<{ media: Media[] }>('GET', `/media?folderId=${folderId}`);
    expect(listed.body.data.media.map((m) => m.name).sort()).toEqual(['a.jpg', 'b.jpg']);
    const folder = await call<{ files: number }>('GET', `/media/folders/${folderId}`);
    expect(folder.body.data.files).toBe(2);
    // The key still reads the same bytes.
    const bytes = Buffer.from(
      await (
        await fetch(`${api.url}/media/download?media=${encodeURIComponent(keys[0]!)}`, {
          headers: org.auth,
        })
      ).arrayBuffer(),
    );
    expect(bytes.equals(fixture('Canon_40D.jpg'))).toBe(true);
    expect(await api.objectKeys(`${org.organization.slug}/`)).toEqual(
      files.map((f) => f.key).sort(),
    );

    // Again: nothing changes. Then back to no folder with the root folder's id.
    expect((await move({ mediaKeys: keys, folderId })).status).toBe(200);
    const back = await move({ mediaKeys: keys, folderId: root });
    expect(back.status).toBe(200);
    expect(back.body.data.media.every((m) => m.folderId === root)).toBe(true);
    expect(await folderOf(files[1]!.key)).toBe(root);
    expect(
      (await call<{ files: number }>('GET', `/media/folders/${folderId}`)).body.data.files,
    ).toBe(0);
  });

  it('moves nothing when one key or the folder is unknown', async () => {
    const unknownKey = await move({
      mediaKeys: [files[0]!.key, `${org.organization.slug}/nope-AAAAAAAAAAAA.jpg`],
      folderId,
    });
    expect(unknownKey.status).toBe(404);
    expect(unknownKey.body.error).toBe('MEDIA_NOT_FOUND');
    expect(await folderOf(files[0]!.key)).toBe(org.organization.rootFolderId);

    const unknownFolder = await move({ mediaKeys: [files[0]!.key], folderId: 987654 });
    expect(unknownFolder.status).toBe(404);
    expect(unknownFolder.body.error).toBe('FOLDER_NOT_FOUND');
    expect(await folderOf(files[0]!.key)).toBe(org.organization.rootFolderId);
  });

  it("never reaches another organization's files or folders", async () => {
    const theirs = await move(
      { mediaKeys: [files[0]!.key], folderId: other.organization.rootFolderId },
      other,
    );
    expect(theirs.status).toBe(404);
    expect(theirs.body.error).toBe('MEDIA_NOT_FOUND');
    const into = await move({ mediaKeys: [files[0]!.key], folderId }, other);
    expect(into.status).toBe(404);
    expect(into.body.error).toBe('FOLDER_NOT_FOUND');
    expect(await folderOf(files[0]!.key)).toBe(org.organization.rootFolderId);
  });

  it('refuses bad input with the documented error, and a token without write', async () => {
    for (const body of [
      {},
      { mediaKeys: [], folderId },
      { mediaKeys: [files[0]!.key] },
      { mediaKeys: [files[0]!.key], folderId: 0 },
      { mediaKeys: [files[0]!.key], folderId: '7' },
      { mediaKeys: Array.from({ length: 101 }, (_, i) => `k${i}`), folderId },
      { mediaKeys: [files[0]!.key], folderId, extra: true },
    ]) {
      const res = await move(body);
      expect(res.status).toBe(400);
      expect(res.body.error).toBe('VALIDATION_FAILED');
    }
    const reader = await api.ctx.tokens.issue(org.organization.id, {
      name: 'reader',
      scopes: ['read'],
    });
    const refused = await move(
      { mediaKeys: [files[0]!.key], folderId },
      { auth: { Authorization: `Bearer ${reader.token}` } },
    );
    expect(refused.status).toBe(403);
    expect(refused.body.error).toBe('INSUFFICIENT_SCOPE');
    expect(await folderOf(files[0]!.key)).toBe(org.organization.rootFolderId);
  });
});
