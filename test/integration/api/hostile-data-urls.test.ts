/**
 * Hostile data URLs on POST /media/upload/base64: malformed ones get 400
 * INVALID_DATA_URL (or VALIDATION_FAILED when `file` is not a string), bytes
 * that are no accepted type get 415 whatever the declared type says, and
 * nothing is stored for any of them. (The basic cases, no prefix, "@@@@", an
 * empty data part and an empty string, are in errors.test.ts.)
 */
import sharp from 'sharp';
import type { MediaView as Media } from '../../../api/domain/media-view';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { fixture, sha256 } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';

type Body = {
  statusCode: number;
  message: string;
  error?: string;
  data?: Media;
  requestId?: string;
};

let api: TestApi;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('hostiledataurl');
  org = await api.createOrg('hostile-data');
});
afterAll(() => api.close());

const jpeg = fixture('Canon_40D.jpg');
const b64 = jpeg.toString('base64');
const unpadded = b64.replace(/=+$/, '');
/** No valid base64 has a length of 4n+1 (one character cannot make a byte). */
const fourNPlusOne = unpadded + 'A'.repeat((5 - (unpadded.length % 4)) % 4);
const svg = Buffer.from(
  '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script></svg>',
);
const html = Buffer.from('<!doctype html><html><script>alert(1)</script></html>');

async function post(body: unknown, contentType = 'application/json') {
  const res = await fetch(`${api.url}/media/upload/base64`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': contentType },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const json = (await res.json()) as Body;
  expectMatchesSpec('POST', '/media/upload/base64', res.status, json, res.headers);
  return { status: res.status, body: json, requestId: res.headers.get('x-request-id') };
}

async function expectNothingStored() {
  expect(await api.ctx.models.Media.countDocuments({ organizationId: org.organization.id })).toBe(
    0,
  );
  expect(await api.objectKeys('hostile-data/')).toEqual([]);
}

async function expectRefused(file: unknown, status: number, code: string, extra = {}) {
  const r = await post({ file, ...extra });
  expect({ status: r.status, code: r.body.error }).toEqual({ status, code });
  expect(r.body.statusCode).toBe(status);
  expect(r.body.requestId).toBe(r.requestId);
  await expectNothingStored();
  return r.body;
}

describe('malformed data URLs: 400 INVALID_DATA_URL, nothing stored', () => {
  it.each([
    [
      'the URL-safe alphabet',
      `data:image/jpeg;base64,${b64.replace(/\+/g, '-').replace(/\//g, '_')}`,
    ],
    ['padding in the middle', `data:image/jpeg;base64,${b64.slice(0, 8)}==${b64.slice(8)}`],
    ['a length of 4n+1 characters', `data:image/jpeg;base64,${fourNPlusOne}`],
    ['three padding characters', `data:image/jpeg;base64,${b64.replace(/=*$/, '')}===`],
    ['non-ASCII letters', `data:image/jpeg;base64,${b64.slice(0, 100)}é${b64.slice(100)}`],
    ['a NUL character', `data:image/jpeg;base64,${b64.slice(0, 100)}\u0000${b64.slice(100)}`],
    [
      'percent-encoding instead of base64',
      `data:image/jpeg,${encodeURIComponent(jpeg.toString('latin1'))}`,
    ],
    ['base64 named as a parameter value', `data:image/jpeg;encoding=base64,${b64}`],
    ['no "data:" scheme', `image/jpeg;base64,${b64}`],
    ['another scheme', `javascript:alert(1)//;base64,${b64}`],
    ['no comma', `data:image/jpeg;base64${b64}`],
    ['a media type of 600 characters', `data:image/${'x'.repeat(600)};base64,${b64}`],
    ['"data:," only', 'data:,'],
    ['whitespace as the data', 'data:image/png;base64, \r\n\t '],
    ['a URL', 'https://example.com/cat.jpg'],
  ])('refuses %s', async (_what, file) => {
    const body = await expectRefused(file, 400, 'INVALID_DATA_URL');
    expect(body.message).toMatch(/data URL|base64/);
  });

  it.each([
    ['a number', 42],
    ['null', null],
    ['an array', [`data:image/jpeg;base64,${b64}`]],
    ['an object', { data: b64 }],
    ['a boolean', true],
  ])('refuses file as %s (400 VALIDATION_FAILED)', async (_what, file) => {
    await expectRefused(file, 400, 'VALIDATION_FAILED');
  });

  it('refuses a malformed data URL in a urlencoded form too', async () => {
    const r = await post(
      `file=${encodeURIComponent('data:image/jpeg;base64,@@@@')}`,
      'application/x-www-form-urlencoded',
    );
    expect([r.status, r.body.error]).toEqual([400, 'INVALID_DATA_URL']);
    await expectNothingStored();
  });
});

describe('0-byte and tiny files', () => {
  it('refuses a data URL that decodes to 0 bytes (400 INVALID_DATA_URL)', async () => {
    for (const file of ['data:image/png;base64,', 'data:;base64,', 'data:image/png;base64,\r\n'])
      await expectRefused(file, 400, 'INVALID_DATA_URL');
  });

  it('refuses 1 to 3 bytes, too few to be any accepted type (415)', async () => {
    for (const file of [
      'data:image/png;base64,AA==',
      'data:image/png;base64,iVA=',
      'data:image/png;base64,JVBE',
    ])
      await expectRefused(file, 415, 'UNSUPPORTED_MEDIA_TYPE');
  });
});

describe('declared type against the bytes: the bytes win', () => {
  it.each([
    ['an SVG declared as PNG', 'image/png', svg],
    ['HTML declared as JPEG', 'image/jpeg', html],
    ['an SVG declared as SVG', 'image/svg+xml', svg],
    ['HTML declared as PDF', 'application/pdf', html],
  ])('refuses %s (415)', async (_what, declared, bytes) => {
    await expectRefused(
      `data:${declared};base64,${bytes.toString('base64')}`,
      415,
      'UNSUPPORTED_MEDIA_TYPE',
      {
        mimetype: declared,
      },
    );
  });

  it.each([
    ['a JPEG declared as SVG', 'image/svg+xml', 'text/html'],
    ['a JPEG declared as PDF', 'application/pdf', 'application/pdf'],
    ['a JPEG declared as nothing', '', 'image/gif'],
    ['a JPEG declared as a made-up type', 'x-evil/x-payload;charset=utf-8', 'image/x-evil'],
  ])('stores %s as a JPEG', async (_what, declared, mimetypeField) => {
    const r = await post({
      file: `data:${declared};base64,${b64}`,
      mimetype: mimetypeField,
      name: 'declared.svg',
    });
    expect(r.status).toBe(201);
    const media = r.body.data!;
    expect(media).toMatchObject({
      mimetype: 'image/jpeg',
      name: 'declared.svg',
      checksum: sha256(jpeg),
    });
    expect(media.key).toMatch(/^hostile-data\/declared-[A-Za-z0-9_-]{12}\.jpg$/);
    const download = await fetch(
      `${api.url}/media/download?media=${encodeURIComponent(media.key)}`,
      { headers: org.auth },
    );
    expect(download.headers.get('content-type')).toBe('image/jpeg');
    expect(download.headers.get('x-content-type-options')).toBe('nosniff');
    expect(Buffer.from(await download.arrayBuffer()).equals(jpeg)).toBe(true);
    await api.ctx.models.Media.deleteMany({ organizationId: org.organization.id });
    await api.ctx.store.remove(media.key);
  });

  it('stores a PNG wrapped in MIME line breaks with its exact bytes', async () => {
    const png = await sharp({ create: { width: 4, height: 4, channels: 3, background: '#f00' } })
      .png()
      .toBuffer();
    const wrapped = png.toString('base64').replace(/.{1,76}/g, '$&\r\n');
    const r = await post({ file: `DATA:IMAGE/PNG;BASE64,${wrapped}` });
    expect(r.status).toBe(201);
    expect(r.body.data).toMatchObject({
      mimetype: 'image/png',
      bytes: png.length,
      checksum: sha256(png),
    });
    await api.ctx.models.Media.deleteMany({ organizationId: org.organization.id });
    await api.ctx.store.remove(r.body.data!.key);
  });
});
