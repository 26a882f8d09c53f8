/**
 * Malware scanning against a real clamd (the Debian package, started by
 * test/support/services/clamd.ts with a signature database this file's
 * harness writes: TEST_MALWARE). Through the API, the outbox, the scan
 * listener, the `scan` queue and a worker: a clean file becomes `clean` and
 * is served; the test string becomes `infected`, its object moves under the
 * organization's quarantine prefix and it is never served (download, render,
 * signed URL, metadata, convert, merge); files over each of clamd's limits
 * are `unscanned`; with clamd stopped a file stays `pending` (refused, the
 * worker not ready) and becomes `clean` once clamd is back; the policy
 * serves pending and unscanned files to an organization that allows them.
 * Records and objects match throughout (reconcile, and the harness's own
 * check when the API closes).
 */
import { fixture } from '../../support/files';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { reconcileNow } from '../../support/context';
import { eventually } from '../../support/eventually';
import { expectMatchesSpec } from '../../support/openapi';
import {
  startClamd,
  TEST_MALWARE,
  TEST_SIGNATURE,
  type TestClamd,
} from '../../support/services/clamd';
import { startWorker, type TestWorker } from '../../support/worker';

const MiB = 1024 * 1024;
const SIGNING_KEY = 'scan-signing-key-0123456789abcdef0123456789';

let clamd: TestClamd;
let api: TestApi;
let worker: TestWorker;
let org: TestOrg;

beforeAll(async () => {
  // clamd's limits: a stream past 2 MiB is refused; a file past 1 MiB is not read whole
  // (reported as Heuristics.Limits.Exceeded: AlertExceedsMax). The service sends at most 3 MiB.
  clamd = await startClamd({ streamMaxLength: '2M', maxScanSize: '1M', alertExceedsMax: true });
  const env = {
    CLAMD_URL: clamd.url,
    CLAMD_MAX_BYTES: String(3 * MiB),
    URL_SIGNING_KEYS: SIGNING_KEY,
  };
  api = await startApi('scan', { env });
  worker = await startWorker(api.env.env, { CLAMD_TIMEOUT_MS: '2000' });
  org = await api.createOrg('scanned');
}, 60_000);
afterAll(async () => {
  await worker?.close();
  await api?.close();
  await clamd?.close();
});

/** A JPEG with bytes after its end (decoders ignore them): `extra` padding, then `tail`. */
function jpegWith(tail: string, extra = 0): Buffer {
  return Buffer.concat([fixture('Canon_40D.jpg'), Buffer.alloc(extra, 0x20), Buffer.from(tail)]);
}
/** A PDF with a comment after its end. */
function pdfWith(tail: string): Buffer {
  return Buffer.concat([fixture('minimal-document.pdf'), Buffer.from(`\n% ${tail}\n`)]);
}

async function record(key: string) {
  return api.ctx.models.Media.findOne({ key }).lean();
}
async function statusOf(key: string) {
  return (await record(key))?.scanStatus;
}
async function eventuallyStatus(key: string, status: string, timeoutMs = 20_000) {
  await eventually(async () => expect(await statusOf(key)).toBe(status), timeoutMs);
}

async function get(path: string, as: TestOrg = org) {
  const res = await fetch(`${api.url}${path}`, { headers: as.auth });
  const body = res.headers.get('content-type')?.includes('json')
    ? ((await res.json()) as { error?: string; data?: unknown })
    : Buffer.from(await res.arrayBuffer());
  return { status: res.status, headers: res.headers, body };
}
const download = (key: string, as?: TestOrg) =>
  get(`/media/download?media=${encodeURIComponent(key)}`, as);

async function post(path: string, body: unknown, as: TestOrg = org) {
  const res = await fetch(`${api.url}${path}`, {
    method: 'POST',
    headers: { ...as.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as { error?: string; data?: unknown } };
}

async function merge(keys: string[], as: TestOrg = org) {
  const fd = new FormData();
  for (const k of keys) fd.append('mediaKeys', k);
  const res = await fetch(`${api.url}/media/merge-pdfs`, {
    method: 'POST',
    headers: as.auth,
    body: fd,
  });
  return { status: res.status, body: (await res.json()) as { error?: string; data?: unknown } };
}

async function scrape(): Promise<string> {
  return (await fetch(`${worker.opsUrl}/metrics`)).text();
}

describe('a clean file', () => {
  it('is pending when stored, clean once scanned, then served', async () => {
    const bytes = fixture('Canon_40D.jpg');
    const uploaded = await org.uploadRecord(bytes, 'clean.jpg');
    expect((uploaded as unknown as { scanStatus: string }).scanStatus).toBe('pending');
    await eventuallyStatus(uploaded.key, 'clean');
    const res = await download(uploaded.key);
    expect(res.status).toBe(200);
    expect(Buffer.compare(res.body as Buffer, bytes)).toBe(0);
    const shown = await get(`/media/record?media=${encodeURIComponent(uploaded.key)}`);
    expect(shown.body).toMatchObject({ data: { key: uploaded.key, scanStatus: 'clean' } });
    expectMatchesSpec('GET', '/media/record', shown.status, shown.body, shown.headers);
  });

  it('converted, gives a result recorded clean without a scan of its own', async () => {
    const source = await org.upload('Canon_40D.jpg', 'source.jpg');
    await eventuallyStatus(source, 'clean');
    const converted = await post('/media/convert', { mediaKey: source, format: 'png' });
    expect(converted.status).toBe(201);
    expect(converted.body.data).toMatchObject({ scanStatus: 'clean' });
  });
});

describe('a file holding the test signature', () => {
  let jpeg: { key: string; bytes: Buffer };
  let pdf: string;
  let cleanPdf: string;

  beforeAll(async () => {
    const bytes = jpegWith(TEST_MALWARE);
    jpeg = { key: await org.upload(bytes, 'infected.jpg'), bytes };
    pdf = await org.upload(pdfWith(TEST_MALWARE), 'infected.pdf');
    cleanPdf = await org.upload('minimal-document.pdf', 'clean.pdf');
    await eventuallyStatus(jpeg.key, 'infected');
    await eventuallyStatus(pdf, 'infected');
    await eventuallyStatus(cleanPdf, 'clean');
  });

  it('is quarantined: its object moved under the quarantine prefix, none left at its key', async () => {
    const doc = await record(jpeg.key);
    expect(doc).toMatchObject({
      scanStatus: 'infected',
      scanSignature: TEST_SIGNATURE,
      quarantineKey: `${org.organization.slug}/.quarantine/${jpeg.key}`,
    });
    expect(await api.ctx.store.stat(jpeg.key)).toBeNull();
    const moved = await api.ctx.store.get(doc!.quarantineKey!);
    const chunks: Buffer[] = [];
    for await (const c of moved) chunks.push(c as Buffer);
    expect(Buffer.compare(Buffer.concat(chunks), jpeg.bytes)).toBe(0);
  });

  it('is never served: download, render, signed URL, metadata, convert, merge', async () => {
    const enc = encodeURIComponent(jpeg.key);
    const refused = [
      await download(jpeg.key),
      await get(`/media/render?media=${enc}&w=20`),
      await get(`/media/metadata?mediaKey=${enc}`),
      await post('/media/convert', { mediaKey: jpeg.key, format: 'png' }),
      await post('/media/sign', { mediaKey: jpeg.key }),
      await merge([cleanPdf, pdf]),
    ];
    for (const res of refused) {
      expect({ status: res.status, error: (res.body as { error?: string }).error }).toEqual({
        status: 403,
        error: 'FILE_INFECTED',
      });
    }
    const d = await download(jpeg.key);
    expectMatchesSpec('GET', '/media/download', d.status, d.body, d.headers);
    // The quarantine key itself is no record's key: not found.
    expect((await download(`${org.organization.slug}/.quarantine/${jpeg.key}`)).status).toBe(404);
  });

  it('is told: a media.infected event naming the signature, a metric', async () => {
    const doc = await record(jpeg.key);
    await eventually(async () => {
      const event = await api.ctx.models.Event.findById(`media.infected:${doc!.id}`).lean();
      expect(event?.data).toMatchObject({ media: { key: jpeg.key, signature: TEST_SIGNATURE } });
    });
    expect(await scrape()).toMatch(/^media_scans_total\{outcome="infected"\} [1-9]/m);
  });

  it('is deleted with its quarantined object; records and objects match', async () => {
    const doc = await record(pdf);
    const res = await fetch(`${api.url}/media/record?media=${encodeURIComponent(pdf)}`, {
      method: 'DELETE',
      headers: org.auth,
    });
    expect(res.status).toBe(200);
    expect(await api.ctx.store.stat(doc!.quarantineKey!)).toBeNull();
    const report = await reconcileNow(api.ctx.store, api.ctx.models, undefined);
    expect(report.objectsWithoutRecord).toEqual([]);
    expect(report.recordsWithoutObject).toEqual([]);
  });
});

describe('a file over the scanner’s limits', () => {
  it('is unscanned, never clean: past MaxScanSize, past StreamMaxLength, past CLAMD_MAX_BYTES', async () => {
    // The signature sits past 1 MiB: clamd would answer OK without AlertExceedsMax.
    const overScan = await org.upload(jpegWith(TEST_MALWARE, 1.2 * MiB), 'over-scan.jpg');
    const overStream = await org.upload(jpegWith('', 2.5 * MiB), 'over-stream.jpg');
    const overService = await org.upload(jpegWith('', 3.2 * MiB), 'over-service.jpg');
    for (const key of [overScan, overStream, overService]) await eventuallyStatus(key, 'unscanned');
    const res = await download(overScan);
    expect({ status: res.status, error: (res.body as { error?: string }).error }).toEqual({
      status: 409,
      error: 'FILE_NOT_SCANNED',
    });
    expectMatchesSpec('GET', '/media/download', res.status, res.body, res.headers);
    expect(await scrape()).toMatch(/^media_scans_total\{outcome="unscanned"\} [3-9]/m);
  });
});

describe('clamd away', () => {
  it('leaves files pending (refused, the worker not ready), then clean once it is back', async () => {
    await clamd.stop();
    try {
      const key = await org.upload('Canon_40D.jpg', 'while-away.jpg');
      // The first attempt fails and is retried: the file is still pending.
      await eventually(async () =>
        expect(await scrape()).toMatch(/^media_scans_total\{outcome="error"\} [1-9]/m),
      );
      expect(await statusOf(key)).toBe('pending');
      const res = await download(key);
      expect({ status: res.status, error: (res.body as { error?: string }).error }).toEqual({
        status: 409,
        error: 'SCAN_PENDING',
      });
      expect(res.headers.get('retry-after')).toBe('5');
      expectMatchesSpec('GET', '/media/download', res.status, res.body, res.headers);
      const ready = await fetch(`${worker.opsUrl}/readyz`);
      expect(ready.status).toBe(503);
      await clamd.start();
      await eventuallyStatus(key, 'clean', 30_000);
      expect((await download(key)).status).toBe(200);
      await eventually(async () =>
        expect((await fetch(`${worker.opsUrl}/readyz`)).status).toBe(200),
      );
    } finally {
      await clamd.start().catch(() => undefined);
    }
  }, 60_000);
});

describe('the organization’s policy', () => {
  it('not-infected serves pending and unscanned files, never infected ones; clean-only refuses them', async () => {
    const lenient = await api.createOrg('lenient');
    await api.ctx.organizations.setScanPolicy(lenient.organization.id, 'not-infected');
    const unscanned = await lenient.upload(jpegWith('', 3.2 * MiB), 'big.jpg');
    const infected = await lenient.upload(jpegWith(TEST_MALWARE), 'bad.jpg');
    await eventuallyStatus(unscanned, 'unscanned');
    await eventuallyStatus(infected, 'infected');
    expect((await download(unscanned, lenient)).status).toBe(200);
    expect(
      (await get(`/media/render?media=${encodeURIComponent(unscanned)}&w=20`, lenient)).status,
    ).toBe(200);
    expect((await download(infected, lenient)).status).toBe(403);

    await clamd.stop();
    try {
      const pending = await lenient.upload('Canon_40D.jpg', 'pending.jpg');
      expect(await statusOf(pending)).toBe('pending');
      expect((await download(pending, lenient)).status).toBe(200);
      // Back to the default (clean-only): the same files are refused.
      await api.ctx.organizations.setScanPolicy(lenient.organization.id, null);
      expect((await download(pending, lenient)).status).toBe(409);
      expect((await download(unscanned, lenient)).status).toBe(409);
    } finally {
      await clamd.start();
    }
  }, 60_000);
});
