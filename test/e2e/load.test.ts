/**
 * The load test, short mode: 64 concurrent clients
 * mix uploads, downloads, metadata and conversions for ~10 s against the real
 * API process and TWO real worker processes, over the harness's Redis, S3 and
 * MongoDB. It asserts the invariants, not speed: no 5xx, no answer other than
 * the expected one (the only 4xx are the uploads deliberately refused), every
 * download's bytes match their record, and behind the API every 201 upload or
 * conversion has exactly one record and one object while every refused upload
 * has neither, with no orphan object and no open multipart upload.
 * The long mode (60 s, with the per-endpoint table) is `npm run bench:load`.
 */
import {
  ENDPOINTS,
  formatTable,
  runLoad,
  verifyLoad,
  type LoadResult,
  type UploadAttempt,
} from '../../bench/load';
import { createS3Client } from '../../shared/storage/s3-client';
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { fixture } from '../support/files';
import { startApiProcess, startWorkerProcess, type ServiceProcess } from '../support/processes';

const MiB = 1024 * 1024;
const MAX_FILE_SIZE = 6 * MiB; // over one 5 MiB part: an oversize upload is cut mid multipart upload
const DURATION_MS = Number(process.env.LOAD_TEST_DURATION_MS ?? 10_000);
const CONNECTIONS = 64;
const IMAGES = [
  'Canon_40D.jpg',
  'xmp-BlueSquare.jpg',
  'orientation-landscape_6.jpg',
  'tiff-BSG1.tiff',
];

let harness: TestApi; // in-process, only to set up the organization and look behind the API
let org: TestOrg;
let api: ServiceProcess;
const workers: ServiceProcess[] = [];
let result: LoadResult | undefined;

beforeAll(async () => {
  harness = await startApi('e2eload', {
    // 5 MiB parts (S3's minimum): the 7 MiB oversize upload has begun a multipart upload
    // when the limit cuts it, so its abort is what the invariants check.
    env: {
      MAX_FILE_SIZE: String(MAX_FILE_SIZE),
      S3_PART_SIZE: String(5 * MiB),
      S3_SINGLE_PUT_MAX: '0',
      RATE_LIMIT_MAX: '0',
      // One token plays many clients: no cap on its uploads in flight.
      MAX_UPLOADS_IN_FLIGHT: '1000',
    },
  });
  org = await harness.createOrg('load');
  const env = harness.env.env; // JOB_WAIT_MS and WORKER_CONCURRENCY at their defaults
  const started = await Promise.all([
    startApiProcess(env),
    startWorkerProcess(env),
    startWorkerProcess(env),
  ]);
  api = started[0];
  workers.push(started[1], started[2]);
}, 120_000);
afterAll(async () => {
  await Promise.all([...workers, api].filter(Boolean).map((p) => p.kill('SIGTERM')));
  await harness.close();
}, 60_000);

/** What the API logged at error level (shown when an answer was not the expected one). */
const errorLogs = () =>
  api.logs.filter((l) => l.includes('"level":"error"') || l.includes('"level":50')).slice(0, 5);

it('64 clients, two workers: no 5xx, every upload and conversion stored once or not at all', async () => {
  result = await runLoad({
    url: api.url!,
    token: org.token,
    durationMs: DURATION_MS,
    connections: CONNECTIONS,
    images: IMAGES.map((name) => ({ name, data: fixture(name) })),
    maxFileSize: MAX_FILE_SIZE,
    refuseEvery: 10,
    oversizeEvery: 40,
  });
  process.stdout.write(`\nload test, short mode (${DURATION_MS} ms)\n${formatTable(result)}\n`);

  // Every endpoint took part, and nothing answered 5xx or failed without an answer.
  for (const endpoint of ENDPOINTS) {
    const stats = result.endpoints[endpoint];
    expect({ endpoint, busy: stats.requests >= 10 }).toEqual({ endpoint, busy: true });
    const failures = Object.keys(stats.statuses).filter((s) => s === 'error' || Number(s) >= 500);
    // (with what went wrong, when something did)
    const details = result.unexpected.filter((u) => u.endpoint === endpoint);
    expect({ endpoint, failures, details }).toEqual({ endpoint, failures: [], details: [] });
  }
  // Every answer is the expected one: 2xx, or 413/415 for the uploads meant to be refused.
  expect({ unexpected: result.unexpected, apiErrors: errorLogs() }).toEqual({
    unexpected: [],
    apiErrors: [],
  });
  expect(result.downloadMismatches).toEqual([]);
  const deliberate = result.uploads.filter((u) => u.expected === 'refused');
  expect(deliberate.map((u) => u.status)).toEqual(
    deliberate.map((u) => (u.bytes > MAX_FILE_SIZE ? 413 : 415)),
  );
  expect(new Set(deliberate.map((u) => u.status))).toEqual(new Set([413, 415]));

  // Behind the API: one record and one object per success, nothing per refusal, nothing else.
  const check = await verifyLoad(harness.ctx, result);
  expect(check.violations).toEqual([]);
  expect(check.failedJobs).toBe(0);
  const stored = result.uploads.filter((u) => u.status === 201).length;
  const converted = result.conversions.filter((c) => c.status === 201).length;
  expect(check).toMatchObject({
    storedUploads: stored,
    refusedUploads: deliberate.length,
    storedConversions: converted,
    records: stored + converted,
    objects: stored + converted,
  });
  expect(converted).toBeGreaterThan(0);
  // Both workers took jobs.
  for (const worker of workers) {
    expect(worker.logs.some((l) => l.includes('"msg":"job completed"'))).toBe(true);
  }
}, 120_000);

it('the invariant check sees an orphan object, a record without object and an open multipart upload', async () => {
  expect(result).toBeDefined(); // from the load above
  const refused = result!.uploads.find((u) => u.expected === 'refused') as UploadAttempt;
  const base = refused.name.slice(0, refused.name.lastIndexOf('.'));
  const orphan = `load/${base}-planted.jpg`;
  const ghost = { key: 'load/ghost-planted.jpg', id: 999_999 };
  const open = 'load/open-planted.jpg';
  const s3 = createS3Client(harness.env.config.s3!);

  await harness.ctx.store.put(orphan, fixture('Canon_40D.jpg'), { contentType: 'image/jpeg' });
  await harness.ctx.models.Media.create({
    ...ghost,
    organizationId: org.organization.id,
    folderId: null,
    name: 'ghost.jpg',
    mimetype: 'image/jpeg',
    bytes: 10,
    checksum: 'sha256:00',
  });
  const uploadId = await s3.initiateNewMultipartUpload(harness.env.bucket, open, {});
  try {
    const check = await verifyLoad(harness.ctx, result!);
    expect(check.violations).toEqual([
      `upload ${refused.name} (${refused.status}): refused, yet objects exist: ${orphan}`,
      `record ${ghost.id} (${ghost.key}) answers no successful request`,
      `record ${ghost.id} (${ghost.key}) has no object`,
      `object ${orphan} has no record`,
      `multipart upload left open: ${open}`,
    ]);
  } finally {
    await s3.abortMultipartUpload(harness.env.bucket, open, uploadId);
    await harness.ctx.store.remove(orphan);
    await harness.ctx.models.Media.deleteOne({ id: ghost.id });
  }
}, 60_000);
