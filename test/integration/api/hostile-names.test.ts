/**
 * Hostile file and folder names, through every way a name reaches the API (a
 * multipart `filename`, an RFC 5987 `filename*`, the base64 endpoint's `name`,
 * the `folder` field): the record's name is the sanitised display name, the
 * object key has the safe shape `<org>/[<folder>/]<base>-<token>.<ext>`, the
 * object is where the key says, and the download's Content-Disposition, as a
 * client library parses it, gives the display name back.
 */
import { parse as parseDisposition } from 'content-disposition';
import type { MediaView as Media } from '../../../api/domain/media-view';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { fixture, sha256 } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';

type Envelope<T> = { statusCode: number; message: string; data: T; error?: string };

const ORG = 'hostile-names';
const jpeg = fixture('Canon_40D.jpg');
/** Any key this service makes: every part from [A-Za-z0-9._-], "/" only between parts, no "..". */
const SAFE_KEY =
  /^[a-z0-9][a-z0-9-]*[a-z0-9]\/(?:[a-z0-9_](?:[a-z0-9._-]*[a-z0-9_])?\/)?[A-Za-z0-9_](?:[A-Za-z0-9._-]*[A-Za-z0-9_])?-[A-Za-z0-9_-]{12}\.[a-z0-9]+$/;

let api: TestApi;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('hostilenames');
  org = await api.createOrg(ORG);
});
afterAll(() => api.close());

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Sends one file part whose Content-Disposition parameters are written as given (raw bytes). */
async function uploadRaw(dispositionParams: string, extraFields = ''): Promise<Response> {
  const b = `----names${Date.now()}`;
  const body = Buffer.concat([
    Buffer.from(extraFields.replaceAll('{b}', b)),
    Buffer.from(
      `--${b}\r\nContent-Disposition: form-data; name="file"; ${dispositionParams}\r\nContent-Type: image/jpeg\r\n\r\n`,
    ),
    jpeg,
    Buffer.from(`\r\n--${b}--\r\n`),
  ]);
  return fetch(`${api.url}/media/upload`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': `multipart/form-data; boundary=${b}` },
    body,
  });
}

async function uploadBase64(name: string, extra: Record<string, unknown> = {}): Promise<Response> {
  return fetch(`${api.url}/media/upload/base64`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({
      file: `data:image/jpeg;base64,${jpeg.toString('base64')}`,
      name,
      ...extra,
    }),
  });
}

/**
 * The upload answered 201 with `displayName`, a key of the safe shape with
 * `keyBase` (and `folderSlug`), the record and object agree, and the download
 * names the file `displayName`.
 */
async function expectStoredSafely(
  res: Response,
  path: string,
  displayName: string,
  keyBase: string,
  folderSlug?: string,
): Promise<Media> {
  const body = (await res.json()) as Envelope<Media>;
  expectMatchesSpec('POST', path, res.status, body, res.headers);
  expect({ status: res.status, error: body.error }).toEqual({ status: 201, error: undefined });
  const media = body.data;
  expect(media.name).toBe(displayName);
  expect(media.key).toMatch(SAFE_KEY);
  expect(media.key).not.toContain('..');
  expect(media.key).toMatch(
    new RegExp(
      `^${ORG}/${folderSlug ? `${escapeRe(folderSlug)}/` : ''}${escapeRe(keyBase)}-[A-Za-z0-9_-]{12}\\.jpg$`,
    ),
  );
  expect(media.url).toBe(`${api.env.config.publicBaseUrl}/media/download?media=${media.key}`);

  // MongoDB and the bucket agree.
  const record = await api.ctx.models.Media.findOne({ id: media.id }).lean();
  expect(record).toMatchObject({ key: media.key, name: displayName, checksum: sha256(jpeg) });
  expect((await api.ctx.store.stat(media.key))?.size).toBe(jpeg.length);

  // The download carries the name in a header a client can parse back.
  const download = await fetch(`${api.url}/media/download?media=${encodeURIComponent(media.key)}`, {
    headers: org.auth,
  });
  expect(download.status).toBe(200);
  expect(Buffer.from(await download.arrayBuffer()).equals(jpeg)).toBe(true);
  const header = download.headers.get('content-disposition')!;
  // No control characters or line breaks can reach the header.
  // eslint-disable-next-line no-control-regex
  expect(header).not.toMatch(/[\u0000-\u001f\u007f]/);
  const parsed = parseDisposition(header);
  expect(parsed.type).toBe('attachment');
  expect(parsed.parameters.filename).toBe(displayName);
  return media;
}

/** name sent → [display name, key base] */
const NAMES: [string, string, string, string][] = [
  ['traversal', '../../etc/passwd', 'passwd', 'passwd'],
  ['Windows traversal', '..\\..\\Windows\\system32\\cmd.jpg', 'cmd.jpg', 'cmd'],
  ['a path with slashes', 'photos/2024/summer/cat.jpg', 'cat.jpg', 'cat'],
  [
    'percent-encoded traversal (kept literally)',
    '..%2F..%2Fetc%2Fpasswd.jpg',
    '..%2F..%2Fetc%2Fpasswd.jpg',
    '2F.-2Fetc-2Fpasswd',
  ],
  [
    'double-encoded traversal',
    '%252e%252e%252fsecret.jpg',
    '%252e%252e%252fsecret.jpg',
    '252e-252e-252fsecret',
  ],
  ['dots only', '...', '...', 'file'],
  ['dots and a traversal in the base', 'a..b...c.jpg', 'a..b...c.jpg', 'a.b.c'],
  [
    'a right-to-left override disguising the extension',
    'invoice\u202egpj.exe',
    'invoicegpj.exe',
    'invoicegpj',
  ],
  ['Arabic (right to left)', 'تقرير مالي ٢٠٢٤.jpg', 'تقرير مالي ٢٠٢٤.jpg', 'file'],
  ['Hebrew mixed with Latin', 'דוח Q3 סופי.jpg', 'דוח Q3 סופי.jpg', 'Q3'],
  ['emoji with joiners and skin tones', '👨‍👩‍👧‍👦 party 🎉👍🏽.jpg', '👨‍👩‍👧‍👦 party 🎉👍🏽.jpg', 'party'],
  ['a decomposed accent', 'e\u0301cole.jpg', 'école.jpg', 'ecole'],
  [
    'quotes, semicolons and backslash-free specials',
    'a "quoted"; name=x.jpg',
    'a "quoted"; name=x.jpg',
    'a-quoted-name-x',
  ],
  ['Windows reserved', 'CON.jpg', 'CON.jpg', 'CON'],
  ['1,000 characters', `${'a'.repeat(996)}.jpg`, `${'a'.repeat(251)}.jpg`, 'a'.repeat(80)],
  ['1,000 emoji', `${'😀'.repeat(500)}.jpg`, `${'😀'.repeat(125)}.jpg`, 'file'],
];

describe('file names through the base64 endpoint (any JSON string)', () => {
  it.each(NAMES)('stores %s under a safe key', async (_what, name, display, base) => {
    await expectStoredSafely(await uploadBase64(name), '/media/upload/base64', display, base);
  });

  it.each([
    [
      'NUL and C0 controls',
      'inv\u0000oice\u0007\u001b[31m\t.jpg',
      'invoice[31m.jpg',
      'invoice-31m',
    ],
    ['CR LF (header injection)', 'a.jpg\r\nSet-Cookie: x=1', 'a.jpgSet-Cookie: x=1', 'a'],
    ['C1 controls and line separators', 'x\u0085y\u2028z\u2029.jpg', 'xyz.jpg', 'xyz'],
    ['bidi marks and isolates', '\u200fabc\u2066def\u2069\u061c.jpg', 'abcdef.jpg', 'abcdef'],
    ['a lone surrogate', 'x\ud800y.jpg', 'x\ufffdy.jpg', 'x-y'],
    ['a byte-order mark', '\ufeffbom.jpg', 'bom.jpg', 'bom'],
    ['only control characters', '\u0000\u0001\u0002', 'file', 'file'],
  ])('stores a name with %s, without them', async (_what, name, display, base) => {
    await expectStoredSafely(await uploadBase64(name), '/media/upload/base64', display, base);
  });

  it('refuses a name over 4,096 characters (400)', async () => {
    const res = await uploadBase64('n'.repeat(5_000));
    const body = (await res.json()) as Envelope<unknown>;
    expectMatchesSpec('POST', '/media/upload/base64', res.status, body, res.headers);
    expect([res.status, body.error]).toEqual([400, 'VALIDATION_FAILED']);
  });
});

describe('file names through multipart', () => {
  it.each(NAMES.filter(([, name]) => !name.includes('"')))(
    'stores %s (quoted filename, UTF-8 bytes) under a safe key',
    async (_what, name, display, base) => {
      // A quoted filename cannot carry a separator to the record: busboy keeps its last
      // path segment, as does the sanitiser.
      await expectStoredSafely(
        await uploadRaw(`filename="${name}"`),
        '/media/upload',
        display,
        base,
      );
    },
  );

  /** An RFC 5987 ext-value: UTF-8, percent-encoded outside attr-char. */
  const rfc5987 = (name: string) =>
    encodeURIComponent(name).replace(
      /['()*]/g,
      (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
    );

  it.each([
    ['traversal', '../../etc/passwd.jpg', 'passwd.jpg', 'passwd'],
    ['Windows traversal', '..\\..\\boot.ini.jpg', 'boot.ini.jpg', 'boot.ini'],
    ['a NUL byte', 'nul\u0000byte.jpg', 'nulbyte.jpg', 'nulbyte'],
    ['CR LF', 'a\r\nX-Injected: 1.jpg', 'aX-Injected: 1.jpg', 'aX-Injected-1'],
    ['a right-to-left override', 'invoice\u202egpj.exe', 'invoicegpj.exe', 'invoicegpj'],
    ['emoji', '😀 smile.jpg', '😀 smile.jpg', 'smile'],
    ['1,000 characters', `${'b'.repeat(996)}.jpg`, `${'b'.repeat(251)}.jpg`, 'b'.repeat(80)],
  ])(
    'decodes an RFC 5987 filename* with %s, then makes it safe',
    async (_what, name, display, base) => {
      await expectStoredSafely(
        await uploadRaw(`filename="fallback.jpg"; filename*=UTF-8''${rfc5987(name)}`),
        '/media/upload',
        display,
        base,
      );
    },
  );

  it('ignores a part whose filename* is not valid RFC 5987 (a raw "/"): the file is missing (400)', async () => {
    const res = await uploadRaw("filename*=UTF-8''../../etc/passwd.jpg");
    const body = (await res.json()) as Envelope<unknown>;
    expectMatchesSpec('POST', '/media/upload', res.status, body, res.headers);
    expect([res.status, body.error]).toEqual([400, 'VALIDATION_FAILED']);
  });

  it('strips a tab sent as a raw byte in a quoted filename', async () => {
    await expectStoredSafely(
      await uploadRaw('filename="tab\there.jpg"'),
      '/media/upload',
      'tabhere.jpg',
      'tabhere',
    );
  });

  it.each([
    ['NUL', '\u0000'],
    ['SOH', '\u0001'],
    ['DEL', '\u007f'],
  ])('refuses a part header with a raw %s byte as malformed (400)', async (_what, byte) => {
    const res = await uploadRaw(`filename="ctl${byte}.jpg"`);
    const body = (await res.json()) as Envelope<unknown>;
    expectMatchesSpec('POST', '/media/upload', res.status, body, res.headers);
    expect([res.status, body.error]).toEqual([400, 'BAD_REQUEST']);
    expect(body.message).toMatch(/part header/);
  });
});

describe('folder names', () => {
  it.each([
    ['traversal', '../../etc', 'etc'],
    ['slashes', 'a/b\\c', 'a-b-c'],
    ['compatibility capitals', 'ℌ𝔢𝔩𝔩𝔬 Ｗｏｒｌｄ', 'hello-world'],
    ['dots', '...hidden..folder...', 'hidden.folder'],
    ['emoji only', '🎉🎉', 'folder'],
    ['right to left', 'مجلد', 'folder'],
  ])('makes a folder named with %s a safe slug in the key', async (_what, folder, slug) => {
    await expectStoredSafely(
      await uploadBase64('pic.jpg', { folder }),
      '/media/upload/base64',
      'pic.jpg',
      'pic',
      slug,
    );
    await expectStoredSafely(
      await uploadRaw(
        'filename="pic.jpg"',
        `--{b}\r\nContent-Disposition: form-data; name="folder"\r\n\r\n${folder}\r\n`,
      ),
      '/media/upload',
      'pic.jpg',
      'pic',
      slug,
    );
  });

  it('keeps every key of the organization under its prefix', async () => {
    const keys = await api.objectKeys('');
    expect(keys.length).toBeGreaterThan(40);
    for (const key of keys) {
      expect(key).toMatch(SAFE_KEY);
      expect(key.startsWith(`${ORG}/`)).toBe(true);
    }
  });
});
