/**
 * Every row of the error table the upload and download endpoints can produce:
 * the status, the envelope, and that nothing is left behind.
 */
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { fixture, form } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';

type ErrorBody = {
  statusCode: number;
  message: string;
  error: string;
  details?: { field?: string; message: string }[];
  requestId: string;
};

let api: TestApi;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('errors', {
    env: { MAX_FILE_SIZE: '100000', MAX_FILES: '3', MAX_BASE64_SIZE: '30000' },
  });
  org = await api.createOrg('errs');
});
afterAll(() => api.close());

async function call(
  path: string,
  init: RequestInit & { headers?: Record<string, string> } = {},
): Promise<{ res: Response; body: ErrorBody }> {
  const res = await fetch(`${api.url}${path}`, {
    ...init,
    headers: { ...org.auth, ...(init.headers ?? {}) },
  });
  const body = (await res.json()) as ErrorBody;
  const route = path.split('?')[0]!;
  if (route !== '/media/nope')
    expectMatchesSpec(init.method ?? 'GET', route, res.status, body, res.headers);
  return { res, body };
}

const postForm = (path: string, fd: FormData) => call(path, { method: 'POST', body: fd });
const postJson = (path: string, value: unknown) =>
  call(path, {
    method: 'POST',
    body: typeof value === 'string' ? value : JSON.stringify(value),
    headers: { 'Content-Type': 'application/json' },
  });

function expectError(
  r: { res: Response; body: ErrorBody },
  status: number,
  code: string,
  message?: RegExp,
) {
  expect({ status: r.res.status, code: r.body.error }).toEqual({ status, code });
  expect(r.body.statusCode).toBe(status);
  expect(typeof r.body.message).toBe('string');
  expect(r.body.requestId).toBe(r.res.headers.get('x-request-id'));
  if (message) expect(r.body.message).toMatch(message);
}

/** Nothing of the organization is stored: no records, no objects. */
async function expectNothingStored() {
  expect(await api.ctx.models.Media.countDocuments({ organizationId: org.organization.id })).toBe(
    0,
  );
  expect(await api.objectKeys(`${org.organization.slug}/`)).toEqual([]);
}

const jpeg = fixture('Canon_40D.jpg');
const big = fixture('tiff-BSG1.tiff'); // 288 KB, over the 100 KB limit here

describe('400 Bad Request', () => {
  it('refuses a body that is not multipart', async () => {
    expectError(await postJson('/media/upload', { file: 'x' }), 400, 'BAD_REQUEST', /multipart/);
  });

  it('refuses a multipart body without a boundary', async () => {
    const r = await call('/media/upload', {
      method: 'POST',
      body: 'whatever',
      headers: { 'Content-Type': 'multipart/form-data' },
    });
    expectError(r, 400, 'BAD_REQUEST', /boundary/);
  });

  it('refuses a form without the file part', async () => {
    const r = await postForm('/media/upload', form([['folder', 'x']]));
    expectError(r, 400, 'VALIDATION_FAILED', /"file" is required/);
    expect(r.body.details).toEqual([{ field: 'file', message: expect.any(String) as string }]);
  });

  it('refuses a file sent under another field name, and unknown fields', async () => {
    expectError(
      await postForm('/media/upload', form([['image', jpeg, 'a.jpg']])),
      400,
      'VALIDATION_FAILED',
      /unexpected file field "image"/,
    );
    expectError(
      await postForm(
        '/media/upload',
        form([
          ['colour', 'blue'],
          ['file', jpeg, 'a.jpg'],
        ]),
      ),
      400,
      'VALIDATION_FAILED',
      /unknown field "colour"/,
    );
  });

  it('refuses a file part without a filename', async () => {
    const r = await postForm('/media/upload', form([['file', 'just text']]));
    expectError(r, 400, 'VALIDATION_FAILED', /must be a file part/);
  });

  it('refuses folder and folderId that name different folders', async () => {
    const first = await postForm(
      '/media/upload',
      form([
        ['folder', 'one'],
        ['file', jpeg, 'a.jpg'],
      ]),
    );
    expect(first.res.status).toBe(201);
    // Upload answers carry no folderId (the interface's form): the folder's id from MongoDB.
    const folderId = (
      await api.ctx.models.Folder.findOne({
        organizationId: org.organization.id,
        name: 'one',
      }).lean()
    )?.id;
    // (the first upload succeeded; clean it from the "nothing stored" checks)
    await api.ctx.models.Media.deleteMany({ organizationId: org.organization.id });
    await api.ctx.store.removeMany(await api.objectKeys('errs/'));
    expect(folderId).toEqual(expect.any(Number));
    for (const order of ['before', 'after'] as const) {
      const parts = [
        ['folder', 'two'],
        ['folderId', String(folderId)],
      ] as const;
      const fd =
        order === 'before'
          ? form([...parts, ['file', jpeg, 'a.jpg']])
          : form([['file', jpeg, 'a.jpg'], ...parts]);
      expectError(await postForm('/media/upload', fd), 400, 'FOLDER_MISMATCH');
    }
    expectError(
      await postForm(
        '/media/upload',
        form([
          ['folderId', 'abc'],
          ['file', jpeg, 'a.jpg'],
        ]),
      ),
      400,
      'VALIDATION_FAILED',
      /folderId/,
    );
    await expectNothingStored();
  });

  it('refuses malformed JSON, a missing data URL and unknown fields', async () => {
    expectError(await postJson('/media/upload/base64', '{"file": '), 400, 'BAD_REQUEST', /JSON/);
    expectError(
      await postJson('/media/upload/base64', { name: 'a' }),
      400,
      'VALIDATION_FAILED',
      /file/,
    );
    expectError(
      await postJson('/media/upload/base64', {
        file: `data:image/jpeg;base64,${jpeg.toString('base64')}`,
        extra: 1,
      }),
      400,
      'VALIDATION_FAILED',
      /extra/,
    );
  });

  it.each([
    ['no prefix', jpeg.toString('base64')],
    ['not base64', 'data:image/jpeg,abc'],
    ['invalid base64', 'data:image/jpeg;base64,@@@@'],
    ['empty data', 'data:image/jpeg;base64,'],
    ['empty string', ''],
  ])('refuses a bad data URL: %s', async (_what, file) => {
    expectError(await postJson('/media/upload/base64', { file }), 400, 'INVALID_DATA_URL');
  });

  it('refuses an empty file', async () => {
    expectError(
      await postForm('/media/upload', form([['file', Buffer.alloc(0), 'empty.jpg']])),
      400,
      'BAD_REQUEST',
      /empty/,
    );
    await expectNothingStored();
  });
});

describe('401 Unauthorized', () => {
  const cases: [string, () => Promise<Record<string, string>>][] = [
    ['missing', () => Promise.resolve({})],
    ['malformed', () => Promise.resolve({ Authorization: 'Basic dXNlcjpwYXNz' })],
    [
      'unknown',
      () => Promise.resolve({ Authorization: `Bearer mst_0123456789abcdef_${'a'.repeat(43)}` }),
    ],
    [
      'expired',
      async () => {
        const t = await api.issueExpiredToken(org.organization.id);
        return { Authorization: `Bearer ${t.token}` };
      },
    ],
    [
      'revoked',
      async () => {
        const t = await api.ctx.tokens.issue(org.organization.id);
        await api.ctx.tokens.revoke(t.tokenId);
        return { Authorization: `Bearer ${t.token}` };
      },
    ],
  ];

  it.each(cases)(
    'refuses a %s token with WWW-Authenticate and the envelope',
    async (_what, headers) => {
      const auth = await headers();
      for (const [method, path] of [
        ['POST', '/media/upload'],
        ['POST', '/media/upload/multiple'],
        ['POST', '/media/upload/base64'],
        ['GET', '/media/download?media=x'],
      ] as const) {
        const res = await fetch(`${api.url}${path}`, { method, headers: auth });
        expect(res.status).toBe(401);
        expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
        expect(((await res.json()) as ErrorBody).error).toBe('UNAUTHORIZED');
      }
    },
  );
});

describe('404 Not Found', () => {
  it('answers an unknown key and an unknown folder id', async () => {
    expectError(await call('/media/download?media=errs/nothing-here.jpg'), 404, 'MEDIA_NOT_FOUND');
    expectError(
      await postForm(
        '/media/upload',
        form([
          ['folderId', '999999'],
          ['file', jpeg, 'a.jpg'],
        ]),
      ),
      404,
      'FOLDER_NOT_FOUND',
    );
    expectError(
      await postForm(
        '/media/upload',
        form([
          ['file', jpeg, 'a.jpg'],
          ['folderId', '999999'],
        ]),
      ),
      404,
      'FOLDER_NOT_FOUND',
    );
    expectError(
      await postJson('/media/upload/base64', {
        file: `data:image/jpeg;base64,${jpeg.toString('base64')}`,
        folderId: 999999,
      }),
      404,
      'FOLDER_NOT_FOUND',
    );
    await expectNothingStored();
  });

  it('answers an unknown route in the envelope', async () => {
    expectError(await call('/media/nope'), 404, 'NOT_FOUND');
  });
});

describe('413 Payload Too Large', () => {
  it('refuses a file over MAX_FILE_SIZE and keeps nothing', async () => {
    const r = await postForm('/media/upload', form([['file', big, 'big.tiff']]));
    expectError(r, 413, 'FILE_TOO_LARGE', /100 KB|97\.7 KB/);
    await expectNothingStored();
    expect(await api.ctx.store.listIncompleteUploads('')).toEqual([]);
  });

  it('refuses more files than MAX_FILES, keeping none of them', async () => {
    const r = await postForm(
      '/media/upload/multiple',
      form([1, 2, 3, 4].map((i) => ['files', jpeg, `${i}.jpg`] as const)),
    );
    expectError(r, 413, 'TOO_MANY_FILES', /At most 3 files/);
    await expectNothingStored();
  });

  it('refuses a second file on the single upload', async () => {
    const r = await postForm(
      '/media/upload',
      form([
        ['file', jpeg, 'a.jpg'],
        ['file', jpeg, 'b.jpg'],
      ]),
    );
    expectError(r, 413, 'TOO_MANY_FILES', /At most 1 file is/);
    await expectNothingStored();
  });

  it('refuses a data URL over MAX_BASE64_SIZE, and a body far over it', async () => {
    const over = Buffer.concat([jpeg, Buffer.alloc(30_000)]); // decodes to 38 KB > 30 000 bytes
    expectError(
      await postJson('/media/upload/base64', {
        file: `data:image/jpeg;base64,${over.toString('base64')}`,
      }),
      413,
      'FILE_TOO_LARGE',
    );
    // The JSON body itself is capped at what the limit's base64 needs (plus room for fields).
    expectError(
      await postJson('/media/upload/base64', {
        file: `data:image/tiff;base64,${big.toString('base64')}`,
      }),
      413,
      'PAYLOAD_TOO_LARGE',
    );
    await expectNothingStored();
  });
});

describe('415 Unsupported Media Type', () => {
  const svg = Buffer.from(
    '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
  );
  const text = Buffer.from('just some text, not an image');

  it.each([
    ['an SVG', svg, 'x.svg'],
    ['text named .jpg', text, 'x.jpg'],
  ])('refuses %s, whatever its name says', async (_what, bytes, name) => {
    expectError(
      await postForm('/media/upload', form([['file', bytes, name]])),
      415,
      'UNSUPPORTED_MEDIA_TYPE',
    );
    expectError(
      await postJson('/media/upload/base64', {
        file: `data:image/jpeg;base64,${bytes.toString('base64')}`,
      }),
      415,
      'UNSUPPORTED_MEDIA_TYPE',
    );
    await expectNothingStored();
  });

  it('rejects the whole multiple upload when one file is refused', async () => {
    const r = await postForm(
      '/media/upload/multiple',
      form([
        ['files', jpeg, 'ok-1.jpg'],
        ['files', fixture('minimal-document.pdf'), 'ok-2.pdf'],
        ['files', svg, 'bad.svg'],
      ]),
    );
    expectError(r, 415, 'UNSUPPORTED_MEDIA_TYPE', /bad\.svg/);
    await expectNothingStored();
  });
});
