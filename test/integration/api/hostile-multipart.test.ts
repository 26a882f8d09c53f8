/**
 * Hostile and malformed multipart bodies, sent as raw bytes to a real API
 * process: each gets the documented status in the error envelope, the process
 * stays up, and nothing is left behind (no record, no object, no open
 * multipart upload in the bucket).
 */
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startApiProcess, type ServiceProcess } from '../../support/processes';
import { eventually } from '../../support/eventually';

const MB = 1024 * 1024;
const MAX_FILES = 3;
const jpeg = fixture('Canon_40D.jpg');
const tinyPdf = Buffer.from('%PDF-1.4\n%%EOF\n');

let harness: TestApi; // in-process: makes the organization and looks behind the API
let api: ServiceProcess; // the API under test, a real process
let org: TestOrg;

beforeAll(async () => {
  harness = await startApi('hostilemp', {
    // S3_SINGLE_PUT_MAX=0: a body past one part (8 MiB) goes as a multipart upload at once.
    env: { MAX_FILES: String(MAX_FILES), MAX_FILE_SIZE: String(40 * MB), S3_SINGLE_PUT_MAX: '0' },
  });
  org = await harness.createOrg('hostile-mp');
  api = await startApiProcess(harness.env.env);
}, 90_000);
afterAll(async () => {
  await api?.kill('SIGTERM');
  await harness?.close();
}, 30_000);

/** What the API answered: an error envelope, a record, or (non-JSON) text. */
type ReplyBody = {
  statusCode?: number;
  message?: string;
  error?: string;
  requestId?: string;
  limit?: number;
  data?: { key: string; name: string; mimetype: string };
};
type Reply = {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: ReplyBody;
};

/**
 * Sends `body` as is to the API process. `chunks` are written one by one
 * (chunked transfer encoding unless a Content-Length is given); `beforeEnd`
 * runs after the last chunk and before the request ends.
 */
function send(
  path: string,
  headers: Record<string, string>,
  chunks: Buffer[],
  beforeEnd?: () => Promise<void>,
): Promise<Reply> {
  const { port } = new URL(api.url!);
  return new Promise<Reply>((resolve, reject) => {
    let answered = false;
    const req = request({
      host: '127.0.0.1',
      port,
      method: 'POST',
      path,
      headers: { ...org.auth, ...headers },
    });
    req.on('response', (res) => {
      answered = true;
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => {
        const text = Buffer.concat(parts).toString();
        let body: ReplyBody = { message: text };
        try {
          body = JSON.parse(text) as ReplyBody;
        } catch {
          // not JSON (Node's own 431, for one): the text as the message
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body });
      });
    });
    // The API answers as soon as it knows the body is bad and closes the
    // connection; a write after that fails, which is expected.
    req.on('error', (err) => {
      if (!answered) reject(err);
    });
    void (async () => {
      for (const chunk of chunks) {
        if (answered || req.destroyed) return;
        if (!req.write(chunk)) await new Promise((r) => req.once('drain', r));
      }
      await beforeEnd?.();
      if (!req.destroyed) req.end();
    })().catch(reject);
  });
}

const crlf = '\r\n';
const boundary = () => `----hostile${randomBytes(8).toString('hex')}`;
const multipartType = (b: string) => ({ 'Content-Type': `multipart/form-data; boundary=${b}` });
const filePart = (b: string, name: string, filename: string, data: Buffer, type = 'image/jpeg') =>
  Buffer.concat([
    Buffer.from(
      `--${b}${crlf}Content-Disposition: form-data; name="${name}"; filename="${filename}"${crlf}Content-Type: ${type}${crlf}${crlf}`,
    ),
    data,
    Buffer.from(crlf),
  ]);
const fieldPart = (b: string, name: string, value: string) =>
  Buffer.from(
    `--${b}${crlf}Content-Disposition: form-data; name="${name}"${crlf}${crlf}${value}${crlf}`,
  );
const closing = (b: string) => Buffer.from(`--${b}--${crlf}`);
const withLength = (body: Buffer, b: string) => ({
  ...multipartType(b),
  'Content-Length': String(body.length),
});

/** The documented error envelope with this status and code. */
function expectError(reply: Reply, path: string, status: number, code: string, message?: RegExp) {
  expect({ status: reply.status, code: reply.body.error }).toEqual({
    status,
    code,
  });
  expect(reply.body).toMatchObject({ statusCode: status, message: expect.any(String) as string });
  expect(reply.body.requestId).toBe(reply.headers['x-request-id']);
  if (message) expect(reply.body.message).toMatch(message);
  expectMatchesSpec('POST', path, reply.status, reply.body, reply.headers);
}

/** No record, no object and no open multipart upload of the organization. */
async function expectNothingLeft() {
  const prefix = `${org.organization.slug}/`;
  await eventually(async () => {
    expect(
      await harness.ctx.models.Media.countDocuments({ organizationId: org.organization.id }),
    ).toBe(0);
    expect(await harness.objectKeys(prefix)).toEqual([]);
    expect(await harness.ctx.store.listIncompleteUploads(prefix)).toEqual([]);
  });
}

/** The API process is alive and answers. */
async function expectStillUp() {
  expect(api.child.exitCode).toBeNull();
  expect(api.child.signalCode).toBeNull();
  expect((await fetch(`${api.url!}/healthz`)).status).toBe(200);
}

afterEach(async () => {
  await expectNothingLeft();
  await expectStillUp();
});

describe('the multipart envelope', () => {
  it.each([
    ['no boundary', 'multipart/form-data'],
    ['an empty boundary', 'multipart/form-data; boundary='],
    ['an unterminated quoted boundary', 'multipart/form-data; boundary="abc'],
    ['a boundary with no form type', 'multipart/; boundary=abc'],
  ])('refuses a Content-Type with %s (400)', async (_what, contentType) => {
    const body = Buffer.concat([filePart('abc', 'file', 'a.jpg', jpeg), closing('abc')]);
    const reply = await send(
      '/media/upload',
      { 'Content-Type': contentType, 'Content-Length': String(body.length) },
      [body],
    );
    // "multipart/; boundary=abc" is not multipart/form-data at all: the route says so.
    expectError(reply, '/media/upload', 400, 'BAD_REQUEST', /multipart/);
  });

  it('refuses an empty body and a body with no boundary line in it (400)', async () => {
    const b = boundary();
    expectError(
      await send('/media/upload', withLength(Buffer.alloc(0), b), []),
      '/media/upload',
      400,
      'BAD_REQUEST',
      /malformed|end of form/i,
    );
    const garbage = randomBytes(64 * 1024);
    expectError(
      await send('/media/upload', withLength(garbage, b), [garbage]),
      '/media/upload',
      400,
      'BAD_REQUEST',
      /malformed|end of form/i,
    );
  });

  it('refuses a form whose lines end in LF only (400)', async () => {
    const b = boundary();
    const body = Buffer.from(
      `--${b}\nContent-Disposition: form-data; name="file"; filename="a.jpg"\n\n${jpeg.toString('latin1')}\n--${b}--\n`,
      'latin1',
    );
    const reply = await send('/media/upload', withLength(body, b), [body]);
    expectError(reply, '/media/upload', 400, 'BAD_REQUEST');
  });
});

describe('a truncated body', () => {
  it('refuses a form cut inside a file part (400), before and after storage started a multipart upload', async () => {
    for (const size of [100 * 1024, 12 * MB]) {
      const b = boundary();
      const head = filePart(b, 'file', 'cut.jpg', jpeg).subarray(0, -2); // no CRLF, no closing boundary
      const chunks = [head];
      for (let sent = 0; sent < size; sent += MB) chunks.push(randomBytes(MB));
      const reply = await send('/media/upload', multipartType(b), chunks, async () => {
        if (size > 8 * MB) {
          // The bytes are already flowing into a multipart upload in the bucket...
          await eventually(async () =>
            expect(
              await harness.ctx.store.listIncompleteUploads(`${org.organization.slug}/`),
            ).toHaveLength(1),
          );
        }
        // ...when the body ends (chunked encoding, well-formed) without the closing boundary.
      });
      expectError(reply, '/media/upload', 400, 'BAD_REQUEST', /end of (form|file)|malformed/i);
      await expectNothingLeft();
    }
  });

  it('refuses a form cut inside the headers of a part, after a complete file (400)', async () => {
    const b = boundary();
    const body = Buffer.concat([
      filePart(b, 'files', 'one.jpg', jpeg),
      Buffer.from(`--${b}${crlf}Content-Disposition: form-data; name="files"; filena`),
    ]);
    const reply = await send('/media/upload/multiple', withLength(body, b), [body]);
    expectError(reply, '/media/upload/multiple', 400, 'BAD_REQUEST');
  });

  it('refuses a form that stops right after a boundary line (400)', async () => {
    const b = boundary();
    const body = Buffer.concat([filePart(b, 'file', 'a.jpg', jpeg), Buffer.from(`--${b}`)]);
    const reply = await send('/media/upload', withLength(body, b), [body]);
    expectError(reply, '/media/upload', 400, 'BAD_REQUEST');
  });
});

describe('parts without a filename', () => {
  it('refuses a "file" part sent as a field, small or large, whatever its Content-Type (400)', async () => {
    for (const [data, type] of [
      [Buffer.from('just text'), 'text/plain'],
      [jpeg, 'image/jpeg'], // 7.9 KB of JPEG
      [Buffer.concat([jpeg, randomBytes(200 * 1024)]), 'image/jpeg'], // over the 64 KB field limit
    ] as const) {
      const b = boundary();
      const body = Buffer.concat([
        Buffer.from(
          `--${b}${crlf}Content-Disposition: form-data; name="file"${crlf}Content-Type: ${type}${crlf}${crlf}`,
        ),
        data,
        Buffer.from(crlf),
        closing(b),
      ]);
      const reply = await send('/media/upload', withLength(body, b), [body]);
      expectError(reply, '/media/upload', 400, 'VALIDATION_FAILED', /must be a file part/);
    }
  });

  it('refuses a part with an empty filename as a field (400)', async () => {
    const b = boundary();
    const body = Buffer.concat([filePart(b, 'file', '', Buffer.from('x')), closing(b)]);
    const reply = await send('/media/upload', withLength(body, b), [body]);
    expectError(reply, '/media/upload', 400, 'VALIDATION_FAILED', /must be a file part/);
  });

  it('stores an application/octet-stream part without a filename under the name "file" (201)', async () => {
    const b = boundary();
    const body = Buffer.concat([
      Buffer.from(
        `--${b}${crlf}Content-Disposition: form-data; name="file"${crlf}Content-Type: application/octet-stream${crlf}${crlf}`,
      ),
      jpeg,
      Buffer.from(crlf),
      closing(b),
    ]);
    const reply = await send('/media/upload', withLength(body, b), [body]);
    expect(reply.status).toBe(201);
    expectMatchesSpec('POST', '/media/upload', reply.status, reply.body, reply.headers);
    expect(reply.body.data).toMatchObject({ name: 'file', mimetype: 'image/jpeg' });
    expect(reply.body.data?.key).toMatch(/^hostile-mp\/file-[A-Za-z0-9_-]{12}\.jpg$/);
    // (this one is kept on purpose; clean it for the "nothing left" check)
    await harness.ctx.models.Media.deleteMany({ organizationId: org.organization.id });
    await harness.ctx.store.remove(reply.body.data!.key);
  });

  it('ignores a part without Content-Disposition, so the file is missing (400)', async () => {
    const b = boundary();
    const body = Buffer.concat([
      Buffer.from(`--${b}${crlf}Content-Type: image/jpeg${crlf}${crlf}`),
      jpeg,
      Buffer.from(crlf),
      closing(b),
    ]);
    const reply = await send('/media/upload', withLength(body, b), [body]);
    expectError(reply, '/media/upload', 400, 'VALIDATION_FAILED', /"file" is required/);
  });
});

describe('a thousand tiny parts', () => {
  const many = (b: string, make: (i: number) => Buffer) =>
    Buffer.concat([...Array.from({ length: 1000 }, (_, i) => make(i)), closing(b)]);

  it('refuses 1,000 tiny files on /media/upload/multiple (413 TOO_MANY_FILES), keeping none', async () => {
    const b = boundary();
    const body = many(b, (i) => filePart(b, 'files', `${i}.jpg`, jpeg.subarray(0, 200)));
    const reply = await send('/media/upload/multiple', withLength(body, b), [body]);
    expectError(reply, '/media/upload/multiple', 413, 'TOO_MANY_FILES', /At most 3 files/);
  });

  it('refuses 1,000 tiny PDFs on /media/merge-pdfs (413 TOO_MANY_FILES), keeping no temporary input', async () => {
    const b = boundary();
    const body = many(b, (i) => filePart(b, 'files', `${i}.pdf`, tinyPdf, 'application/pdf'));
    const reply = await send('/media/merge-pdfs', withLength(body, b), [body]);
    expectError(reply, '/media/merge-pdfs', 413, 'TOO_MANY_FILES', /At most 50 /);
    expect(reply.body.limit).toBe(50); // MAX_MERGE_INPUTS' default
  });

  it('refuses 1,000 tiny folder fields (413 TOO_MANY_PARTS)', async () => {
    const b = boundary();
    const body = Buffer.concat([
      filePart(b, 'file', 'a.jpg', jpeg),
      many(b, () => fieldPart(b, 'folder', 'x')),
    ]);
    const reply = await send('/media/upload', withLength(body, b), [body]);
    expectError(reply, '/media/upload', 413, 'TOO_MANY_PARTS', /fields/);
  });

  it('refuses 1,000 parts without Content-Disposition (413 TOO_MANY_PARTS)', async () => {
    const b = boundary();
    const body = Buffer.concat([
      filePart(b, 'files', 'a.jpg', jpeg),
      many(b, () => Buffer.from(`--${b}${crlf}X-Nothing: 1${crlf}${crlf}x${crlf}`)),
    ]);
    const reply = await send('/media/upload/multiple', withLength(body, b), [body]);
    expectError(reply, '/media/upload/multiple', 413, 'TOO_MANY_PARTS');
  });

  it('accepts a form exactly at the limits: 3 files and 20 fields (201)', async () => {
    const b = boundary();
    const body = Buffer.concat([
      ...Array.from({ length: 20 }, () => fieldPart(b, 'folder', 'at-the-limit')),
      ...Array.from({ length: MAX_FILES }, (_, i) => filePart(b, 'files', `${i}.jpg`, jpeg)),
      closing(b),
    ]);
    const reply = await send('/media/upload/multiple', withLength(body, b), [body]);
    expect(reply.status).toBe(201);
    expect((reply.body.data as unknown as { media: unknown[] }).media).toHaveLength(MAX_FILES);
    await harness.ctx.models.Media.deleteMany({ organizationId: org.organization.id });
    await harness.ctx.store.removeMany(await harness.objectKeys(`${org.organization.slug}/`));
  });
});

describe('headers over the limit', () => {
  it('refuses a part whose headers are over 16 KB, after a file already stored (400)', async () => {
    for (const headers of [
      `Content-Disposition: form-data; name="files"; filename="${'a'.repeat(20_000)}.jpg"`,
      `Content-Disposition: form-data; name="files"; filename="b.jpg"${crlf}${Array.from(
        { length: 3_000 },
        (_, i) => `X-H${i}: v`,
      ).join(crlf)}`,
    ]) {
      const b = boundary();
      const body = Buffer.concat([
        filePart(b, 'files', 'first.jpg', jpeg),
        Buffer.from(`--${b}${crlf}${headers}${crlf}${crlf}`),
        jpeg,
        Buffer.from(crlf),
        closing(b),
      ]);
      const reply = await send('/media/upload/multiple', withLength(body, b), [body]);
      expectError(reply, '/media/upload/multiple', 400, 'BAD_REQUEST', /header/i);
      await expectNothingLeft();
    }
  });

  it('answers request headers over the HTTP limit with 431, and stays up', async () => {
    const b = boundary();
    const body = Buffer.concat([filePart(b, 'file', 'a.jpg', jpeg), closing(b)]);
    const reply = await send(
      '/media/upload',
      { ...withLength(body, b), 'X-Padding': 'p'.repeat(20 * 1024) },
      [body],
    ).catch((err: NodeJS.ErrnoException) => ({
      status: -1,
      headers: {},
      body: { message: err.code },
    }));
    // Node's HTTP parser refuses them before Express sees the request; the
    // server's clientError handler still answers in the documented envelope.
    expect(reply.status).toBe(431);
    expect(reply.body).toMatchObject({
      statusCode: 431,
      error: 'HEADERS_TOO_LARGE',
      message: expect.stringMatching(/headers are larger than the 16 KB/) as unknown,
      requestId: expect.any(String) as unknown,
    });
    expect((reply.headers as Record<string, unknown>)['x-request-id']).toBe(
      (reply.body as { requestId: string }).requestId,
    );
  });
});

describe('unknown and misplaced parts', () => {
  it.each([
    ['/media/upload', 'file'],
    ['/media/upload/multiple', 'files'],
  ])(
    'refuses an unknown field after the file on %s (400), removing the stored file',
    async (path, field) => {
      const b = boundary();
      const body = Buffer.concat([
        filePart(b, field, 'a.jpg', jpeg),
        fieldPart(b, 'colour', 'blue'),
        closing(b),
      ]);
      const reply = await send(path, withLength(body, b), [body]);
      expectError(reply, path, 400, 'VALIDATION_FAILED', /unknown field "colour"/);
    },
  );

  it('refuses an unknown field on /media/merge-pdfs (400), removing the temporary input', async () => {
    const b = boundary();
    const body = Buffer.concat([
      filePart(b, 'files', 'a.pdf', tinyPdf, 'application/pdf'),
      fieldPart(b, 'password', 'hunter2'),
      closing(b),
    ]);
    const reply = await send('/media/merge-pdfs', withLength(body, b), [body]);
    expectError(reply, '/media/merge-pdfs', 400, 'VALIDATION_FAILED', /unknown field "password"/);
  });

  it('refuses a file under an unexpected field name after a good one (400)', async () => {
    const b = boundary();
    const body = Buffer.concat([
      filePart(b, 'files', 'a.jpg', jpeg),
      filePart(b, 'avatar', 'b.jpg', jpeg),
      closing(b),
    ]);
    const reply = await send('/media/upload/multiple', withLength(body, b), [body]);
    expectError(reply, '/media/upload/multiple', 400, 'VALIDATION_FAILED', /unexpected file field/);
  });

  it('refuses a nested multipart/mixed body sent as the file (415)', async () => {
    const inner = 'inner-boundary';
    const nested = Buffer.from(
      `--${inner}${crlf}Content-Type: image/jpeg${crlf}${crlf}${jpeg.toString('latin1')}${crlf}--${inner}--${crlf}`,
      'latin1',
    );
    const b = boundary();
    const body = Buffer.concat([
      filePart(b, 'file', 'nested.jpg', nested, `multipart/mixed; boundary=${inner}`),
      closing(b),
    ]);
    const reply = await send('/media/upload', withLength(body, b), [body]);
    expectError(reply, '/media/upload', 415, 'UNSUPPORTED_MEDIA_TYPE');
  });
});
