/**
 * A signed image in a real browser: a plain HTML page served by a second tiny
 * HTTP server (another origin) shows a signed URL of the real API process in
 * an `<img>`, and headless Chromium (Debian's `chromium`, run with
 * `--dump-dom`) reports the image's natural size, which must be the stored
 * image's. The same page shows a tampered URL (the browser gets the 403 and
 * fails the image), and reads the signed answer's `ETag` with `fetch()`, which
 * only CORS (CORS_ORIGINS naming the page's origin) allows.
 */
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { startApi, type TestApi } from '../support/api';
import { fixture } from '../support/files';
import { startApiProcess, type ServiceProcess } from '../support/processes';

const CHROMIUM = process.env.CHROMIUM_BIN ?? 'chromium';

/** The page: each `<img>` writes its natural size (or `error`) into the DOM, and so does the fetch. */
function page(urls: { good: string; tampered: string }): string {
  return `<!doctype html>
<html><body>
<p id="good">pending</p><p id="tampered">pending</p><p id="etag">pending</p>
<img id="good-img" src="${urls.good}"><img id="tampered-img" src="${urls.tampered}">
<script>
  for (const id of ['good', 'tampered']) {
    const img = document.getElementById(id + '-img');
    const show = (text) => (document.getElementById(id).textContent = text);
    const loaded = () => img.naturalWidth > 0 && show(img.naturalWidth + 'x' + img.naturalHeight);
    img.addEventListener('load', loaded);
    img.addEventListener('error', () => show('error'));
    if (img.complete) loaded();
  }
  fetch(${JSON.stringify(urls.good)})
    .then((res) => { document.getElementById('etag').textContent = 'etag ' + res.headers.get('ETag'); })
    .catch((err) => { document.getElementById('etag').textContent = 'fetch failed ' + err; });
</script>
</body></html>`;
}

/** The DOM after the page has loaded, as headless Chromium dumps it. */
function dumpDom(url: string, profile: string): Promise<string> {
  const args = [
    '--headless',
    '--no-sandbox', // tests run as root in CI containers
    '--disable-gpu',
    '--disable-dev-shm-usage',
    '--no-first-run',
    `--user-data-dir=${profile}`,
    '--virtual-time-budget=15000',
    '--dump-dom',
    url,
  ];
  return new Promise((resolve, reject) => {
    execFile(CHROMIUM, args, { timeout: 90_000 }, (err, stdout, stderr) => {
      if (err) {
        const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
        reject(
          new Error(
            missing
              ? `${CHROMIUM} not found: install Debian's chromium package (apt-get install -y chromium), as .ci/run does`
              : `chromium failed: ${err.message}\n${stderr}`,
          ),
        );
      } else resolve(stdout);
    });
  });
}

const textOf = (dom: string, id: string) =>
  new RegExp(`<p id="${id}">([^<]*)</p>`).exec(dom)?.[1] ?? `no #${id} in ${dom}`;

let harness: TestApi;
let api: ServiceProcess | undefined;
let pages: Server;
let profile: string;
let html = '';

beforeAll(async () => {
  pages = createServer((_req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
    res.end(html);
  });
  pages.listen(0, '127.0.0.1');
  await once(pages, 'listening');
  profile = mkdtempSync(join(tmpdir(), 'chromium-profile-'));
  harness = await startApi('e2ebrowser');
});
afterAll(async () => {
  await api?.kill('SIGTERM');
  pages.close();
  rmSync(profile, { recursive: true, force: true });
  await harness.close();
});

it('a page on another origin shows a signed image in <img>, at its natural size', async () => {
  const pageOrigin = `http://127.0.0.1:${(pages.address() as AddressInfo).port}`;
  api = await startApiProcess({
    ...harness.env.env,
    URL_SIGNING_KEYS: 'browser-page-signing-key-0123456789abcdef',
    CORS_ORIGINS: pageOrigin,
  });
  const org = await harness.createOrg('browserpage');
  const image = fixture('Canon_40D.jpg');
  const key = await org.upload(image, 'photo.jpg', { via: api.url });
  const signedRes = await fetch(`${api.url}/media/sign`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ mediaKey: key, disposition: 'inline', expiresIn: 600 }),
  });
  expect(signedRes.status).toBe(200);
  const { url } = ((await signedRes.json()) as { data: { url: string } }).data;
  const tampered = url.replace('disposition=inline', 'disposition=attachment');
  expect(tampered).not.toBe(url);
  const etag = (await fetch(url, { method: 'HEAD' })).headers.get('etag');
  expect(etag).toMatch(/^"[0-9a-f]{64}"$/);

  html = page({ good: url, tampered });
  const dom = await dumpDom(`${pageOrigin}/`, profile);

  const { width, height } = await sharp(image).metadata();
  expect(textOf(dom, 'good')).toBe(`${width}x${height}`);
  expect(textOf(dom, 'tampered')).toBe('error');
  expect(textOf(dom, 'etag')).toBe(`etag ${etag}`);
});
