/**
 * What browsers and CDNs see, through the real API and services: CORS from
 * CORS_ORIGINS (preflight before authentication, credentials off, the headers
 * clients read exposed, nothing for other origins, nothing at all without
 * CORS_ORIGINS), `disposition=inline`/`attachment` with `nosniff` and a
 * sandboxing CSP on inline PDFs, and cache headers: public until the expiry
 * for signed URLs, private for bearer tokens; and `Vary` on a `format=auto`
 * render carries both `Origin` (CORS) and `Accept` (the format was chosen
 * from it), so a shared cache never gives one origin's answer to another.
 */
import { signedQuery } from '../../../api/domain/url-signature';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

const SIGNING_KEY = 'browser-answers-signing-key-0123456789abcdef';

const APP = 'https://app.example.com';
const OTHER = 'https://evil.example.net';

let api: TestApi;
let plain: TestApi;
let org: TestOrg;
const keys = { jpeg: '', pdf: '' };

async function signed(body: Record<string, unknown>): Promise<string> {
  const res = await fetch(`${api.url}/media/sign`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(200);
  const { url } = ((await res.json()) as { data: { url: string } }).data;
  return api.url + url.slice(new URL(url).origin.length);
}

async function download(url: string, headers: Record<string, string> = {}, method = 'GET') {
  const res = await fetch(url, { method, headers });
  const body = Buffer.from(await res.arrayBuffer());
  expectMatchesSpec(
    method,
    '/media/download',
    res.status,
    method === 'HEAD' ? undefined : body,
    res.headers,
  );
  return res;
}

beforeAll(async () => {
  api = await startApi('browseranswers', {
    env: {
      URL_SIGNING_KEYS: SIGNING_KEY,
      CORS_ORIGINS: `${APP}, http://localhost:5173`,
    },
  });
  org = await api.createOrg('browser');
  keys.jpeg = await org.upload('Canon_40D.jpg', 'photo.jpg');
  keys.pdf = await org.upload('minimal-document.pdf', 'contract.pdf');
});
afterAll(() => api.close());

describe('CORS (CORS_ORIGINS)', () => {
  it('answers a preflight from a listed origin before authentication, credentials off', async () => {
    for (const path of [`/media/download?media=${keys.jpeg}`, '/media/sign', '/media/upload']) {
      const res = await fetch(`${api.url}${path}`, {
        method: 'OPTIONS',
        headers: {
          Origin: APP,
          'Access-Control-Request-Method': path === '/media/sign' ? 'POST' : 'GET',
          'Access-Control-Request-Headers': 'authorization, range, content-type',
        },
      });
      expect(res.status).toBe(204);
      expect(res.headers.get('access-control-allow-origin')).toBe(APP);
      const methods = res.headers.get('access-control-allow-methods')!.split(',');
      expect(methods).toEqual(expect.arrayContaining(['GET', 'HEAD', 'POST', 'DELETE']));
      const allowed = res.headers.get('access-control-allow-headers')!.toLowerCase().split(',');
      expect(allowed).toEqual(expect.arrayContaining(['authorization', 'range', 'content-type']));
      expect(res.headers.get('access-control-allow-credentials')).toBeNull();
      expect(res.headers.get('access-control-max-age')).toBe('600');
      expect(res.headers.get('vary')).toMatch(/Origin/);
    }
  });

  it('exposes the headers clients read, on signed and bearer answers alike', async () => {
    const url = await signed({ mediaKey: keys.jpeg });
    const viaSignature = await download(url, { Origin: APP, Range: 'bytes=0-9' });
    const viaToken = await download(`${api.url}/media/download?media=${keys.jpeg}`, {
      ...org.auth,
      Origin: 'http://localhost:5173',
    });
    for (const [res, origin] of [
      [viaSignature, APP],
      [viaToken, 'http://localhost:5173'],
    ] as const) {
      expect(res.headers.get('access-control-allow-origin')).toBe(origin);
      expect(res.headers.get('access-control-allow-credentials')).toBeNull();
      const exposed = res.headers.get('access-control-expose-headers')!.split(',');
      expect(exposed).toEqual(
        expect.arrayContaining([
          'ETag',
          'Content-Range',
          'Content-Length',
          'Accept-Ranges',
          'RateLimit-Limit',
          'RateLimit-Remaining',
          'RateLimit-Reset',
          'Retry-After',
        ]),
      );
      // The rate-limit headers it exposes are there to read.
      expect(res.headers.get('ratelimit-remaining')).toMatch(/^\d+$/);
    }
    expect(viaSignature.status).toBe(206);
    expect(viaSignature.headers.get('content-range')).toMatch(/^bytes 0-9\//);
  });

  it('says nothing to an origin that is not listed', async () => {
    const preflight = await fetch(`${api.url}/media/sign`, {
      method: 'OPTIONS',
      headers: { Origin: OTHER, 'Access-Control-Request-Method': 'POST' },
    });
    expect(preflight.headers.get('access-control-allow-origin')).toBeNull();
    const res = await download(await signed({ mediaKey: keys.jpeg }), { Origin: OTHER });
    expect(res.status).toBe(200);
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
    // (The cors package still lists the exposed headers; without Allow-Origin a browser reads nothing.)
  });

  it('without CORS_ORIGINS sends no CORS header, and a preflight is not answered', async () => {
    plain = await startApi('browsernocors');
    try {
      const other = await plain.createOrg('nocors');
      const preflight = await fetch(`${plain.url}/media/download?media=x`, {
        method: 'OPTIONS',
        headers: { Origin: APP, 'Access-Control-Request-Method': 'GET' },
      });
      expect(preflight.headers.get('access-control-allow-origin')).toBeNull();
      expect(preflight.status).toBe(401);
      const res = await fetch(`${plain.url}/media`, { headers: { ...other.auth, Origin: APP } });
      expect(res.status).toBe(200);
      expect(res.headers.get('access-control-allow-origin')).toBeNull();
    } finally {
      await plain.close();
    }
  });
});

describe('disposition and nosniff', () => {
  const bearer = (key: string, disposition?: string) =>
    download(
      `${api.url}/media/download?media=${key}${disposition ? `&disposition=${disposition}` : ''}`,
      org.auth,
    );

  it('attachment by default; inline when asked, for images and PDFs; nosniff always', async () => {
    const cases: [() => Promise<Response>, string, string | null][] = [
      [() => bearer(keys.jpeg), 'attachment; filename=photo.jpg', null],
      [() => bearer(keys.jpeg, 'attachment'), 'attachment; filename=photo.jpg', null],
      [() => bearer(keys.jpeg, 'inline'), 'inline; filename=photo.jpg', null],
      [() => bearer(keys.pdf), 'attachment; filename=contract.pdf', null],
      [
        () => bearer(keys.pdf, 'inline'),
        'inline; filename=contract.pdf',
        "sandbox; default-src 'none'",
      ],
      [
        async () => download(await signed({ mediaKey: keys.pdf, disposition: 'inline' })),
        'inline; filename=contract.pdf',
        "sandbox; default-src 'none'",
      ],
      [
        async () => download(await signed({ mediaKey: keys.jpeg, disposition: 'inline' })),
        'inline; filename=photo.jpg',
        null,
      ],
      [
        async () => download(await signed({ mediaKey: keys.pdf, disposition: 'attachment' })),
        'attachment; filename=contract.pdf',
        null,
      ],
    ];
    for (const [send, disposition, csp] of cases) {
      const res = await send();
      expect(res.status).toBe(200);
      expect(res.headers.get('content-disposition')).toBe(disposition);
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('content-security-policy')).toBe(csp);
    }
    const head = await download(
      `${api.url}/media/download?media=${keys.pdf}&disposition=inline`,
      org.auth,
      'HEAD',
    );
    expect(head.headers.get('content-security-policy')).toBe("sandbox; default-src 'none'");
  });

  it('refuses another disposition (400)', async () => {
    const res = await bearer(keys.jpeg, 'download');
    expect(res.status).toBe(400);
  });
});

describe('cache headers', () => {
  it('signed answers are public until the expiry, immutable; bearer answers stay private', async () => {
    const url = await signed({ mediaKey: keys.jpeg, expiresIn: 900 });
    const expires = Number(new URL(url).searchParams.get('expires'));
    for (const headers of [{}, { Range: 'bytes=0-99' }] as Record<string, string>[]) {
      const res = await download(url, headers);
      expect([200, 206]).toContain(res.status);
      const match = /^public, max-age=(\d+), immutable$/.exec(res.headers.get('cache-control')!);
      expect(match).not.toBeNull();
      const maxAge = Number(match![1]);
      // Until the expiry, never past it (the seconds elapsed since signing are taken off).
      expect(maxAge).toBeLessThanOrEqual(expires - Math.floor(Date.now() / 1000) + 1);
      expect(maxAge).toBeGreaterThan(800);
      expect(res.headers.get('etag')).toMatch(/^"[0-9a-f]{64}"$/);
      expect(res.headers.get('accept-ranges')).toBe('bytes');
    }
    const etag = (await download(url)).headers.get('etag')!;
    const notModified = await download(url, { 'If-None-Match': etag });
    expect(notModified.status).toBe(304);
    expect(notModified.headers.get('cache-control')).toMatch(/^public, max-age=\d+, immutable$/);

    const bearer = await download(`${api.url}/media/download?media=${keys.jpeg}`, org.auth);
    expect(bearer.headers.get('cache-control')).toBe('private, no-cache');
    expect(bearer.headers.get('etag')).toBe(etag);
  });
});

describe('Vary on renders (format=auto)', () => {
  let worker: TestWorker;
  beforeAll(async () => {
    worker = await startWorker(api.env.env);
  });
  afterAll(() => worker.close());

  /** `Vary`'s entries, lower-cased. */
  const varyOf = (res: Response) =>
    (res.headers.get('vary') ?? '').split(',').map((v) => v.trim().toLowerCase());

  it('keeps Origin beside Accept, on public signed answers and bearer ones, rendered or stored, and on 304', async () => {
    // Signed with format=auto: its answer is `public, immutable`, for any cache to keep.
    const expires = Math.floor(Date.now() / 1000) + 600;
    const signedRender = `${api.url}/media/render?${signedQuery(SIGNING_KEY, '/media/render', [
      ['media', keys.jpeg],
      ['w', '48'],
      ['format', 'auto'],
      ['org', String(org.organization.id)],
      ['expires', String(expires)],
    ])}`;
    const bearerRender = `${api.url}/media/render?media=${keys.jpeg}&w=40&format=auto`;
    for (const [what, url, headers] of [
      ['signed', signedRender, {}],
      ['bearer', bearerRender, org.auth],
    ] as const) {
      // The first answer is rendered by the worker, the second read from storage.
      for (const accept of ['image/webp,*/*', 'image/webp,*/*']) {
        const res = await fetch(url, { headers: { ...headers, Origin: APP, Accept: accept } });
        await res.arrayBuffer();
        expect([what, res.status, res.headers.get('content-type')]).toEqual([
          what,
          200,
          'image/webp',
        ]);
        expect(res.headers.get('access-control-allow-origin')).toBe(APP);
        expect([what, varyOf(res)]).toEqual([what, expect.arrayContaining(['origin', 'accept'])]);
        if (what === 'signed') expect(res.headers.get('cache-control')).toMatch(/immutable$/);
        const etag = res.headers.get('etag')!;
        const notModified = await fetch(url, {
          headers: { ...headers, Origin: APP, Accept: accept, 'If-None-Match': etag },
        });
        expect(notModified.status).toBe(304);
        expect(varyOf(notModified)).toEqual(expect.arrayContaining(['origin', 'accept']));
      }
    }
  }, 60_000);
});
