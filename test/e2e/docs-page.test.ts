/**
 * The Swagger UI page at /docs in a real browser (headless Chromium, Debian's
 * `chromium`, as in browser-page.test.ts), under the Content Security Policy
 * the API sends with it: the page renders the operations (its scripts ran,
 * from the API itself) and the browser reports no violation of the policy;
 * and a page on another origin that frames /docs gets nothing (the browser
 * refuses the frame: `frame-ancestors 'none'`), while the same page framing
 * an unprotected answer (/healthz) is not refused.
 */
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isolatedEnv } from '../support/context';
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
  api = await startApiProcess(isolatedEnv('e2edocs').env);
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
