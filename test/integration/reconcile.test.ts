/**
 * The `reconcile` operator command against a bucket and a database holding
 * one orphan of each kind, made directly behind the API: an object without a
 * record, a job's temporary input without its job, a record whose object is
 * gone, and a multipart upload left open. It reports them; `--org` narrows it
 * to one organization; `--fix` leaves a clean store and database and good
 * files as they were; the grace period keeps an upload in flight safe, and a
 * queued job keeps its temporary input. The first report runs as operators
 * run it (`npm run cli`, a process of its own: JSON on stdout, and the
 * process ends); the other commands run one after another in one CLI process
 * (`cliSession()`), through the same `runCli()`, answering the exit code,
 * stdout and stderr their process would.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { cliSession, runCli, type CliSession } from '../support/cli';
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { eventually } from '../support/eventually';
import { fixture, form } from '../support/files';
import { createS3Client } from '../../shared/storage/s3-client';

const MB = 1024 * 1024;

interface Report {
  scope: { organization: string | null; prefix: string; olderThanMs: number };
  fixed: boolean;
  clean: boolean;
  objectsWithoutRecord: { key: string; bytes: number; temporary: boolean }[];
  recordsWithoutObject: { id: number; key: string; organizationId: number }[];
  incompleteUploads: { key: string; uploadId: string }[];
  scanned: { objects: number; records: number; incompleteUploads: number; tooRecent: number };
}

let api: TestApi;
let starting: Promise<CliSession> | undefined;
let session: CliSession;
let mine: TestOrg;
let other: TestOrg;
const good: { key: string; bytes: Buffer; org: TestOrg }[] = [];

/** A command in its own process, as an operator runs it. */
const spawned = (...args: string[]) => runCli(api.env.env, ...args);
/** A command in the file's one CLI process. */
const cli = (...args: string[]) => session.run(...args);

function reportOf(args: string[], out: { code: number; stdout: string; stderr: string }): Report {
  if (out.code !== 0) throw new Error(`reconcile ${args.join(' ')} failed: ${out.stderr}`);
  return JSON.parse(out.stdout) as Report;
}

const reconcile = async (...args: string[]) => reportOf(args, await cli('reconcile', ...args));

/** Opens a multipart upload with one part, as a put cut off by an outage leaves it. */
async function openMultipartUpload(key: string): Promise<void> {
  const client = createS3Client(api.env.config.s3!);
  const uploadID = await client.initiateNewMultipartUpload(api.env.bucket, key, {
    'Content-Type': 'image/jpeg',
  });
  await client.uploadPart(
    { bucketName: api.env.bucket, objectName: key, uploadID, partNumber: 1, headers: {} },
    randomBytes(5 * MB),
  );
}

const orphans = {
  object: 'recon/lost-abc123.jpg',
  temporary: `recon/.tmp/${randomUUID()}.pdf`,
  otherOrg: 'elsewhere/lost-def456.png',
  upload: 'recon/cut-off-ghi789.jpg',
  recordKey: '', // set in beforeAll: a record whose object is removed
};

beforeAll(async () => {
  // S3_SINGLE_PUT_MAX=0: an upload past one part is a multipart upload at once (one is cut below).
  api = await startApi('reconcile', { env: { S3_SINGLE_PUT_MAX: '0' } });
  // The CLI process starts while the files below are made.
  starting = cliSession(api.env.env);
  starting.catch(() => undefined);
  mine = await api.createOrg('recon');
  other = await api.createOrg('elsewhere');
  // Good files, in both organizations.
  for (const [org, file, name] of [
    [mine, 'Canon_40D.jpg', 'good.jpg'],
    [mine, 'minimal-document.pdf', 'good.pdf'],
    [other, 'xmp-BlueSquare.jpg', 'theirs.jpg'],
  ] as const) {
    const bytes = fixture(file);
    good.push({ key: await org.upload(bytes, name), bytes, org });
  }
  // One orphan of each kind.
  await api.ctx.store.put(orphans.object, fixture('Canon_40D.jpg'), { contentType: 'image/jpeg' });
  await api.ctx.store.put(orphans.temporary, fixture('minimal-document.pdf'), {
    contentType: 'application/pdf',
  });
  await api.ctx.store.put(orphans.otherOrg, fixture('Canon_40D.jpg'), {
    contentType: 'image/png',
  });
  await openMultipartUpload(orphans.upload);
  orphans.recordKey = await mine.upload('orientation-landscape_6.jpg', 'gone.jpg');
  await api.ctx.store.remove(orphans.recordKey);
  // Storage times have one-second granularity (Swift rounds them up): let a
  // second pass, so "--older-than 0" sees everything made above.
  await sleep(1_100);
  session = await starting;
}, 60_000);
afterAll(async () => {
  await (await starting?.catch(() => undefined))?.close();
  await api?.close();
});

it('reports each kind of orphan as JSON, and changes nothing', async () => {
  // As an operator runs it: a process of its own.
  const args = ['--older-than', '0'];
  const report = reportOf(args, await spawned('reconcile', ...args));
  expect(report.scope).toMatchObject({ organization: null, prefix: '', olderThanMs: 0 });
  expect(report).toMatchObject({ fixed: false, clean: false });
  expect(report.objectsWithoutRecord.map((o) => [o.key, o.temporary]).sort()).toEqual(
    [
      [orphans.object, false],
      [orphans.temporary, true],
      [orphans.otherOrg, false],
    ].sort(),
  );
  expect(report.recordsWithoutObject).toEqual([
    expect.objectContaining({ key: orphans.recordKey, organizationId: mine.organization.id }),
  ]);
  expect(report.incompleteUploads).toEqual([
    expect.objectContaining({ key: orphans.upload, uploadId: expect.any(String) as string }),
  ]);
  expect(report.scanned).toMatchObject({ objects: 6, records: 4, incompleteUploads: 1 });

  // A report only: everything is still there.
  expect(await api.objectKeys()).toEqual(
    [...good.map((g) => g.key), orphans.object, orphans.temporary, orphans.otherOrg].sort(),
  );
  expect(await api.ctx.models.Media.countDocuments({ key: orphans.recordKey })).toBe(1);
  expect(await api.ctx.store.listIncompleteUploads('')).toEqual([orphans.upload]);
});

it('leaves alone what is inside the grace period (default one hour)', async () => {
  const report = await reconcile('--fix');
  expect(report).toMatchObject({ fixed: true, clean: true, scope: { olderThanMs: 3_600_000 } });
  expect(report.scanned.tooRecent).toBeGreaterThanOrEqual(6 + 4 + 1);
  expect(await api.objectKeys()).toHaveLength(good.length + 3);
  expect(await api.ctx.store.listIncompleteUploads('')).toEqual([orphans.upload]);
});

it('--org reconciles one organization only', async () => {
  const report = await reconcile('--org', 'elsewhere', '--older-than', '0', '--fix');
  expect(report.scope).toMatchObject({ organization: 'elsewhere', prefix: 'elsewhere/' });
  expect(report.objectsWithoutRecord.map((o) => o.key)).toEqual([orphans.otherOrg]);
  expect(report.recordsWithoutObject).toEqual([]);
  expect(report.incompleteUploads).toEqual([]);
  expect(await api.ctx.store.stat(orphans.otherOrg)).toBeNull();
  // The other organization's orphans are still there.
  expect(await api.ctx.store.stat(orphans.object)).not.toBeNull();
  expect(await api.ctx.store.listIncompleteUploads('recon/')).toEqual([orphans.upload]);
});

it('--fix removes the orphans and aborts the upload; good files are untouched', async () => {
  const fixed = await reconcile('--older-than', '0', '--fix');
  expect(fixed).toMatchObject({ fixed: true, clean: false });
  expect(fixed.objectsWithoutRecord.map((o) => o.key).sort()).toEqual(
    [orphans.object, orphans.temporary].sort(),
  );
  expect(fixed.recordsWithoutObject.map((r) => r.key)).toEqual([orphans.recordKey]);
  expect(fixed.incompleteUploads.map((u) => u.key)).toEqual([orphans.upload]);

  // A clean store and a clean database.
  expect(await reconcile('--older-than', '0')).toMatchObject({
    clean: true,
    objectsWithoutRecord: [],
    recordsWithoutObject: [],
    incompleteUploads: [],
  });
  expect(await api.objectKeys()).toEqual(good.map((g) => g.key).sort());
  expect(await api.ctx.store.listIncompleteUploads('')).toEqual([]);
  const records = await api.ctx.models.Media.find({}, { key: 1, _id: 0 }).lean();
  expect(records.map((r) => r.key).sort()).toEqual(good.map((g) => g.key).sort());

  // Good files read back byte for byte, through the API.
  for (const g of good) {
    const res = await fetch(`${api.url}/media/download?media=${encodeURIComponent(g.key)}`, {
      headers: g.org.auth,
    });
    expect(res.status).toBe(200);
    expect(Buffer.from(await res.arrayBuffer()).equals(g.bytes)).toBe(true);
  }
});

it("spares a job's temporary input while the job is queued; removes it once the job is gone", async () => {
  // A merge with an uploaded input, queued (no worker here): the job owns its input.
  const res = await fetch(`${api.url}/media/merge-pdfs`, {
    method: 'POST',
    headers: { ...mine.auth, Prefer: 'respond-async' },
    body: form([['files', fixture('minimal-document.pdf'), 'input.pdf']]),
  });
  expect(res.status).toBe(202);
  const { jobId } = ((await res.json()) as { data: { jobId: string } }).data;
  const [input] = await api.objectKeys('recon/.tmp/');
  expect(input).toBeDefined();
  // Storage times have one-second granularity: let a second pass for --older-than 0.
  await sleep(1_100);

  const spared = await reconcile('--older-than', '0', '--fix');
  expect(spared).toMatchObject({ clean: true, scanned: { ownedByJobs: 1 } });
  expect(await api.objectKeys('recon/.tmp/')).toEqual([input]);

  // The job vanishes without running (removed by an operator, say): its input is an orphan.
  await (await api.ctx.queue.queue('pdf').getJob(jobId))!.remove();
  const fixed = await reconcile('--older-than', '0', '--fix');
  expect(fixed.objectsWithoutRecord).toEqual([
    expect.objectContaining({ key: input, temporary: true }),
  ]);
  expect(await api.objectKeys('recon/.tmp/')).toEqual([]);
});

it('run during an upload in flight, --fix never touches it (grace period)', async () => {
  // A 20 MB upload, half sent: its multipart upload is open, it has no record yet.
  const boundary = `----test${randomBytes(8).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="live.jpg"\r\nContent-Type: image/jpeg\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const bytes = Buffer.concat([fixture('Canon_40D.jpg'), randomBytes(20 * MB)]);
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  async function* body() {
    yield head;
    yield bytes.subarray(0, 10 * MB);
    await held;
    yield bytes.subarray(10 * MB);
    yield tail;
  }
  const response = fetch(`${api.url}/media/upload`, {
    method: 'POST',
    headers: {
      ...mine.auth,
      'Content-Type': `multipart/form-data; boundary=${boundary}`,
      'Content-Length': String(head.length + bytes.length + tail.length),
    },
    body: webStream(body()),
    duplex: 'half',
  });
  await eventually(
    async () => expect(await api.ctx.store.listIncompleteUploads('recon/')).toHaveLength(1),
    10_000,
    50,
  );

  const report = await reconcile('--fix');
  expect(report.incompleteUploads).toEqual([]);
  release();
  const res = await response;
  expect(res.status).toBe(201);
  const { key } = ((await res.json()) as { data: { key: string } }).data;
  expect(await api.ctx.store.stat(key)).toMatchObject({ size: bytes.length });
  expect(await api.ctx.models.Media.countDocuments({ key })).toBe(1);
}, 60_000);

it('refuses a bad duration (usage, exit 2) and an unknown organization (exit 1)', async () => {
  const bad = await cli('reconcile', '--older-than', 'soon');
  expect(bad.code).toBe(2);
  expect(bad.stderr).toContain('"error":"USAGE"');
  const unknown = await cli('reconcile', '--org', 'nobody');
  expect(unknown.code).toBe(1);
  expect(unknown.stderr).toContain('"error":"NOT_FOUND"');
});

function webStream(iterable: AsyncIterable<Buffer>): ReadableStream<Uint8Array> {
  const iterator = iterable[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await iterator.next();
      if (next.done) controller.close();
      else controller.enqueue(next.value);
    },
  });
}
