/**
 * The Swagger UI page at /docs in a real browser (headless Chromium, Debian's
 * `chromium`, as in browser-page.test.ts), under the Content Security Policy
 * the API sends with it: the page renders the operations (its scripts ran,
 * from the API itself) and the browser reports no violation of the policy;
 * and a page on another origin that frames /docs gets nothing (the browser
 * refuses the frame: `frame-ancestors 'none'`), while the same page framing
 * an unprotected answer (/healthz) is not refused.
 *
 * "Try it out" as a newcomer does it, driven through playwright-core: the
 * Authorize dialog offers the bearer token first; with only the token and a
 * file, a first Execute of the upload stores it (nothing pre-filled into the
 * optional fields, no example request id sent), and a first Execute of the
 * listing and of a record read answers 2xx in the page.
 */
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Locator, type Page } from 'playwright-core';
import { startApi, type TestApi } from '../support/api';
import { FIXTURES } from '../support/files';
import { startApiProcess, type ServiceProcess } from '../support/processes';

const CHROMIUM = process.env.CHROMIUM_BIN ?? 'chromium';

/** The DOM after the page has loaded, and what the browser logged (console messages, CSP reports). */
function browse(url: string, profile: string): Promise<{ dom: string; log: string }> {
  const args = [
    '--headless',
    '--no-sandbox', // tests run as root in CI containers
    '--disable-gpu',
    '--disable-dev-shm-usage',
    '--no-first-run',
    '--enable-logging=stderr',
    '--v=0',
    `--user-data-dir=${profile}`,
    '--virtual-time-budget=15000',
    '--dump-dom',
    url,
  ];
  return new Promise((resolve, reject) => {
    execFile(
      CHROMIUM,
      args,
      { timeout: 90_000, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        if (err) {
          const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
          reject(
            new Error(
              missing
                ? `${CHROMIUM} not found: install Debian's chromium package (apt-get install -y chromium), as .ci/run does`
                : `chromium failed: ${err.message}\n${stderr}`,
            ),
          );
        } else resolve({ dom: stdout, log: stderr });
      },
    );
  });
}

/** The browser's console and security messages (not its own diagnostics). */
const consoleLines = (log: string) =>
  log.split('\n').filter((l) => /CONSOLE|Content Security Policy|Refused to/i.test(l));

let harness: TestApi;
let api: ServiceProcess;
let pages: Server;
let html = '';
const profiles: string[] = [];
const profile = () => {
  const dir = mkdtempSync(join(tmpdir(), 'chromium-docs-'));
  profiles.push(dir);
  return dir;
};

beforeAll(async () => {
  harness = await startApi('e2edocs');
  api = await startApiProcess(harness.env.env);
  pages = createServer((_req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
    res.end(html);
  });
  pages.listen(0, '127.0.0.1');
  await once(pages, 'listening');
}, 90_000);
afterAll(async () => {
  await api?.kill('SIGTERM');
  pages?.close();
  for (const dir of profiles) rmSync(dir, { recursive: true, force: true });
  await harness?.close();
});

it('renders the operations under its Content Security Policy, with nothing refused', async () => {
  const { dom, log } = await browse(`${api.url!}/docs/`, profile());
  // Rendered by Swagger UI's scripts: the title and the operations of the description.
  expect(dom).toContain('Media storage service');
  expect(dom).toMatch(/class="opblock-summary-path"[^>]*>.*\/media\/upload/s);
  expect(dom).toContain('btn authorize');
  expect(consoleLines(log).filter((l) => /Content Security Policy|Refused to/i.test(l))).toEqual(
    [],
  );
}, 120_000);

it('cannot be framed by a page on another origin; an unprotected answer can', async () => {
  const pageOrigin = `http://127.0.0.1:${(pages.address() as AddressInfo).port}`;
  html = `<!doctype html><html><body><iframe src="${api.url!}/docs/"></iframe></body></html>`;
  const framed = await browse(`${pageOrigin}/`, profile());
  expect(consoleLines(framed.log).join('\n')).toMatch(/frame-ancestors 'none'/);

  html = `<!doctype html><html><body><iframe src="${api.url!}/healthz"></iframe></body></html>`;
  const control = await browse(`${pageOrigin}/`, profile());
  expect(consoleLines(control.log).join('\n')).not.toMatch(/frame-ancestors/);
}, 120_000);

/** Opens an operation and its "Try it out" form; answers the operation's block. */
async function tryItOut(page: Page, operationId: string, tag: string): Promise<Locator> {
  const op = page.locator(`#operations-${tag}-${operationId}`);
  await op.locator('.opblock-summary').first().click();
  await op.locator('button.try-out__btn').click();
  return op;
}

/** Clicks Execute; answers the request the page sent and the status the page shows. */
async function execute(page: Page, op: Locator, path: RegExp) {
  const sent = page.waitForRequest((r) => path.test(new URL(r.url()).pathname));
  const answered = page.waitForResponse((r) => path.test(new URL(r.url()).pathname));
  await op.locator('button.execute').click();
  const [request, response] = await Promise.all([sent, answered]);
  const shown = op.locator('.live-responses-table tbody .response-col_status').first();
  await shown.waitFor();
  return { request, response, shown: (await shown.innerText()).trim() };
}

it('"Try it out" works at once with only a token and a file: upload, list, read', async () => {
  const org = await harness.createOrg('docspage');
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_BIN ?? '/usr/bin/chromium',
    args: [
      '--no-sandbox', // tests run as root in CI containers
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
    ],
  });
  try {
    const page = await browser.newPage();
    await page.goto(`${api.url!}/docs/`);
    await page.locator('.opblock').first().waitFor();

    // Authorize: the bearer token scheme comes first; the token goes there.
    await page.locator('button.authorize').first().click();
    const schemes = page.locator('.modal-ux .auth-container');
    expect(await schemes.first().locator('h4').innerText()).toMatch(/^bearerAuth/);
    const bearer = schemes.first();
    await bearer.locator('input').first().fill(org.token);
    await bearer.locator('button.authorize').click();
    await page.locator('.modal-ux button.close-modal').click();

    // Upload: only the file is given.
    const upload = await tryItOut(page, 'uploadMedia', 'media');
    for (const field of ['folder', 'folderId', 'X-Request-Id', 'Idempotency-Key']) {
      const input = upload.locator(`input[placeholder="${field}"]`);
      expect([field, await input.inputValue()]).toEqual([field, '']);
    }
    await upload.locator('input[type=file]').setInputFiles(join(FIXTURES, 'Canon_40D.jpg'));
    const uploaded = await execute(page, upload, /^\/media\/upload$/);
    expect(uploaded.shown).toBe('201');
    expect(uploaded.response.status()).toBe(201);
    const headers = await uploaded.request.allHeaders();
    expect(headers.authorization).toBe(`Bearer ${org.token}`);
    expect(headers['x-request-id']).toBeUndefined();
    const record = ((await uploaded.response.json()) as { data: { id: number; key: string } }).data;
    expect(record.key).toMatch(
      new RegExp(`^${org.organization.slug}/Canon_40D-[A-Za-z0-9_-]+\\.jpe?g$`),
    );

    // The listing, as it comes.
    const list = await tryItOut(page, 'listMedia', 'manage');
    const listed = await execute(page, list, /^\/media$/);
    expect(listed.shown).toBe('200');
    const media = ((await listed.response.json()) as { data: { media: { key: string }[] } }).data
      .media;
    expect(media.map((m) => m.key)).toContain(record.key);

    // A record read: its id is the one thing to type.
    const get = await tryItOut(page, 'getMediaById', 'manage');
    await get.locator('input[placeholder="id"]').fill(String(record.id));
    const got = await execute(page, get, /^\/media\/\d+$/);
    expect(got.shown).toBe('200');
    expect(((await got.response.json()) as { data: { key: string } }).data.key).toBe(record.key);
  } finally {
    await browser.close();
  }
}, 120_000);
