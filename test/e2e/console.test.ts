/**
 * The web console in a real browser: Debian's Chromium (headless, driven by
 * playwright-core; never a downloaded browser) against the real API process,
 * a worker, Redis, S3 and MongoDB. A person signs in with a pasted token,
 * creates a folder, uploads a JPEG and PDFs through the file chooser, sees
 * their thumbnails decoded (signed render URLs), searches and sorts on the
 * server, merges two PDFs in a dragged order (the merged pages' order
 * checked), copies a signed URL that a fresh context without a token opens,
 * deletes several files; a read-only token shows no mutating control and the
 * API refuses a forced one; an SVG and an HTML file named .jpg never run
 * script. axe finds no serious or critical violation in each view. The
 * screenshots in docs/images/ are taken here, so they stay true.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import AxeBuilder from '@axe-core/playwright';
import { PDFDocument, rgb } from 'pdf-lib';
import sharp from 'sharp';
import { chromium, type Browser, type Page, type Route } from 'playwright-core';
import yauzl from 'yauzl';
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { eventually } from '../support/eventually';
import { corpusFile, fixture } from '../support/files';
import { startApiProcess, type ServiceProcess } from '../support/processes';
import { startWorker, type TestWorker } from '../support/worker';

const CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
const root = join(__dirname, '..', '..');
const SHOTS = join(root, 'docs', 'images');

let harness: TestApi;
let api: ServiceProcess;
let worker: TestWorker;
let browser: Browser;
let org: TestOrg;
let page: Page;
/** Every dialog (alert, confirm, prompt) any page opened: a script that ran. */
const dialogs: string[] = [];

/** What the tests read of an <img> in the page (the tests have no DOM types). */
type Img = { complete: boolean; naturalWidth: number };
type Record = { id: number; key: string; name: string; mimetype: string; folderId: number };

async function records(query = ''): Promise<Record[]> {
  const res = await fetch(`${api.url}/media?limit=1000${query}`, { headers: org.auth });
  return ((await res.json()) as { data: { media: Record[] } }).data.media;
}

/** A PDF of `pages` pages of one size, so a merge's page order shows in the sizes. */
async function pdf(pages: number, size: [number, number]): Promise<Buffer> {
  const doc = await PDFDocument.create();
  for (let i = 0; i < pages; i++) {
    const page = doc.addPage(size);
    page.drawRectangle({
      x: 10,
      y: 10,
      width: size[0] - 20,
      height: size[1] / 3,
      color: rgb(0.2, 0.4, 0.8),
    });
    page.drawText(`Page ${i + 1} of ${pages}`, { x: 20, y: size[1] - 40, size: 18 });
  }
  return Buffer.from(await doc.save());
}

async function axe(p: Page, view: string): Promise<void> {
  const { violations } = await new AxeBuilder({ page: p }).analyze();
  const bad = violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map(
      (v) => `${view}: ${v.id} (${v.impact}) ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`,
    );
  expect(bad).toEqual([]);
}

/** A ZIP read back: each entry's name and its bytes' SHA-256. */
async function unzip(zip: Buffer): Promise<{ name: string; sha256: string }[]> {
  const file = await new Promise<yauzl.ZipFile>((resolve, reject) =>
    yauzl.fromBuffer(zip, { lazyEntries: true }, (err, opened) =>
      err ? reject(err) : resolve(opened),
    ),
  );
  const entries: { name: string; sha256: string }[] = [];
  await new Promise<void>((resolve, reject) => {
    file.on('error', reject);
    file.on('end', resolve);
    file.on('entry', (entry: yauzl.Entry) => {
      file.openReadStream(entry, (err, stream) => {
        if (err) return reject(err);
        const hash = createHash('sha256');
        stream.on('data', (chunk: Buffer) => hash.update(chunk));
        stream.on('error', reject);
        stream.on('end', () => {
          entries.push({ name: entry.fileName, sha256: hash.digest('hex') });
          file.readEntry();
        });
      });
    });
    file.readEntry();
  });
  return entries;
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/**
 * Drops files onto the listing as a person's drag and drop does: the page
 * fetches each file's bytes from a URL the test answers (so a 50 MB file
 * never passes through a script argument), makes Files with a fixed
 * last-modified time (the same file each time: tus fingerprints it) and
 * dispatches dragover and drop with them.
 */
async function dropFiles(
  p: Page,
  files: { name: string; type: string; buffer: Buffer }[],
): Promise<void> {
  const served = new Map(files.map((f, i) => [`/__e2e__/drop-${i}`, f]));
  const serve = async (route: Route) => {
    const f = served.get(new URL(route.request().url()).pathname)!;
    await route.fulfill({ status: 200, body: f.buffer, contentType: f.type });
  };
  await p.route('**/__e2e__/drop-*', serve);
  try {
    const specs = files.map((f, i) => ({ url: `/__e2e__/drop-${i}`, name: f.name, type: f.type }));
    const dataTransfer = await p.evaluateHandle(async (list) => {
      // The page's own DataTransfer and File (the tests have no DOM types).
      const page = globalThis as unknown as {
        DataTransfer: new () => { items: { add(file: unknown): void } };
        File: new (parts: unknown[], name: string, options: object) => unknown;
      };
      const dt = new page.DataTransfer();
      for (const f of list) {
        const blob = await (await fetch(f.url)).blob();
        dt.items.add(
          new page.File([blob], f.name, { type: f.type, lastModified: 1_700_000_000_000 }),
        );
      }
      return dt;
    }, specs);
    const listing = p.locator('section.listing');
    await listing.dispatchEvent('dragover', { dataTransfer });
    await listing.dispatchEvent('drop', { dataTransfer });
  } finally {
    await p.unroute('**/__e2e__/drop-*', serve);
  }
}

/** The console opened, signed in with the organization's token unless the tab still is. */
async function openConsole(p: Page): Promise<void> {
  await p.goto(`${api.url}/console/`);
  const signOut = p.getByRole('button', { name: 'Sign out' });
  const field = p.getByLabel('API token');
  await signOut.or(field).first().waitFor();
  if (await field.isVisible()) {
    await field.fill(org.token);
    await p.getByRole('button', { name: 'Sign in' }).click();
    await signOut.waitFor();
  }
}

async function signIn(p: Page, token: string): Promise<void> {
  await p.goto(`${api.url}/console/`);
  await p.getByLabel('API token').fill(token);
  await p.getByRole('button', { name: 'Sign in' }).click();
  await p.getByRole('button', { name: 'Sign out' }).waitFor();
}

beforeAll(async () => {
  if (!existsSync(join(root, 'dist', 'console', 'index.html'))) {
    await promisify(execFile)('npm', ['run', '--silent', 'build:console'], { cwd: root });
  }
  mkdirSync(SHOTS, { recursive: true });
  harness = await startApi('e2econsole');
  api = await startApiProcess({
    ...harness.env.env,
    URL_SIGNING_KEYS: 'console-e2e-signing-key-0123456789abcdef',
  });
  worker = await startWorker(harness.env.env);
  org = await harness.createOrg('consoleorg');
  // This organization keeps a trash (the tests' default is none), for the trash view.
  await harness.ctx.organizations.setTrashRetention(org.organization.id, 7 * 24 * 3600);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await api?.kill('SIGTERM');
  await worker?.close();
  await harness?.close();
});

describe('the web console', () => {
  it('is served with a strict CSP, and turned off by CONSOLE_ENABLED=false', async () => {
    const res = await fetch(`${api.url}/console/`);
    expect(res.status).toBe(200);
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toContain('unsafe-inline');
    expect(res.headers.get('x-frame-options')).toBe('DENY');
    const html = await res.text();
    // No inline script: every <script> has a src.
    expect(html.match(/<script(?![^>]*\ssrc=)[^>]*>/g)).toBeNull();

    const off = await startApi('e2econsoleoff', { env: { CONSOLE_ENABLED: 'false' } });
    try {
      expect((await fetch(`${off.url}/console/`)).status).toBe(404);
    } finally {
      await off.close();
    }
  });

  it('signs in, creates a folder, uploads a JPEG and PDFs, and shows their thumbnails', async () => {
    await signIn(page, org.token);
    await axe(page, 'files (empty)');
    await page.getByLabel('New folder').fill('Trips');
    await page.getByRole('button', { name: 'Create folder' }).click();
    await page.getByRole('button', { name: /^Trips \(0\)$/ }).click();

    await page.getByLabel('Upload files (or drop them here)').setInputFiles([
      { name: 'Canon_40D.jpg', mimeType: 'image/jpeg', buffer: fixture('Canon_40D.jpg') },
      {
        name: 'one-page.pdf',
        mimeType: 'application/pdf',
        buffer: await pdf(1, [200, 300]),
      },
      {
        name: 'three-pages.pdf',
        mimeType: 'application/pdf',
        buffer: await pdf(3, [400, 500]),
      },
    ]);
    await eventually(async () => {
      const names = (await records()).map((r) => r.name).sort();
      expect(names).toEqual(['Canon_40D.jpg', 'one-page.pdf', 'three-pages.pdf']);
    }, 60_000);
    const folders = (await (
      await fetch(`${api.url}/media/folders`, { headers: org.auth })
    ).json()) as { data: { folders: { id: number }[] } };
    const folderId = folders.data.folders[0]!.id;
    expect((await records()).every((r) => r.folderId === folderId)).toBe(true);

    // Thumbnails: every card's image decoded (a render of the JPEG, the PDFs' first pages).
    await page.getByRole('button', { name: /^Trips \(3\)$/ }).waitFor({ timeout: 30_000 });
    await eventually(
      async () => {
        const sizes = await page
          .locator('img.thumb')
          .evaluateAll((imgs) =>
            (imgs as unknown as Img[]).map((i) => (i.complete ? i.naturalWidth : 0)),
          );
        expect(sizes.length).toBe(3);
        expect(sizes.every((w) => w > 0)).toBe(true);
      },
      90_000,
      500,
    );
    await page.screenshot({ path: join(SHOTS, 'console-grid.png') });
  }, 240_000);

  it('searches and sorts on the server, in a list view that is remembered', async () => {
    await page.getByRole('button', { name: 'All files', exact: true }).click();
    await page.getByRole('button', { name: 'List', exact: true }).click();
    await page.getByLabel('Sort').selectOption('name');
    const names = () => page.locator('table.list tbody button.name').allTextContents();
    await eventually(async () =>
      expect(await names()).toEqual(['Canon_40D.jpg', 'one-page.pdf', 'three-pages.pdf']),
    );
    await page.getByLabel('Sort').selectOption('-name');
    await eventually(async () =>
      expect(await names()).toEqual(['three-pages.pdf', 'one-page.pdf', 'Canon_40D.jpg']),
    );
    await page.getByLabel('Sort').selectOption('-size');
    await eventually(async () => expect((await names())[0]).toBe('Canon_40D.jpg'));
    await page.getByLabel('Search names').fill('PAGE');
    await page.getByRole('button', { name: 'Search', exact: true }).click();
    await eventually(async () =>
      expect((await names()).sort()).toEqual(['one-page.pdf', 'three-pages.pdf']),
    );
    await page.getByLabel('Type').selectOption('image');
    await eventually(async () => expect(await names()).toEqual([]));
    await axe(page, 'files (list)');
    await page.getByLabel('Type').selectOption('');
    await page.getByLabel('Search names').fill('');
    await page.getByRole('button', { name: 'Search', exact: true }).click();
    await eventually(async () => expect((await names()).length).toBe(3));
    await page.screenshot({ path: join(SHOTS, 'console-list.png') });

    // Reloaded: still signed in (sessionStorage), still the list view (remembered).
    await page.reload();
    await page.locator('table.list').waitFor();
    expect(page.url()).not.toContain(org.token);
  }, 120_000);

  it("searches and sorts over 1,000 files on the server, and times their folder's first page", async () => {
    // 1,000 records of small PNGs, written behind the API; the console then
    // only reads them through the API. This test is about lists: no byte of
    // these files is read (their thumbnails are not asked for: the browser's
    // render requests fail at once, and 300 first renders on the worker would
    // take it most of a minute; thumbnails have their own tests above), so
    // their objects are not written: 1,000 PUTs and a 1,000-key delete cost
    // Swift 17 s of CPU here. The records are removed in a `finally`, so a
    // failure leaves no record without its object for the run's reconcile.
    const noThumbnails = (route: Route) => route.abort('blockedbyclient');
    await page.route(/\/media\/render\?/, noThumbnails);
    const created = await fetch(`${api.url}/media/folders`, {
      method: 'POST',
      headers: { ...org.auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: 'Scale' }),
    });
    expect(created.status).toBe(201);
    const folderId = ((await created.json()) as { data: { id: number } }).data.id;
    const png = await sharp({
      create: { width: 4, height: 4, channels: 3, background: '#3366cc' },
    })
      .png()
      .toBuffer();
    const N = 1_000;
    const at = Date.now() - N * 1000;
    const docs = Array.from({ length: N }, (_, i) => {
      const n = String(i).padStart(4, '0');
      return {
        id: 50_000_000 + i,
        organizationId: org.organization.id,
        folderId,
        key: `${org.organization.slug}/scale-${n}-AAAAAAAAAAAA.png`,
        name: `scale-${n}.png`,
        mimetype: 'image/png',
        // Sizes run opposite to the names, so the size sort is not the name sort.
        bytes: png.length + (N - i),
        checksum: `sha256:${createHash('sha256').update(n).digest('hex')}`,
        metaData: { ipAddress: '::ffff:127.0.0.1', userAgent: 'e2e seed' },
        createdBy: null,
        deletingAt: null,
        createdAt: new Date(at + i * 1000),
        updatedAt: new Date(at + i * 1000),
      };
    });
    await harness.ctx.models.Media.insertMany(docs, { ordered: false, lean: true });
    try {
      const names = () => page.locator('table.list tbody button.name').allTextContents();
      // Reloaded so the folder list counts them (still signed in, still the list view).
      // Its first listing (newest first) is held back 1.5 s and the sort changed meanwhile:
      // that late answer must not replace the newer one (it did, now and then, in CI).
      const holdBack = async (route: Route) => {
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        await route.continue();
      };
      const newestFirst = /\/media\?(.*&)?sort=-createdAt/;
      await page.route(newestFirst, holdBack, { times: 1 });
      const late = page.waitForResponse((r) => newestFirst.test(r.url()));
      await page.reload();
      await page.locator('table.list').waitFor();
      await page.getByLabel('Sort').selectOption('name');
      await eventually(async () => expect((await names())[0]).toBe('Canon_40D.jpg'));
      await late;
      // The late answer is in: for a second after it, the list stays sorted by name.
      for (let i = 0; i < 10; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        expect((await names())[0]).toBe('Canon_40D.jpg');
      }
      // The figure the issue's budget speaks of, printed (never asserted: the
      // machine is shared): from the folder's click to its first page on screen.
      const started = Date.now();
      await page.getByRole('button', { name: /^Scale \(1000\)$/ }).click();
      // (All files, sorted by name, starts with Canon_40D.jpg: the folder's page is the first
      // row turning into scale-0000.png.)
      await page
        .locator('table.list tbody tr')
        .first()
        .locator('button.name', { hasText: /^scale-0000\.png$/ })
        .waitFor();
      process.stdout.write(
        `console: first page of a 1,000-file folder in ${Date.now() - started} ms\n`,
      );
      const expected = (from: number, to: number) =>
        Array.from(
          { length: to - from },
          (_, i) => `scale-${String(from + i).padStart(4, '0')}.png`,
        );
      await eventually(async () => expect(await names()).toEqual(expected(0, 50)));
      await page.getByRole('button', { name: 'Next page' }).click();
      await eventually(async () => expect(await names()).toEqual(expected(50, 100)));
      await page.getByLabel('Sort').selectOption('-name');
      await eventually(async () => expect(await names()).toEqual(expected(950, 1000).reverse()));
      // Largest first: the sizes run opposite to the names.
      await page.getByLabel('Sort').selectOption('-size');
      await eventually(async () => expect(await names()).toEqual(expected(0, 50)));
      await page.getByLabel('Sort').selectOption('size');
      await eventually(async () => expect(await names()).toEqual(expected(950, 1000).reverse()));
      // Search on the server: 100 names hold "0-05" in any case; the first page is 50 of them.
      await page.getByLabel('Sort').selectOption('name');
      await page.getByLabel('Search names').fill('SCALE-05');
      await page.getByRole('button', { name: 'Search', exact: true }).click();
      await eventually(async () => expect(await names()).toEqual(expected(500, 550)));
      await page.getByRole('button', { name: 'Next page' }).click();
      await eventually(async () => expect(await names()).toEqual(expected(550, 600)));
      await page.getByLabel('Search names').fill('scale-0999');
      await page.getByRole('button', { name: 'Search', exact: true }).click();
      await eventually(async () => expect(await names()).toEqual(['scale-0999.png']));
      await page.getByLabel('Search names').fill('');
      await page.getByRole('button', { name: 'Search', exact: true }).click();

      await page.getByRole('button', { name: 'All files', exact: true }).click();
    } finally {
      // Put back as the later steps expect: the seeded records gone (no
      // thumbnail of them was rendered), then the empty folder deleted
      // through the API.
      await harness.ctx.models.Media.deleteMany({ id: { $in: docs.map((d) => d.id) } });
    }
    expect(await harness.objectKeys(`.variants/${org.organization.slug}/scale-`)).toEqual([]);
    const removed = await fetch(`${api.url}/media/folders/${folderId}`, {
      method: 'DELETE',
      headers: org.auth,
    });
    expect(removed.status).toBeLessThan(300);
    expect((await records()).length).toBe(3);
    await page.unroute(/\/media\/render\?/, noThumbnails);
    await page.reload();
    await page.locator('table.list').waitFor();
  }, 300_000);

  it('moves selected files to another folder, from the keyboard', async () => {
    const before = (await records()).find((r) => r.name === 'Canon_40D.jpg')!;
    const { data } = (await (
      await fetch(`${api.url}/media/folders`, { headers: org.auth })
    ).json()) as { data: { root: { id: number } } };
    await page.getByRole('button', { name: 'All files', exact: true }).click();
    await page.getByLabel('Select Canon_40D.jpg').focus();
    await page.keyboard.press('Space');
    await page.getByLabel('Move to').focus();
    await page.getByLabel('Move to').selectOption({ label: 'No folder' });
    await page.getByRole('button', { name: 'Move selected' }).focus();
    await page.keyboard.press('Enter');
    await page.getByText('1 moved to No folder').waitFor();
    await eventually(async () => {
      const after = (await records()).find((r) => r.name === 'Canon_40D.jpg')!;
      // The key stays; only the folder changes.
      expect(after).toMatchObject({ key: before.key, folderId: data.root.id });
    });
    await page.getByRole('button', { name: /^Trips \(2\)$/ }).waitFor();
    await axe(page, 'files (move)');
    // And back into Trips.
    await page.getByLabel('Select Canon_40D.jpg').check();
    await page.getByLabel('Move to').selectOption({ label: 'Trips' });
    await page.getByRole('button', { name: 'Move selected' }).click();
    await eventually(async () =>
      expect((await records()).find((r) => r.name === 'Canon_40D.jpg')!.folderId).toBe(
        before.folderId,
      ),
    );
    await page.getByRole('button', { name: /^Trips \(3\)$/ }).waitFor();
  }, 60_000);

  it('merges two PDFs in the order set by dragging', async () => {
    await page.getByLabel('Select one-page.pdf').check();
    await page.getByLabel('Select three-pages.pdf').check();
    await page.getByRole('button', { name: 'Merge selected PDFs' }).click();
    const order = page.getByRole('list', { name: 'Merge order' });
    const names = () => order.locator('.name').allTextContents();
    const before = await names();
    // Drag the last into the first place.
    await order.locator('li').nth(1).dragTo(order.locator('li').nth(0));
    const after = await names();
    expect(after).toEqual([...before].reverse());
    await axe(page, 'merge');
    await page.getByRole('button', { name: 'Merge 2 PDFs' }).click();
    await page.getByText(/^Merged into/).waitFor({ timeout: 90_000 });

    const merged = (await records('&type=pdf')).find(
      (r) => !['one-page.pdf', 'three-pages.pdf'].includes(r.name),
    )!;
    const bytes = Buffer.from(
      await (
        await fetch(`${api.url}/media/download?media=${merged.key}`, { headers: org.auth })
      ).arrayBuffer(),
    );
    const doc = await PDFDocument.load(bytes);
    const sizes = doc.getPages().map((p) => p.getSize().width);
    const pagesOf = { 'one-page.pdf': [200], 'three-pages.pdf': [400, 400, 400] };
    expect(sizes).toEqual(after.flatMap((n) => pagesOf[n as keyof typeof pagesOf]));
  }, 150_000);

  it('copies a signed URL that a new context without a token opens', async () => {
    await page.getByRole('button', { name: 'Canon_40D.jpg', exact: true }).click();
    const preview = page.getByRole('dialog', { name: 'Preview of Canon_40D.jpg' });
    await preview.locator('img.preview-image').waitFor();
    await eventually(
      async () =>
        expect(
          await preview
            .locator('img.preview-image')
            .evaluate((i) => (i as unknown as Img).complete && (i as unknown as Img).naturalWidth),
        ).toBeGreaterThan(0),
      60_000,
      500,
    );
    await preview.getByRole('button', { name: 'Show image metadata' }).click();
    await preview.getByText('Camera').waitFor({ timeout: 60_000 });
    await preview.getByLabel('Expires in').selectOption({ label: '1 day' });
    await preview.getByRole('button', { name: 'Copy signed URL' }).click();
    const url = await preview.getByLabel('Signed URL', { exact: true }).inputValue();
    expect(url).toContain('signature=');
    await axe(page, 'preview');
    await page.screenshot({ path: join(SHOTS, 'console-preview.png') });

    const stranger = await browser.newContext();
    try {
      const res = await stranger.request.get(url);
      expect(res.status()).toBe(200);
      expect(Buffer.from(await res.body()).equals(fixture('Canon_40D.jpg'))).toBe(true);
    } finally {
      await stranger.close();
    }
    await preview.getByRole('button', { name: 'Close' }).first().click();
  }, 150_000);

  it('deletes several selected files after a confirmation', async () => {
    const before = await records();
    const gone = before.filter((r) => r.name.endsWith('.pdf')).map((r) => r.name);
    expect(gone.length).toBe(3);
    await page.getByLabel('Type').selectOption('pdf');
    await eventually(async () => expect(await page.locator('table.list tbody tr').count()).toBe(3));
    await page.getByRole('button', { name: 'Select all on this page' }).click();
    await page.getByRole('button', { name: 'Delete selected' }).click();
    const confirm = page.getByRole('dialog', { name: 'Confirm' });
    await confirm.getByText('Delete 3 selected files?', { exact: false }).waitFor();
    await confirm.getByRole('button', { name: 'Delete' }).click();
    await eventually(async () =>
      expect((await records()).map((r) => r.name)).toEqual(['Canon_40D.jpg']),
    );
    await eventually(async () => expect(await page.locator('table.list tbody tr').count()).toBe(0));
    await page.getByLabel('Type').selectOption('');
  }, 60_000);

  it('shows the usage, webhooks and jobs views', async () => {
    await page.getByRole('button', { name: 'Usage' }).click();
    await page.getByText(/files, .* used/).waitFor();
    await axe(page, 'usage');
    await page.screenshot({ path: join(SHOTS, 'console-usage.png') });
    await page.getByRole('button', { name: 'Webhooks' }).click();
    await page.getByRole('heading', { name: 'Webhook endpoints' }).waitFor();
    await axe(page, 'webhooks');
    await page.getByRole('button', { name: 'Jobs' }).click();
    await page.getByRole('heading', { name: 'Jobs' }).waitFor();
    await axe(page, 'jobs');
    await page.getByRole('button', { name: 'Files', exact: true }).click();
  });

  it('a read-only token shows no mutating control, and the API refuses a forced one', async () => {
    const readOnly = await harness.ctx.tokens.issue(org.organization.id, {
      name: 'viewer',
      scopes: ['read'],
    });
    const context = await browser.newContext();
    const viewer = await context.newPage();
    viewer.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    try {
      await signIn(viewer, readOnly.token);
      await viewer.getByText('read-only').waitFor();
      await viewer.locator('[data-key]').first().waitFor();
      const mutating = viewer.getByRole('button', {
        name: /upload|create|rename|delete|merge|convert|move/i,
      });
      expect(await mutating.count()).toBe(0);
      expect(await viewer.locator('input[type=file]').count()).toBe(0);
      await viewer.locator('[data-key] button.open').first().click();
      await viewer.getByRole('button', { name: 'Copy signed URL' }).waitFor();
      expect(await mutating.count()).toBe(0);
      await axe(viewer, 'read-only preview');
      // Forced from the page's own script: the API refuses it.
      const status = await viewer.evaluate(async (token) => {
        const res = await fetch('/media/folders', {
          method: 'POST',
          headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
          body: JSON.stringify({ name: 'forced' }),
        });
        return res.status;
      }, readOnly.token);
      expect(status).toBe(403);
    } finally {
      await context.close();
    }
  }, 90_000);

  it('never runs script from an SVG or an HTML file named .jpg, nor from a file name', async () => {
    const svg = Buffer.from(
      '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script></svg>',
    );
    const html = Buffer.from('<!doctype html><html><body><script>alert(3)</script></body></html>');
    await page.getByLabel('Upload files (or drop them here)').setInputFiles([
      { name: 'vector.jpg', mimeType: 'image/jpeg', buffer: svg },
      { name: 'page.jpg', mimeType: 'image/jpeg', buffer: html },
      {
        name: '<img src=x onerror=alert(4)>.jpg',
        mimeType: 'image/jpeg',
        buffer: fixture('orientation-landscape_6.jpg'),
      },
    ]);
    const uploads = page.getByRole('list', { name: 'Uploads' });
    let states: string[] = [];
    await eventually(
      async () => {
        states = await uploads.locator('li').allTextContents();
        expect(states.length).toBe(3);
        expect(states.every((s) => /uploaded|refused/.test(s))).toBe(true);
      },
      60_000,
      500,
    );
    // Typed from their bytes, the SVG and the HTML are refused, with the API's reason shown.
    expect(states.filter((s) => /^(vector|page)\.jpg: refused: \S/.test(s))).toHaveLength(2);
    // The file with markup in its name is stored, and its name shown as text.
    const marked = states.find((s) => s.includes('onerror'));
    expect(marked).toMatch(/: uploaded$/);
    const stored = (await records()).find((r) => r.name.includes('onerror'))!;
    await page.locator(`[data-key="${stored.key}"] button.name`).waitFor();
    expect(await page.locator(`[data-key="${stored.key}"] button.name`).textContent()).toBe(
      stored.name,
    );
    // Whatever was stored is shown and previewed as text and rendered images only.
    for (const r of await records()) {
      await page.locator(`[data-key="${r.key}"] button.open`).first().click();
      await page.getByRole('dialog', { name: `Preview of ${r.name}` }).waitFor();
      await page.getByRole('button', { name: 'Close' }).first().click();
    }
    // Not one script ran.
    expect(dialogs).toEqual([]);
  }, 120_000);
  it("shows an image's GPS position in the preview", async () => {
    // The corpus's photo with GPS EXIF tags (test/fixtures/README.md): 43.467448 N, 11.885127 E.
    const key = await org.upload(corpusFile('images/gps-DSCN0010.jpg'), 'gps-DSCN0010.jpg');
    await page.reload();
    await page.locator(`[data-key="${key}"] button.open`).first().click();
    const preview = page.getByRole('dialog', { name: 'Preview of gps-DSCN0010.jpg' });
    await preview.getByRole('button', { name: 'Show image metadata' }).click();
    const metadata = preview.getByLabel('Image metadata');
    await metadata.getByText('GPS', { exact: true }).waitFor({ timeout: 60_000 });
    expect(await metadata.locator('dt:text-is("GPS") + dd').textContent()).toBe(
      '43.467448, 11.885127',
    );
    await preview.getByRole('button', { name: 'Close' }).first().click();
  }, 120_000);

  it('drops a JPEG, a PDF and a 50 MB file (tus): the big one resumed after a cut network, a pause and a reload', async () => {
    const CHUNK = 8 * 1024 * 1024; // the console's tus chunk size
    // Uncompressed, so its size is its pixels' whatever they are: one grey, not noise
    // (generating noise took seconds of CPU and changed nothing here).
    const big = await sharp({
      create: { width: 4096, height: 4096, channels: 3, background: '#808080' },
    })
      .png({ compressionLevel: 0 })
      .toBuffer();
    expect(big.length).toBeGreaterThan(50_000_000);
    const files = [
      { name: 'drop-photo.jpg', type: 'image/jpeg', buffer: fixture('Canon_40D.jpg') },
      { name: 'drop-doc.pdf', type: 'application/pdf', buffer: await pdf(2, [300, 300]) },
      { name: 'big-scan.png', type: 'image/png', buffer: big },
    ];

    // The network between the page and the API's upload URLs: open, cut (every
    // request fails as with a dropped connection), or holding one PATCH
    // unanswered (in flight when the person pauses or reloads).
    let cut = false;
    let aborted = 0;
    let held: Route | null = null;
    const plan = new Map<number, 'cut' | 'hold'>([
      [2 * CHUNK, 'cut'],
      [4 * CHUNK, 'hold'],
      [5 * CHUNK, 'hold'],
    ]);
    const patches: number[] = [];
    let creations = 0;
    const network = async (route: Route) => {
      const req = route.request();
      const offset = Number(req.headers()['upload-offset'] ?? -1);
      const step = req.method() === 'PATCH' ? plan.get(offset) : undefined;
      if (step) plan.delete(offset);
      if (step === 'cut') cut = true;
      if (cut) {
        aborted++;
        return route.abort('internetdisconnected');
      }
      if (step === 'hold') {
        held = route;
        return;
      }
      if (req.method() === 'PATCH') patches.push(offset);
      return route.continue();
    };
    const countCreations = (req: { method(): string; url(): string }) => {
      if (req.method() === 'POST' && new URL(req.url()).pathname === '/media/upload/resumable')
        creations++;
    };
    await page.route(/\/media\/upload\/resumable\/[0-9a-f]{32}$/, network);
    page.on('request', countCreations);
    const releaseHeld = async () => {
      const route = held;
      held = null;
      await route?.abort('internetdisconnected').catch(() => undefined);
    };
    try {
      await openConsole(page);
      await page.getByLabel('New folder').fill('Drops');
      await page.getByRole('button', { name: 'Create folder' }).click();
      await page.getByRole('button', { name: /^Drops \(0\)$/ }).click();
      await page.getByText('No files here.').waitFor();
      await dropFiles(page, files);

      const t0 = Date.now();
      const mark = (what: string) =>
        process.stdout.write(`console upload: ${what} at ${Date.now() - t0} ms\n`);
      const row = (name: string) =>
        page.getByRole('list', { name: 'Uploads' }).locator('li', { hasText: name });
      // The network cut at 16 MiB: the client retries on its own (its retries fail
      // too), and says so; then the network is back and the upload goes on.
      await eventually(async () => {
        expect(aborted).toBeGreaterThanOrEqual(2);
        expect(await row('big-scan.png').textContent()).toContain('connection lost: retrying');
      }, 60_000);
      cut = false;
      mark('network back');
      // Paused from the keyboard while a PATCH is in flight, then resumed.
      await eventually(() => expect(held).not.toBeNull(), 120_000, 200);
      await page.getByRole('button', { name: 'Pause big-scan.png' }).focus();
      await page.keyboard.press('Enter');
      await eventually(async () =>
        expect(await row('big-scan.png').textContent()).toMatch(/paused at \d+%/),
      );
      await releaseHeld();
      mark('paused');
      await axe(page, 'files (uploads)');
      await page.screenshot({ path: join(SHOTS, 'console-upload.png') });
      await page.getByRole('button', { name: 'Resume big-scan.png' }).focus();
      await page.keyboard.press('Enter');
      // A reload while a PATCH is in flight: the same file dropped again goes on
      // from the offset the API has, under the same upload URL.
      await eventually(() => expect(held).not.toBeNull(), 120_000, 200);
      mark('reloading');
      await page.reload();
      await releaseHeld();
      const interrupted = page.getByRole('region', { name: 'Interrupted uploads' });
      await interrupted.locator('span.name', { hasText: 'big-scan.png' }).waitFor();
      await page.getByRole('button', { name: /^Drops \(2\)$/ }).click();
      const before = patches.length;
      await dropFiles(page, [files[2]!]);
      await eventually(
        async () => expect(await row('big-scan.png').textContent()).toMatch(/uploaded$/),
        120_000,
        500,
      );
      mark('uploaded');
      // Never started over: one creation per file, and after the reload the
      // upload's next PATCH began where it was cut.
      expect(creations).toBe(3);
      expect(patches[before]).toBe(5 * CHUNK);
    } finally {
      page.off('request', countCreations);
      await page.unroute(/\/media\/upload\/resumable\/[0-9a-f]{32}$/, network);
      await releaseHeld();
    }

    // The three records are in GET /media, in the folder, with their bytes' checksums.
    const dropped = (await records()).filter((r) =>
      ['drop-photo.jpg', 'drop-doc.pdf', 'big-scan.png'].includes(r.name),
    );
    expect(dropped.map((r) => r.name).sort()).toEqual([
      'big-scan.png',
      'drop-doc.pdf',
      'drop-photo.jpg',
    ]);
    const full = (await (
      await fetch(
        `${api.url}/media/record?media=${encodeURIComponent(dropped.find((r) => r.name === 'big-scan.png')!.key)}`,
        {
          headers: org.auth,
        },
      )
    ).json()) as { data: { bytes: number; checksum: string } };
    expect(full.data).toMatchObject({ bytes: big.length, checksum: `sha256:${sha256(big)}` });
    await page.getByRole('button', { name: /^Drops \(3\)$/ }).waitFor();
  }, 300_000);

  it('downloads selected files as a ZIP, deletes them and restores one from the trash, from the keyboard', async () => {
    const originals = new Map([['drop-photo.jpg', fixture('Canon_40D.jpg')]]);
    await page.getByRole('button', { name: /^Drops \(3\)$/ }).click();
    await page.getByRole('button', { name: 'List', exact: true }).click();
    await page.getByLabel('Select drop-photo.jpg').waitFor();
    for (const name of ['drop-photo.jpg', 'drop-doc.pdf']) {
      await page.getByLabel(`Select ${name}`).focus();
      await page.keyboard.press('Space');
    }
    const pdfBytes = Buffer.from(
      await (
        await fetch(
          `${api.url}/media/download?media=${encodeURIComponent((await records()).find((r) => r.name === 'drop-doc.pdf')!.key)}`,
          { headers: org.auth },
        )
      ).arrayBuffer(),
    );
    originals.set('drop-doc.pdf', pdfBytes);

    await page.getByRole('button', { name: 'Download as ZIP' }).focus();
    const [download] = await Promise.all([
      page.waitForEvent('download', { timeout: 60_000 }),
      page.keyboard.press('Enter'),
    ]);
    const zip = readFileSync(await download.path());
    const entries = await unzip(zip);
    expect(entries.map((e) => e.name).sort()).toEqual(['drop-doc.pdf', 'drop-photo.jpg']);
    for (const e of entries) expect(e.sha256).toBe(sha256(originals.get(e.name)!));

    // Deleted (to the trash), after the confirmation.
    await page.getByRole('button', { name: 'Delete selected' }).focus();
    await page.keyboard.press('Enter');
    const confirm = page.getByRole('dialog', { name: 'Confirm' });
    await confirm.getByRole('button', { name: 'Delete' }).focus();
    await page.keyboard.press('Enter');
    // Both gone before the trash is opened (its list is read once, when it opens; the
    // console deletes the selected files one request after another).
    await eventually(async () => {
      const names = (await records()).map((r) => r.name);
      expect(names).not.toContain('drop-photo.jpg');
      expect(names).not.toContain('drop-doc.pdf');
    });

    // The trash: both there; one restored, the other deleted for good.
    await page.getByRole('button', { name: 'Trash', exact: true }).focus();
    await page.keyboard.press('Enter');
    const trash = page.getByRole('table', { name: 'Trash' });
    const inTrash = (name: string) => trash.getByRole('cell', { name, exact: true });
    await inTrash('drop-photo.jpg').waitFor();
    await inTrash('drop-doc.pdf').waitFor();
    await axe(page, 'trash');
    await page.screenshot({ path: join(SHOTS, 'console-trash.png') });
    await page.getByRole('button', { name: 'Restore drop-photo.jpg' }).focus();
    await page.keyboard.press('Enter');
    await page.getByText('drop-photo.jpg restored').waitFor();
    await page.getByRole('button', { name: 'Delete forever drop-doc.pdf' }).focus();
    await page.keyboard.press('Enter');
    await page
      .getByRole('dialog', { name: 'Confirm' })
      .getByRole('button', { name: 'Delete forever' })
      .focus();
    await page.keyboard.press('Enter');
    await page.getByText('drop-doc.pdf deleted for good').waitFor();
    await eventually(async () => expect(await inTrash('drop-photo.jpg').count()).toBe(0));
    await eventually(async () => expect(await inTrash('drop-doc.pdf').count()).toBe(0));
    const restored = (await records()).find((r) => r.name === 'drop-photo.jpg');
    expect(restored).toBeDefined();
    const trashed = (await (
      await fetch(`${api.url}/media/trash`, { headers: org.auth })
    ).json()) as {
      data: { media: { name: string }[] };
    };
    expect(trashed.data.media.map((m) => m.name)).not.toContain('drop-doc.pdf');
    await page.getByRole('button', { name: 'Files', exact: true }).click();
  }, 120_000);
});
