/**
 * `reconcile` and merged PDFs, whose keys (`merged_<ms>.pdf`) sit at the
 * bucket's root with no organization prefix: a merged PDF whose record is
 * gone shows as an object without a record, one whose object is gone as a
 * record without its object, for the whole bucket and for its organization
 * (attributed through its record, or its key claim when the record is gone),
 * never for another organization; `--fix` leaves a clean store. The commands
 * run one after another in one CLI process (`cliSession()`, the CLI's own
 * `runCli()`); test/integration/reconcile.test.ts runs `reconcile` in a
 * process of its own too.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { cliSession, type CliSession } from '../support/cli';
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { fixture, form } from '../support/files';
import { startWorker, type TestWorker } from '../support/worker';

interface Report {
  clean: boolean;
  objectsWithoutRecord: { key: string }[];
  recordsWithoutObject: { key: string; organizationId: number }[];
  scanned: { objects: number };
}

let api: TestApi;
let starting: Promise<CliSession> | undefined;
let session: CliSession;
let worker: TestWorker;
let acme: TestOrg;
let globex: TestOrg;
const merged: Record<'orphan' | 'missing' | 'good' | 'theirs', string> = {
  orphan: '',
  missing: '',
  good: '',
  theirs: '',
};

async function reconcile(...args: string[]): Promise<Report> {
  const out = await session.run('reconcile', '--older-than', '0', ...args);
  if (out.code !== 0) throw new Error(`reconcile ${args.join(' ')} failed: ${out.stderr}`);
  return JSON.parse(out.stdout) as Report;
}

async function merge(org: TestOrg): Promise<string> {
  const res = await fetch(`${api.url}/media/merge-pdfs`, {
    method: 'POST',
    headers: org.auth,
    body: form([['files', fixture('minimal-document.pdf'), 'one.pdf']]),
  });
  expect(res.status).toBe(201);
  const key = ((await res.json()) as { data: { key: string } }).data.key;
  expect(key).toMatch(/^merged_\d+\.pdf$/);
  return key;
}

beforeAll(async () => {
  api = await startApi('reconcile-merged');
  // The CLI process starts while the merges below are made.
  starting = cliSession(api.env.env);
  starting.catch(() => undefined);
  worker = await startWorker(api.env.env);
  acme = await api.createOrg('acme');
  globex = await api.createOrg('globex');
  for (const name of ['orphan', 'missing', 'good'] as const) merged[name] = await merge(acme);
  merged.theirs = await merge(globex);
  // A merged PDF whose record is gone, and one whose object is gone.
  await api.ctx.models.Media.deleteOne({ key: merged.orphan });
  await api.ctx.store.remove(merged.missing);
  // Storage times have one-second granularity: let a second pass for --older-than 0.
  await sleep(1_100);
  session = await starting;
}, 60_000);
afterAll(async () => {
  await (await starting?.catch(() => undefined))?.close();
  await worker?.close();
  await api?.close();
});

it('finds both over the whole bucket', async () => {
  const report = await reconcile();
  expect(report.objectsWithoutRecord.map((o) => o.key)).toEqual([merged.orphan]);
  expect(report.recordsWithoutObject).toEqual([
    expect.objectContaining({ key: merged.missing, organizationId: acme.organization.id }),
  ]);
});

it('finds both for their organization, and neither for another', async () => {
  const mine = await reconcile('--org', 'acme');
  expect(mine.objectsWithoutRecord.map((o) => o.key)).toEqual([merged.orphan]);
  expect(mine.recordsWithoutObject.map((r) => r.key)).toEqual([merged.missing]);
  // acme's root objects: the orphan and the good one (the missing one has no object).
  expect(mine.scanned.objects).toBe(2);

  const theirs = await reconcile('--org', 'globex');
  expect(theirs).toMatchObject({ clean: true, objectsWithoutRecord: [], recordsWithoutObject: [] });
  expect(theirs.scanned.objects).toBe(1);
});

it('--fix removes them and leaves the good merges alone', async () => {
  const fixed = await reconcile('--org', 'acme', '--fix');
  expect(fixed.clean).toBe(false);
  expect((await reconcile()).clean).toBe(true);
  expect(await api.ctx.store.stat(merged.orphan)).toBeNull();
  expect(await api.ctx.models.Media.countDocuments({ key: merged.missing })).toBe(0);
  for (const [key, org] of [
    [merged.good, acme],
    [merged.theirs, globex],
  ] as const) {
    const res = await fetch(`${api.url}/media/download?media=${key}`, { headers: org.auth });
    expect(res.status).toBe(200);
  }
});
