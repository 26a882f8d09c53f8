/**
 * Slow and piled-up uploads, over real HTTP: a client
 * that sends half a multipart body and stalls is cut after
 * `UPLOAD_IDLE_TIMEOUT_MS` (408, connection closed) with nothing left behind
 * (no record, no object, no open multipart upload, though 9 MB had opened
 * one); and one token's uploads in flight are capped (`MAX_UPLOADS_IN_FLIGHT`,
 * then 429 TOO_MANY_UPLOADS with Retry-After) while another token is served.
 */
import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';

const IDLE_MS = 1_000;
const CAP = 2;
const MB = 1024 * 1024;

let api: TestApi;
let org: TestOrg;
let other: TestOrg;

beforeAll(async () => {
  api = await startApi('upload-guard', {
    env: {
      RATE_LIMIT_MAX: '0',
      UPLOAD_IDLE_TIMEOUT_MS: String(IDLE_MS),
      MAX_UPLOADS_IN_FLIGHT: String(CAP),
      // An upload past one part is a multipart upload at once (the stalled one opens one).
      S3_SINGLE_PUT_MAX: '0',
    },
  });
  org = await api.createOrg('upload-guard');
  other = await api.createOrg('upload-guard-other');
}, 60_000);

afterAll(async () => {
  await api?.close();
}, 30_000);

/** An upload over a raw socket that declares `total` file bytes and sends `sent` of them. */
async function partialUpload(who: TestOrg, total: number, sent: number) {
  const boundary = 'guard-boundary';
  const file = Buffer.concat([fixture('minimal-document.pdf'), randomBytes(total)]);
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="slow.pdf"\r\n` +
      'Content-Type: application/pdf\r\n\r\n',
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const length = head.length + file.length + tail.length;
  const { port } = new URL(api.url);
  const socket: Socket = connect({ port: Number(port), host: '127.0.0.1' });
  await new Promise((resolve) => socket.once('connect', resolve));
  let response = '';
  socket.on('data', (chunk: Buffer) => (response += chunk.toString('latin1')));
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.write(
    `POST /media/upload HTTP/1.1\r\nHost: 127.0.0.1\r\n${who.auth.Authorization ? `Authorization: ${who.auth.Authorization}\r\n` : ''}` +
      `Content-Type: multipart/form-data; boundary=${boundary}\r\nContent-Length: ${length}\r\n\r\n`,
  );
  socket.write(head);
  socket.write(file.subarray(0, sent));
  let at = sent;
  return {
    socket,
    closed,
    response: () => response,
    /** Sends one more byte (keeps the upload from going idle). */
    trickle: () => socket.write(file.subarray(at, ++at)),
  };
}

async function upload(who: TestOrg, name = 'a.pdf') {
  const fd = new FormData();
  fd.append('file', new Blob([fixture('minimal-document.pdf')]), name);
  const res = await fetch(`${api.url}/media/upload`, {
    method: 'POST',
    headers: who.auth,
    body: fd,
  });
  const body = (await res.json()) as Record<string, unknown>;
  expectMatchesSpec('POST', '/media/upload', res.status, body, res.headers);
  return { status: res.status, body, headers: res.headers };
}

async function expectNothingLeft(who: TestOrg, records = 0) {
  await eventually(async () => {
    expect(await api.ctx.store.listIncompleteUploads('')).toEqual([]);
  });
  expect(await api.ctx.models.Media.countDocuments({ organizationId: who.organization.id })).toBe(
    records,
  );
  expect(await api.objectKeys(`${who.organization.slug}/`)).toHaveLength(records);
}

it('cuts an upload that stalls half-way after UPLOAD_IDLE_TIMEOUT_MS: 408, closed, nothing kept', async () => {
  // 9 MB of 18: storage has a multipart upload open when the client stalls.
  const stalled = await partialUpload(org, 18 * MB, 9 * MB);
  await stalled.closed; // the server closes the connection (it would wait forever otherwise)
  const response = stalled.response();
  expect(response).toMatch(/^HTTP\/1\.1 408 /);
  const body = JSON.parse(response.slice(response.indexOf('\r\n\r\n') + 4)) as Record<
    string,
    unknown
  >;
  expect(body).toMatchObject({ statusCode: 408, error: 'REQUEST_TIMEOUT', limit: IDLE_MS });
  const headers = new Headers(
    response
      .slice(response.indexOf('\r\n') + 2, response.indexOf('\r\n\r\n'))
      .split('\r\n')
      .map(
        (line) =>
          [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 1).trim()] as [
            string,
            string,
          ],
      ),
  );
  expectMatchesSpec('POST', '/media/upload', 408, body, headers);
  await expectNothingLeft(org);
  // The API still serves.
  expect((await upload(org)).status).toBe(201);
  await api.ctx.models.Media.deleteMany({ organizationId: org.organization.id });
  await api.ctx.store.removeMany(await api.objectKeys(`${org.organization.slug}/`));
}, 60_000);

it('refuses a token its uploads past MAX_UPLOADS_IN_FLIGHT with 429; another token is served', async () => {
  const slow = [
    await partialUpload(org, 64 * 1024, 1024),
    await partialUpload(org, 64 * 1024, 1024),
  ];
  const keepAlive = setInterval(() => slow.forEach((s) => s.trickle()), 100);
  try {
    // Both are counted once the server has read their headers: give it a moment.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const refused = await upload(org);
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ error: 'TOO_MANY_UPLOADS', limit: CAP });
    expect(refused.headers.get('retry-after')).toBe('1');
    // Another organization's token is not affected.
    const served = await upload(other);
    expect(served.status).toBe(201);
  } finally {
    clearInterval(keepAlive);
  }
  // Once the slow uploads are cut (idle), their slots are free again.
  await Promise.all(slow.map((s) => s.closed));
  expect((await upload(org)).status).toBe(201);
  await expectNothingLeft(org, 1);
  await expectNothingLeft(other, 1);
}, 60_000);
