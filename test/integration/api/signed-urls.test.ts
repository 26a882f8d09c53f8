/**
 * Signed URLs through the real API, MongoDB, Redis and S3: POST /media/sign
 * (one key, several, expiry bound, scopes, another tenant's key, render URLs),
 * a signed URL read without a token (bytes, ETag, Range), refused when it has
 * expired (its own code), was changed in any parameter, names another
 * organization, or its key was retired from URL_SIGNING_KEYS (rotation: an
 * old key second in the list still verifies), a 404 once the record is
 * deleted, and the feature off without keys. Expiry is not waited for: a
 * signer whose clock reads an hour earlier makes an expired URL.
 */
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createApp } from '../../../api/app';
import { createHttpServer } from '../../../api/http-server';
import { SignedUrlService } from '../../../api/services/signed-urls.service';
import { signedQuery } from '../../../api/domain/url-signature';
import type { Config } from '../../../shared/config';
import sharp from 'sharp';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker } from '../../support/worker';

const OLD_KEY = 'old-signing-key-0123456789abcdef0123456789';
const NEW_KEY = 'new-signing-key-fedcba9876543210fedcba9876';

type Json = Record<string, unknown>;
type Signed = {
  expiresAt: string;
  expires: number;
  urls: { mediaKey: string; url: string }[];
  url?: string;
};

let api: TestApi;
let alpha: TestOrg;
let beta: TestOrg;
const jpeg = fixture('Canon_40D.jpg');
const pdf = fixture('minimal-document.pdf');
const keys = { jpeg: '', pdf: '', other: '', beta: '' };

/** POST /media/sign on `base` (default: the API), checked against the spec. */
async function sign(body: Json, org: TestOrg = alpha, base = api.url) {
  const res = await fetch(`${base}/media/sign`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  expectMatchesSpec('POST', '/media/sign', res.status, text, res.headers);
  const parsed = JSON.parse(text) as { data: Signed; error?: string; message: string };
  return { status: res.status, body: parsed, data: parsed.data };
}

/** `url` (signed for PUBLIC_BASE_URL) sent to the server at `base`. */
const at = (base: string, url: string) =>
  base + (url.startsWith('/') ? url : url.slice(new URL(url).origin.length));

/** GET a URL with no token (from the server at `base`); the answer checked against the spec. */
async function get(url: string, headers: Record<string, string> = {}, base = api.url) {
  const res = await fetch(at(base, url), { headers });
  const bytes = Buffer.from(await res.arrayBuffer());
  const path = new URL(at(base, url)).pathname;
  if (path === '/media/download' || path === '/media/render') {
    expectMatchesSpec('GET', path, res.status, bytes, res.headers);
  }
  const json = res.headers.get('content-type')?.startsWith('application/json')
    ? (JSON.parse(bytes.toString()) as Json)
    : undefined;
  return { res, bytes, json };
}

/** Another URL with one parameter changed (or removed, with undefined). */
function withParam(url: string, name: string, value: string | undefined): string {
  const u = new URL(url);
  if (value === undefined) u.searchParams.delete(name);
  else u.searchParams.set(name, value);
  return u.toString();
}

/** An app on the API's own services with other signing settings (a restart after a key change). */
const servers: Server[] = [];
async function appWith(urlSigning: Config['urlSigning']): Promise<string> {
  const config: Config = { ...api.env.config, urlSigning };
  const signedUrls = new SignedUrlService({
    signing: urlSigning,
    publicBaseUrl: config.publicBaseUrl,
    media: api.ctx.media,
    organizations: api.ctx.repositories.organizations,
    renders: api.ctx.renders,
  });
  const server = createHttpServer(createApp({ ...api.ctx, config, signedUrls }), api.ctx.logger);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  servers.push(server);
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

beforeAll(async () => {
  api = await startApi('signedurls', {
    env: { URL_SIGNING_KEYS: OLD_KEY, URL_SIGNING_MAX_EXPIRES_IN: '86400' },
  });
  alpha = await api.createOrg('signer');
  beta = await api.createOrg('stranger');
  keys.jpeg = await alpha.upload(jpeg, 'photo.jpg');
  keys.pdf = await alpha.upload(pdf, 'contract.pdf');
  keys.other = await alpha.upload(jpeg, 'other.jpg');
  keys.beta = await beta.upload(jpeg, 'theirs.jpg');
});
afterAll(async () => {
  for (const server of servers) {
    server.closeAllConnections();
    server.close();
  }
  await api.close();
});

describe('POST /media/sign', () => {
  it('signs one key: the URL reads the bytes without a token, until expiresAt', async () => {
    const before = Math.floor(Date.now() / 1000);
    const { status, body, data } = await sign({ mediaKey: keys.jpeg, expiresIn: 600 });
    expect(status).toBe(200);
    expect(body).toMatchObject({ statusCode: 200, message: 'Success' });
    expect(data.urls).toEqual([{ mediaKey: keys.jpeg, url: data.url }]);
    expect(data.expires).toBeGreaterThanOrEqual(before + 600);
    expect(data.expires).toBeLessThanOrEqual(Math.floor(Date.now() / 1000) + 600);
    expect(new Date(data.expiresAt).getTime()).toBe(data.expires * 1000);
    const url = new URL(data.url!);
    expect(url.origin + url.pathname).toBe(`${api.env.config.publicBaseUrl}/media/download`);
    expect([...url.searchParams.keys()]).toEqual(['media', 'org', 'expires', 'signature']);
    expect(url.searchParams.get('media')).toBe(keys.jpeg);
    expect(url.searchParams.get('org')).toBe(String(alpha.organization.id));

    const { res, bytes } = await get(data.url!);
    expect(res.status).toBe(200);
    expect(bytes.equals(jpeg)).toBe(true);
    expect(res.headers.get('content-type')).toBe('image/jpeg');
    // The same entity tag as a bearer download; ranges and revalidation as usual.
    const bearer = await fetch(`${api.url}/media/download?media=${keys.jpeg}`, {
      headers: alpha.auth,
    });
    await bearer.arrayBuffer();
    expect(res.headers.get('etag')).toBe(bearer.headers.get('etag'));
    const range = await get(data.url!, { Range: 'bytes=0-99' });
    expect(range.res.status).toBe(206);
    expect(range.bytes.equals(jpeg.subarray(0, 100))).toBe(true);
    const revalidated = await get(data.url!, { 'If-None-Match': res.headers.get('etag')! });
    expect(revalidated.res.status).toBe(304);
  });

  it('signs several keys at once, each URL for its own record', async () => {
    const { status, data } = await sign({ mediaKeys: [keys.jpeg, keys.pdf] });
    expect(status).toBe(200);
    expect(data.url).toBeUndefined();
    expect(data.urls.map((u) => u.mediaKey)).toEqual([keys.jpeg, keys.pdf]);
    // Default lifetime: one hour.
    expect(data.expires - Math.floor(Date.now() / 1000)).toBeGreaterThan(3500);
    expect(data.expires - Math.floor(Date.now() / 1000)).toBeLessThanOrEqual(3600);
    const [a, b] = await Promise.all(data.urls.map((u) => get(u.url)));
    expect(a!.bytes.equals(jpeg)).toBe(true);
    expect(b!.bytes.equals(pdf)).toBe(true);
  });

  it('refuses an expiresIn over URL_SIGNING_MAX_EXPIRES_IN, and malformed requests (400)', async () => {
    for (const body of [
      { mediaKey: keys.jpeg, expiresIn: 86401 },
      { mediaKey: keys.jpeg, expiresIn: 0 },
      { mediaKey: keys.jpeg, expiresIn: 1.5 },
      {},
      { mediaKey: keys.jpeg, mediaKeys: [keys.pdf] },
      { mediaKeys: [] },
      { mediaKey: keys.jpeg, disposition: 'download' },
      { mediaKey: keys.jpeg, extra: true },
      { mediaKey: keys.jpeg, render: { preset: 'thumbnail', w: 10 } },
      { mediaKey: keys.jpeg, render: { w: 0 } },
      { mediaKey: keys.jpeg, render: { fit: 'stretch' } },
      { mediaKey: keys.jpeg, render: { size: 10 } },
      { mediaKey: keys.jpeg, render: { media: keys.other } },
      { mediaKey: keys.jpeg, render: 'thumbnail' },
    ]) {
      const { status, body: answer } = await sign(body);
      expect([JSON.stringify(body), status, answer.error]).toEqual([
        JSON.stringify(body),
        400,
        'VALIDATION_FAILED',
      ]);
    }
    expect((await sign({ mediaKey: keys.jpeg, expiresIn: 86400 })).status).toBe(200);
  });

  it("another organization's key is a 404, and nothing is signed", async () => {
    const { status, body } = await sign({ mediaKeys: [keys.jpeg, keys.beta] });
    expect(status).toBe(404);
    expect(body.error).toBe('MEDIA_NOT_FOUND');
    expect(body.message).toContain(keys.beta);
    expect(body.data).toBeUndefined();
  });

  it('needs the read scope, and only that one', async () => {
    const orgId = alpha.organization.id;
    const readOnly = await api.ctx.tokens.issue(orgId, { scopes: ['read'] });
    const noRead = await api.ctx.tokens.issue(orgId, { scopes: ['write', 'delete'] });
    const as = (token: string): TestOrg => ({
      ...alpha,
      auth: { Authorization: `Bearer ${token}` },
    });
    expect((await sign({ mediaKey: keys.jpeg }, as(readOnly.token))).status).toBe(200);
    const refused = await sign({ mediaKey: keys.jpeg }, as(noRead.token));
    expect([refused.status, refused.body.error]).toEqual([403, 'INSUFFICIENT_SCOPE']);
  });

  it('with render options, signs /media/render URLs that the verification in front of it accepts', async () => {
    const { status, data } = await sign({
      mediaKey: keys.jpeg,
      render: { w: 320, h: 200, fit: 'cover', format: 'webp', q: 70 },
    });
    expect(status).toBe(200);
    const url = new URL(data.url!);
    expect(url.pathname).toBe('/media/render');
    expect([...url.searchParams]).toEqual([
      ['media', keys.jpeg],
      ['w', '320'],
      ['h', '200'],
      ['fit', 'cover'],
      ['format', 'webp'],
      ['q', '70'],
      ['org', String(alpha.organization.id)],
      ['expires', String(data.expires)],
      ['signature', url.searchParams.get('signature')],
    ]);
    const preset = await sign({ mediaKey: keys.jpeg, render: { preset: 'thumbnail' } });
    expect([...new URL(preset.data.url!).searchParams.keys()]).toEqual([
      'media',
      'preset',
      'org',
      'expires',
      'signature',
    ]);
    // With no token, rendered by a worker and cached publicly until the URL expires.
    const worker = await startWorker(api.env.env);
    try {
      const rendered = await get(data.url!);
      expect(rendered.res.status).toBe(200);
      expect(rendered.res.headers.get('cache-control')).toMatch(/^public, max-age=\d+, immutable$/);
      // Cover-fit into 320 × 200, never enlarged (the source is smaller).
      const meta = await sharp(rendered.bytes).metadata();
      expect(meta.format).toBe('webp');
      expect([meta.width <= 320, meta.height <= 200]).toEqual([true, true]);
      const thumb = await get(preset.data.url!);
      expect(thumb.res.status).toBe(200);
      expect((await sharp(thumb.bytes).metadata()).width).toBeLessThanOrEqual(200);
    } finally {
      await worker.close();
    }
    // Changed, it is refused before routing.
    const wider = await get(withParam(data.url!, 'w', '4000'));
    expect([wider.res.status, wider.json?.error]).toEqual([403, 'SIGNED_URL_INVALID']);
    // A PDF's renders are of its pages (test/integration/jobs/pdf-render.test.ts).
    const page = await sign({ mediaKey: keys.pdf, render: { w: 100, page: 2 } });
    expect(page.status).toBe(200);
    expect(new URL(page.data.url!).searchParams.get('page')).toBe('2');
  });
});

describe('POST /media/sign with render options: the render operation’s own rules', () => {
  /** GET /media/render with a token and these options: what the render operation says of them. */
  const renderWith = async (options: Record<string, string | number>) => {
    const query = new URLSearchParams({ media: keys.jpeg });
    for (const [name, value] of Object.entries(options)) query.set(name, String(value));
    const res = await fetch(`${api.url}/media/render?${query.toString()}`, {
      headers: alpha.auth,
    });
    return { status: res.status, body: (await res.json()) as Json };
  };

  it('refuses (400 VALIDATION_FAILED, naming render.<option>) what the render would refuse, as the render does', async () => {
    const maxWidth = api.env.config.render.maxWidth;
    const cases: [Record<string, string | number>, string][] = [
      [{ w: maxWidth + 1 }, 'w'], // over RENDER_MAX_WIDTH (4096), under the old 10,000
      [{ w: 10_000 }, 'w'],
      [{ h: api.env.config.render.maxHeight + 1 }, 'h'],
      [{ preset: 'no-such-preset' }, 'preset'],
      [{ preset: 'thumbnail', fit: 'contain' }, 'fit'],
      [{ format: 'bmp' }, 'format'],
      [{ q: 101 }, 'q'],
      [{ w: 1.5 }, 'w'],
      [{ w: '12px' }, 'w'],
      [{ metadata: 'all' }, 'metadata'],
      [{ fit: 'stretch' }, 'fit'],
    ];
    for (const [options, field] of cases) {
      const signed = await sign({ mediaKey: keys.jpeg, render: options });
      const refused = signed.body as unknown as { error: string; details: { field: string }[] };
      expect([JSON.stringify(options), signed.status, refused.error]).toEqual([
        JSON.stringify(options),
        400,
        'VALIDATION_FAILED',
      ]);
      expect(refused.details.map((d) => d.field)).toContain(`render.${field}`);
      // The render operation refuses the same options, with the same words.
      const rendered = await renderWith(options);
      expect([JSON.stringify(options), rendered.status, rendered.body.error]).toEqual([
        JSON.stringify(options),
        400,
        'VALIDATION_FAILED',
      ]);
      expect(
        (rendered.body.details as { field: string; message: string }[]).map((d) => d.message),
      ).toEqual((refused.details as unknown as { message: string }[]).map((d) => d.message));
    }
    // A value that is neither a string nor a number is refused by its shape.
    const shape = await sign({ mediaKey: keys.jpeg, render: { w: true } });
    expect([shape.status, shape.body.error]).toEqual([400, 'VALIDATION_FAILED']);
  });

  it('signs what the render accepts (format auto or jpg, metadata, no option at all), and the URLs render', async () => {
    const accepted: Record<string, string | number>[] = [
      { format: 'auto', w: 64 },
      { format: 'jpg', metadata: 'keep', w: '48' },
      { metadata: 'strip', w: api.env.config.render.maxWidth },
      { preset: 'thumbnail', format: 'webp' },
      {},
    ];
    const urls: string[] = [];
    for (const options of accepted) {
      const signed = await sign({ mediaKey: keys.jpeg, render: options });
      expect([JSON.stringify(options), signed.status]).toEqual([JSON.stringify(options), 200]);
      const url = new URL(signed.data.url!);
      expect(url.pathname).toBe('/media/render');
      // Written as asked, in the documented order, after the key.
      expect([...url.searchParams].slice(0, -3)).toEqual([
        ['media', keys.jpeg],
        ...['preset', 'w', 'h', 'fit', 'format', 'q', 'metadata']
          .filter((name) => options[name] !== undefined)
          .map((name) => [name, String(options[name])]),
      ]);
      urls.push(signed.data.url!);
    }
    const worker = await startWorker(api.env.env);
    try {
      const auto = await get(urls[0]!, { Accept: 'image/webp,*/*' });
      expect(auto.res.status).toBe(200);
      expect(auto.res.headers.get('content-type')).toBe('image/webp');
      expect(auto.res.headers.get('vary')).toMatch(/Accept/);
      expect((await sharp(auto.bytes).metadata()).width).toBe(64);
      const kept = await get(urls[1]!);
      expect(kept.res.status).toBe(200);
      const meta = await sharp(kept.bytes).metadata();
      expect([meta.format, meta.width, meta.exif !== undefined]).toEqual(['jpeg', 48, true]);
      const original = await get(urls[4]!, { Accept: 'image/jpeg' });
      expect(original.res.status).toBe(200);
      expect((await sharp(original.bytes).metadata()).width).toBe(
        (await sharp(jpeg).metadata()).width,
      );
    } finally {
      await worker.close();
    }
  });
});

describe('a signed URL is refused', () => {
  let url = '';
  beforeAll(async () => {
    url = (await sign({ mediaKey: keys.jpeg, disposition: 'inline' })).data.url!;
    expect((await get(url)).res.status).toBe(200); // control
  });

  const refusedAs = async (changed: string, code: string) => {
    const { res, json } = await get(changed);
    expect([res.status, json?.error]).toEqual([403, code]);
    expect(res.headers.get('cache-control')).toBeNull();
    return json!;
  };

  /** The signature with its first character changed (never the same text again, whatever it was). */
  const tampered = (signature: string) =>
    `${signature.startsWith('A') ? 'B' : 'A'}${signature.slice(1)}`;

  it('when any parameter is changed, added, removed or repeated (403 SIGNED_URL_INVALID)', async () => {
    const changes: [string, string | undefined][] = [
      ['media', keys.other], // another record of the same organization
      ['disposition', 'attachment'],
      ['disposition', undefined],
      ['org', String(beta.organization.id)],
      ['expires', String(Number(new URL(url).searchParams.get('expires')) + 3600)],
      ['w', '100'], // a parameter that was not signed
      ['signature', tampered(new URL(url).searchParams.get('signature')!)],
    ];
    for (const [name, value] of changes) {
      const changed = withParam(url, name, value);
      expect(changed).not.toBe(url);
      await refusedAs(changed, 'SIGNED_URL_INVALID');
    }
    await refusedAs(`${url}&media=${encodeURIComponent(keys.other)}`, 'SIGNED_URL_INVALID');
    await refusedAs(withParam(url, 'signature', 'not-a-signature'), 'SIGNED_URL_INVALID');
    // Signed for the download path, it does not open another route.
    await refusedAs(url.replace('/media/download', '/media/render'), 'SIGNED_URL_INVALID');
    // A URL without signature is a bearer request: 401, as before.
    const unsigned = await get(withParam(url, 'signature', undefined));
    expect([unsigned.res.status, unsigned.json?.error]).toEqual([401, 'UNAUTHORIZED']);
  });

  it('once expired, with its own code (403 SIGNED_URL_EXPIRED) and when it expired', async () => {
    const anHourAgo = new SignedUrlService({
      signing: api.env.config.urlSigning,
      publicBaseUrl: api.env.config.publicBaseUrl,
      media: api.ctx.media,
      organizations: api.ctx.repositories.organizations,
      renders: api.ctx.renders,
      now: () => new Date(Date.now() - 3_600_000),
    });
    const signed = await anHourAgo.sign(
      { organization: alpha.organization },
      {
        mediaKeys: [keys.jpeg],
        expiresIn: 60,
      },
    );
    const body = await refusedAs(signed.urls[0]!.url, 'SIGNED_URL_EXPIRED');
    expect(body.expiredAt).toBe(signed.expiresAt);
    // An expired URL changed to expire later is not valid either.
    const extended = withParam(signed.urls[0]!.url, 'expires', String(signed.expires + 7200));
    await refusedAs(extended, 'SIGNED_URL_INVALID');
  });

  it('when it names a record of another organization than the one that signed (404)', async () => {
    // Only the server signs, so such a URL cannot be had through the API: made here with its key.
    const query = signedQuery(OLD_KEY, '/media/download', [
      ['media', keys.beta],
      ['org', String(alpha.organization.id)],
      ['expires', String(Math.floor(Date.now() / 1000) + 600)],
    ]);
    const { res, json } = await get(`/media/download?${query}`);
    expect([res.status, json?.error]).toEqual([404, 'MEDIA_NOT_FOUND']);
  });

  it('once its record is deleted (404 MEDIA_NOT_FOUND)', async () => {
    const doomed = await alpha.upload(jpeg, 'doomed.jpg');
    const signed = (await sign({ mediaKey: doomed })).data.url!;
    expect((await get(signed)).res.status).toBe(200);
    const deleted = await fetch(`${api.url}/media/record?media=${doomed}`, {
      method: 'DELETE',
      headers: alpha.auth,
    });
    expect(deleted.status).toBe(200);
    const { res, json } = await get(signed);
    expect([res.status, json?.error]).toEqual([404, 'MEDIA_NOT_FOUND']);
  });
});

describe('key rotation through URL_SIGNING_KEYS', () => {
  it('an old key second in the list still verifies; removed, its URLs are refused', async () => {
    const max = 86400;
    const signedOld = (await sign({ mediaKey: keys.jpeg })).data.url!;
    // Restarted with a new key first: the new one signs, the old one still verifies.
    const rotated = await appWith({ keys: [NEW_KEY, OLD_KEY], maxExpiresIn: max });
    expect((await get(signedOld, {}, rotated)).res.status).toBe(200);
    const signedNew = (await sign({ mediaKey: keys.jpeg }, alpha, rotated)).data.url!;
    expect((await get(signedNew, {}, rotated)).res.status).toBe(200);
    // (Signed with the new key: the API still on the old key alone refuses it.)
    const notYet = await get(signedNew, {}, api.url);
    expect([notYet.res.status, notYet.json?.error]).toEqual([403, 'SIGNED_URL_INVALID']);

    // The old key removed: its URLs stop working, the new key's go on.
    const retired = await appWith({ keys: [NEW_KEY], maxExpiresIn: max });
    const old = await get(signedOld, {}, retired);
    expect([old.res.status, old.json?.error]).toEqual([403, 'SIGNED_URL_INVALID']);
    expect((await get(signedNew, {}, retired)).res.status).toBe(200);
  });

  it('without URL_SIGNING_KEYS the feature is off and says so (501 SIGNED_URLS_DISABLED)', async () => {
    const off = await appWith(undefined);
    const refused = await sign({ mediaKey: keys.jpeg }, alpha, off);
    expect([refused.status, refused.body.error]).toEqual([501, 'SIGNED_URLS_DISABLED']);
    expect(refused.body.message).toContain('URL_SIGNING_KEYS');
    const signed = (await sign({ mediaKey: keys.jpeg })).data.url!;
    const { res, json } = await get(signed, {}, off);
    expect([res.status, json?.error]).toEqual([501, 'SIGNED_URLS_DISABLED']);
    // Bearer downloads are unchanged.
    const bearer = await fetch(`${off}/media/download?media=${keys.jpeg}`, { headers: alpha.auth });
    expect(Buffer.from(await bearer.arrayBuffer()).equals(jpeg)).toBe(true);
  });
});
