/**
 * The web console's first page: in Debian's Chromium (headless, through
 * playwright-core, as test/e2e/console.test.ts drives it), the time from a
 * click on a folder of 10,000 files (1,000 beside it, for the comparison) to
 * its first page of 50 rows on screen, and from a reload of the console to
 * the first page of "All files". Quick mode: one folder of 60 records, one
 * round, no reload, no thumbnails (the stack's API signs no URL; not restarted).
 */
import { createHash } from 'node:crypto';
import sharp from 'sharp';
import { chromium } from 'playwright-core';
import type { Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import { target, type BenchmarkResult, type Table } from '../lib/report';
import { stat } from '../lib/stats';

const CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
const PAGE = 50;
/** The budget for the first page of a 10,000-file folder, ms. */
const BUDGET_MS = 1000;
const OUTSIDE = 'outside-any-folder.png';

export const consolePage: Benchmark = {
  id: 'console',
  title: 'Web console: first page of a large folder',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const sizes = ctx.quick ? [60] : [1_000, 10_000];
    const rounds = ctx.quick ? 1 : 7;
    const { Media } = stack.data.models;
    // Full mode: signed render URLs on (the thumbnails) and a worker for their renders. Quick
    // mode keeps the stack as it is (no restart): records only, no thumbnails.
    if (!ctx.quick) {
      // The API and the workers restart side by side.
      await Promise.all([
        stack.setApiEnv({ URL_SIGNING_KEYS: 'bench-console-signing-key-0123456789abcdef' }),
        stack.setWorkers(1),
      ]);
    }
    const probe = await fetch(`${stack.url}/console/`);
    if (probe.status !== 200) {
      throw new Error(`/console/ answered ${probe.status}: run \`npm run build\` first`);
    }

    const png = await sharp({
      create: { width: 8, height: 8, channels: 3, background: '#3366cc' },
    })
      .png()
      .toBuffer();
    const folders: { id: number; name: string; files: number; first: string }[] = [];
    let nextId = 70_000_000;
    const checksum = `sha256:${createHash('sha256').update(png).digest('hex')}`;
    /** A record of the 8 px PNG as an upload makes it. */
    const recordOf = (key: string, name: string, folderId: number | null, at: Date) => ({
      id: nextId++,
      organizationId: stack.organizationId,
      folderId,
      key,
      name,
      mimetype: 'image/png',
      bytes: png.length,
      checksum,
      metaData: { ipAddress: '::ffff:127.0.0.1', userAgent: 'bench' },
      createdBy: null,
      deletingAt: null,
      createdAt: at,
      updatedAt: at,
    });
    for (const files of sizes) {
      const name = `Folder of ${files}`;
      const res = await fetch(`${stack.url}/media/folders`, {
        method: 'POST',
        headers: { ...stack.auth, 'Content-Type': 'application/json' },
        body: JSON.stringify({ name }),
      });
      if (res.status !== 201) throw new Error(`POST /media/folders answered ${res.status}`);
      const folderId = ((await res.json()) as { data: { id: number } }).data.id;
      ctx.log(`console: writing ${files} records into "${name}"`);
      // Records straight into MongoDB, as uploads make them (newest last); the
      // newest page's objects are stored too, so its thumbnails are real renders.
      const at = Date.now() - files * 1000;
      const docs = Array.from({ length: files }, (_, i) => {
        const n = String(i).padStart(5, '0');
        return recordOf(
          `${stack.organizationSlug}/f${files}-${n}-AAAAAAAAAAAA.png`,
          `f${files}-${n}.png`,
          folderId,
          new Date(at + i * 1000),
        );
      });
      for (let i = 0; i < docs.length; i += 5_000) {
        await Media.insertMany(docs.slice(i, i + 5_000), { ordered: false, lean: true });
      }
      const newest = docs.slice(-PAGE);
      await Promise.all(
        newest.map((d) => stack.store.put(d.key, png, { contentType: 'image/png' })),
      );
      folders.push({ id: folderId, name, files, first: docs[docs.length - 1]!.name });
    }

    // The newest file of all, in no folder: "All files" starts with it, every folder with its own.
    const outsideKey = `${stack.organizationSlug}/outside-AAAAAAAAAAAA.png`;
    if (!ctx.quick) await stack.store.put(outsideKey, png, { contentType: 'image/png' });
    await Media.insertMany([recordOf(outsideKey, OUTSIDE, null, new Date())], { lean: true });

    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
    });
    const clicks = new Map<number, number[]>();
    const reloads: number[] = [];
    /** The same first page's GET /media from Node alone (no browser): the API's share. */
    const alone = new Map<number, number[]>();
    const getAlone = async (folderId: number | null) => {
      const query = folderId === null ? '' : `&folderId=${folderId}`;
      const t = performance.now();
      const res = await fetch(`${stack.url}/media?limit=${PAGE}&sort=-createdAt${query}`, {
        headers: stack.auth,
      });
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`GET /media answered ${res.status}`);
      return performance.now() - t;
    };
    try {
      const page = await (
        await browser.newContext({ viewport: { width: 1280, height: 900 } })
      ).newPage();
      await page.goto(`${stack.url}/console/`);
      await page.getByLabel('API token').fill(stack.token);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('button', { name: 'List', exact: true }).click();
      const firstRow = page.locator('table.list tbody tr').first().locator('button.name');
      const rows = page.locator('table.list tbody tr');
      const onScreen = async (name: string, count: number) => {
        await firstRow.filter({ hasText: name }).waitFor({ timeout: 60_000 });
        while ((await rows.count()) < count) await page.waitForTimeout(5);
      };
      const newestOverall = OUTSIDE;
      await onScreen(newestOverall, PAGE);
      // Not measured: the first visit to each folder (Chromium's and the API's first use of the code paths).
      for (const f of ctx.quick ? [] : folders) {
        await page.getByRole('button', { name: `${f.name} (${f.files})` }).click();
        await onScreen(f.first, Math.min(PAGE, f.files));
      }
      for (let r = 0; r < rounds; r++) {
        ctx.log(`console: round ${r + 1}/${rounds}`);
        for (const f of folders) {
          // From "All files" (whose first row is another file) to the folder.
          await page.getByRole('button', { name: 'All files', exact: true }).click();
          await onScreen(newestOverall, PAGE);
          const t = performance.now();
          await page.getByRole('button', { name: `${f.name} (${f.files})` }).click();
          await onScreen(f.first, Math.min(PAGE, f.files));
          const ms = performance.now() - t;
          clicks.set(f.files, [...(clicks.get(f.files) ?? []), ms]);
          alone.set(f.files, [...(alone.get(f.files) ?? []), await getAlone(f.id)]);
        }
        alone.set(0, [...(alone.get(0) ?? []), await getAlone(null)]);
        // (Not in quick mode: a reload costs seconds on a loaded machine, and the click is the figure.)
        if (ctx.quick) continue;
        const t = performance.now();
        await page.reload();
        await onScreen(newestOverall, PAGE);
        reloads.push(performance.now() - t);
      }
    } finally {
      await browser.close();
      if (!ctx.quick) {
        // The API and the workers restart side by side.
        await Promise.all([stack.setWorkers(0), stack.setApiEnv({})]);
      }
    }

    const table: Table = {
      columns: [
        { key: 'what', label: 'on screen', digits: 0 },
        { key: 'ms', label: 'ms', digits: 0 },
        { key: 'api', label: 'its GET /media alone, from Node, ms', digits: 0 },
      ],
      rows: [
        ...folders.map((f) => ({
          what: `first page (${Math.min(PAGE, f.files)} rows) of a ${f.files.toLocaleString('en-US')}-file folder, from the click`,
          ms: stat(clicks.get(f.files)!),
          api: stat(alone.get(f.files)!),
        })),
        ...(reloads.length === 0
          ? []
          : [
              {
                what: `first page of "All files" (${(sizes.reduce((a, b) => a + b, 0) + 1).toLocaleString('en-US')} files), from a reload of the console`,
                ms: stat(reloads),
                api: stat(alone.get(0)!),
              },
            ]),
      ],
    };
    const largest = folders[folders.length - 1]!;
    return {
      id: 'console',
      title: 'Web console: first page of a large folder',
      method: [
        `Debian's Chromium (headless, playwright-core) against the API process, signed in, list view, newest first.`,
        `Records are written straight into MongoDB (${sizes.map((s) => s.toLocaleString('en-US')).join(' and ')} in their folders; the newest page's objects stored too, so its thumbnails are real renders).`,
        `A round: "All files" on screen, then a click on the folder, timed until its first row is the folder's newest file and ${PAGE} rows are in the table (one \`GET /media?folderId=&sort=&limit=${PAGE}\`, rendered; the thumbnails' \`POST /media/sign\` follows); then a reload of the console, timed until the first page of "All files" is on screen (the page's HTML and JavaScript, the token's probes, the folders and the page).`,
        `After each click, the same \`GET /media\` from Node alone (no browser) is timed too: the API's and the database's share of the figure.`,
        `${rounds} rounds after one unmeasured visit; the median with the min–max.`,
      ].join(' '),
      tables: [table],
      charts: [
        {
          id: 'console-first-page',
          title: 'Console: first page on screen',
          spec: bars({
            title: 'Console: first page on screen, ms',
            data: [
              ...folders.map((f) => ({
                group: `${f.files.toLocaleString('en-US')}-file folder, from the click`,
                ...stat(clicks.get(f.files)!),
              })),
              ...(reloads.length === 0
                ? []
                : [{ group: '"All files", from a reload', ...stat(reloads) }]),
            ].map(({ group, median, min, max }) => ({
              group,
              series: 'first page on screen',
              median,
              min,
              max,
            })),
            yTitle: 'ms',
            format: '.0f',
            rules: [{ y: BUDGET_MS, label: 'budget 1 s' }],
          }),
        },
      ],
      targets: [
        target(
          `first page of a ${largest.files.toLocaleString('en-US')}-file folder on screen`,
          stat(clicks.get(largest.files)!),
          '<=',
          BUDGET_MS,
          'ms',
          { digits: 0 },
        ),
      ],
    };
  },
};
