/**
 * Decompression and page bombs through the job endpoints, with a real worker
 * process: images that declare billions of pixels, PDFs with page trees
 * 10,000 deep or 2^40 pages wide, 100,000 page references, and PDFs whose
 * object or cross-reference streams inflate to gigabytes. Upload only sniffs
 * the first bytes, so the bombs are stored; the metadata, convert and merge
 * jobs answer them quickly, in the documented envelope, within bounded
 * memory. Each job's wall time (at the API) and the worker's peak RSS
 * (VmHWM, reset before each job) are measured and printed.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { createDeflate, crc32, deflateSync } from 'node:zlib';
import sharp from 'sharp';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorkerProcess, type ServiceProcess } from '../../support/processes';

type Body = {
  statusCode: number;
  message: string;
  error?: string;
  data?: Record<string, unknown> & { key?: string };
  details?: { index?: number; name?: string }[];
};

const MB = 1024 * 1024;
/** Generous bounds for a shared 2-core machine; the figures printed are what was measured. */
const MAX_JOB_MS = 15_000;
const MAX_PEAK_GROWTH_MB = 320;

let api: TestApi;
let worker: ServiceProcess;
let org: TestOrg;
let baselineMb = 0;
const figures: {
  bomb: string;
  bytes: number;
  status: number;
  ms: number;
  beforeMb: number;
  peakMb: number;
}[] = [];

beforeAll(async () => {
  // Bombs, not the per-token cost limit, are under test here (a dozen merges cost more than a minute's 600 units).
  api = await startApi('bombs', { env: { RATE_LIMIT_MAX: '0' } });
  org = await api.createOrg('bombs');
  worker = await startWorkerProcess({ ...api.env.env, WORKER_CONCURRENCY: '1' });
  // Warm the worker (sharp, pdf-lib, the queue connections) so the baseline is its working size.
  const warm = await org.upload('Canon_40D.jpg', 'warm.jpg');
  expect((await job('GET', '/media/metadata', { mediaKey: warm })).status).toBe(200);
  expect((await job('POST', '/media/convert', { mediaKey: warm, format: 'png' })).status).toBe(201);
  expect((await merge([[fixture('minimal-document.pdf'), 'warm.pdf']])).status).toBe(201);
  baselineMb = rssMb('VmRSS');
}, 90_000);

afterAll(async () => {
  const rows = figures.map(
    (f) =>
      `| ${f.bomb} | ${f.bytes.toLocaleString('en')} | ${f.status} | ${f.ms} | ${f.beforeMb} | ${f.peakMb} (+${f.peakMb - f.beforeMb}) |`,
  );
  const table = [
    `worker RSS after warm-up: ${baselineMb} MB`,
    '| bomb | bytes | status | ms | worker RSS before, MB | worker peak RSS during the job, MB |',
    '|---|---|---|---|---|---|',
    ...rows,
  ].join('\n');
  process.stdout.write(`\n${table}\n`);
  if (process.env.BOMBS_FIGURES_FILE) writeFileSync(process.env.BOMBS_FIGURES_FILE, `${table}\n`);
  await worker?.kill('SIGTERM');
  await api?.close();
}, 30_000);

// ---------------------------------------------------------------------------
// Measuring the worker

/** VmHWM (peak) or VmRSS (now) of the worker process, in MB. */
function rssMb(field: 'VmHWM' | 'VmRSS'): number {
  const status = readFileSync(`/proc/${worker.child.pid}/status`, 'utf8');
  const kb = Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1]);
  return Math.round(kb / 1024);
}

/**
 * Runs `call` with the worker's peak RSS reset first; records time, the RSS
 * before and the peak during the job (memory freed by earlier jobs is not
 * always returned to the system, so the job's own cost is peak − before).
 */
async function measured<T extends { status: number }>(
  bomb: string,
  bytes: number,
  call: () => Promise<T>,
): Promise<T> {
  try {
    writeFileSync(`/proc/${worker.child.pid}/clear_refs`, '5'); // VmHWM := VmRSS
  } catch {
    // (a read-only /proc: VmHWM is then the peak since the worker started, a stricter figure)
  }
  const beforeMb = rssMb('VmRSS');
  const started = performance.now();
  const result = await call();
  const ms = Math.round(performance.now() - started);
  const peakMb = rssMb('VmHWM');
  figures.push({ bomb, bytes, status: result.status, ms, beforeMb, peakMb });
  expect(ms).toBeLessThan(MAX_JOB_MS);
  expect(peakMb - beforeMb).toBeLessThan(MAX_PEAK_GROWTH_MB);
  // The worker is still there.
  expect(worker.child.exitCode).toBeNull();
  return result;
}

// ---------------------------------------------------------------------------
// The API

async function job(method: 'GET' | 'POST', path: string, fields: Record<string, string>) {
  const res =
    method === 'GET'
      ? await fetch(`${api.url}${path}?${new URLSearchParams(fields).toString()}`, {
          headers: org.auth,
        })
      : await fetch(`${api.url}${path}`, {
          method,
          headers: { ...org.auth, 'Content-Type': 'application/json' },
          body: JSON.stringify(fields),
        });
  const body = (await res.json()) as Body;
  expectMatchesSpec(method, path, res.status, body, res.headers);
  return { status: res.status, body };
}

async function merge(files: [Buffer, string][]) {
  const fd = new FormData();
  for (const [bytes, name] of files) fd.append('files', new Blob([bytes]), name);
  const res = await fetch(`${api.url}/media/merge-pdfs`, {
    method: 'POST',
    headers: org.auth,
    body: fd,
  });
  const body = (await res.json()) as Body;
  expectMatchesSpec('POST', '/media/merge-pdfs', res.status, body, res.headers);
  return { status: res.status, body };
}

// ---------------------------------------------------------------------------
// Image bombs

function pngChunk(type: string, data: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const typed = Buffer.concat([Buffer.from(type, 'latin1'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(typed) >>> 0);
  return Buffer.concat([length, typed, crc]);
}

/** A valid PNG header declaring width × height 8-bit grey pixels, with a few rows of zeros. */
function pngBomb(width: number, height: number): Buffer {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 0; // grey
  const rows = Buffer.alloc(4 * (1 + width)); // filter byte + pixels, four rows
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk('IHDR', ihdr),
    pngChunk('IDAT', deflateSync(rows, { level: 9 })),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}

/** A small real JPEG whose frame header (SOF) is patched to width × height. */
async function jpegBomb(width: number, height: number): Promise<Buffer> {
  const jpeg = await sharp({
    create: { width: 16, height: 16, channels: 3, background: '#808080' },
  })
    .jpeg()
    .toBuffer();
  for (let at = 2; at < jpeg.length - 9;) {
    const marker = jpeg[at + 1]!;
    if (marker >= 0xc0 && marker <= 0xc2) {
      jpeg.writeUInt16BE(height, at + 5);
      jpeg.writeUInt16BE(width, at + 7);
      return jpeg;
    }
    at += 2 + jpeg.readUInt16BE(at + 2);
  }
  throw new Error('no SOF marker');
}

/** The HEIC fixture with every `ispe` (image spatial extent) box claiming width × height. */
function heicBomb(width: number, height: number): Buffer {
  const heic = Buffer.from(fixture('heic-samplefilehub.heif'));
  let patched = 0;
  for (let at = heic.indexOf('ispe'); at !== -1; at = heic.indexOf('ispe', at + 4)) {
    heic.writeUInt32BE(width, at + 8);
    heic.writeUInt32BE(height, at + 12);
    patched++;
  }
  expect(patched).toBeGreaterThan(0);
  return heic;
}

describe('image bombs: metadata answers from the header, convert refuses (422), both quickly', () => {
  it.each([
    ['PNG 50,000 × 50,000', () => Promise.resolve(pngBomb(50_000, 50_000)), 'png'],
    ['JPEG 65,500 × 65,500', () => jpegBomb(65_500, 65_500), 'jpeg'],
    ['HEIC 50,000 × 50,000', () => Promise.resolve(heicBomb(50_000, 50_000)), 'heif'],
  ])('%s', async (what, make, format) => {
    const bytes = await make();
    expect(bytes.length).toBeLessThan(400 * 1024);
    const key = await org.upload(bytes, `bomb.${format}`);

    const meta = await measured(`${what}: metadata`, bytes.length, () =>
      job('GET', '/media/metadata', { mediaKey: key }),
    );
    expect(meta.status).toBe(200);
    expect(meta.body.data).toMatchObject({ format, width: expect.any(Number) as number });
    expect((meta.body.data!.width as number) * (meta.body.data!.height as number)).toBeGreaterThan(
      2_000_000_000,
    );

    const convert = await measured(`${what}: convert`, bytes.length, () =>
      job('POST', '/media/convert', { mediaKey: key, format: 'webp' }),
    );
    expect([convert.status, convert.body.error]).toEqual([422, 'UNREADABLE_MEDIA']);
    expect(convert.body.message).toMatch(/too many pixels/);
  });
});

// ---------------------------------------------------------------------------
// PDF bombs

/** A PDF made of these object bodies (numbered from 1), with a correct xref table. */
function pdf(objects: (string | Buffer)[]): Buffer {
  const parts: Buffer[] = [Buffer.from('%PDF-1.7\n%\xe2\xe3\xcf\xd3\n', 'latin1')];
  let offset = parts[0]!.length;
  const offsets: number[] = [];
  objects.forEach((body, i) => {
    offsets.push(offset);
    const obj = Buffer.concat([
      Buffer.from(`${i + 1} 0 obj\n`),
      Buffer.isBuffer(body) ? body : Buffer.from(body, 'latin1'),
      Buffer.from('\nendobj\n'),
    ]);
    parts.push(obj);
    offset += obj.length;
  });
  const xref =
    `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n` +
    offsets.map((o) => `${String(o).padStart(10, '0')} 00000 n \n`).join('');
  parts.push(
    Buffer.from(
      `${xref}trailer\n<< /Size ${objects.length + 1} /Root 1 0 R >>\nstartxref\n${offset}\n%%EOF\n`,
    ),
  );
  return Buffer.concat(parts);
}

const CATALOG = '<< /Type /Catalog /Pages 2 0 R >>';
const page = (parent: number) => `<< /Type /Page /Parent ${parent} 0 R /MediaBox [0 0 200 200] >>`;

/** Catalog → /Pages → /Pages → … `depth` levels → one page. */
function deepPageTree(depth: number): Buffer {
  const objects = [CATALOG];
  for (let level = 0; level < depth; level++) {
    const n = 2 + level;
    const parent = level === 0 ? '' : `/Parent ${n - 1} 0 R`;
    objects.push(`<< /Type /Pages ${parent} /Kids [${n + 1} 0 R] /Count 1 >>`);
  }
  objects.push(page(1 + depth));
  return pdf(objects);
}

/** One /Pages whose /Kids names the same page `refs` times, claiming `count` pages. */
function pageReferences(refs: number, count: number): Buffer {
  return pdf([
    CATALOG,
    `<< /Type /Pages /Kids [${'3 0 R '.repeat(refs)}] /Count ${count} >>`,
    page(2),
  ]);
}

/** Every level names the next twice: 2^levels pages from `levels` objects. */
function exponentialTree(levels: number): Buffer {
  const objects = [CATALOG];
  for (let level = 0; level < levels; level++) {
    const n = 2 + level;
    const parent = level === 0 ? '' : `/Parent ${n - 1} 0 R`;
    objects.push(
      `<< /Type /Pages ${parent} /Kids [${n + 1} 0 R ${n + 1} 0 R] /Count ${2 ** (levels - level)} >>`,
    );
  }
  objects.push(page(1 + levels));
  return pdf(objects);
}

/** A page whose /Resources holds arrays nested `depth` deep. */
function nestedArrays(depth: number): Buffer {
  return pdf([
    CATALOG,
    '<< /Type /Pages /Kids [3 0 R] /Count 1 >>',
    `<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Resources << /X ${'['.repeat(depth)}${']'.repeat(depth)} >> >>`,
  ]);
}

/** zlib of `size` spaces, streamed (no buffer of that size is ever made). */
function deflatedSpaces(size: number, head: Buffer, tail: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const deflate = createDeflate({ level: 9 });
    const out: Buffer[] = [];
    deflate.on('data', (c: Buffer) => out.push(c));
    deflate.on('end', () => resolve(Buffer.concat(out)));
    deflate.on('error', reject);
    const chunk = Buffer.alloc(MB, 0x20);
    let left = size - head.length - tail.length;
    deflate.write(head);
    const write = () => {
      while (left > 0) {
        const n = Math.min(left, chunk.length);
        left -= n;
        if (!deflate.write(chunk.subarray(0, n))) return void deflate.once('drain', write);
      }
      deflate.end(tail);
    };
    write();
  });
}

/** A one-page PDF plus an object stream (/Type /ObjStm) that inflates to `inflated` bytes. */
async function objectStreamBomb(inflated: number, doubleFlate: boolean): Promise<Buffer> {
  const header = Buffer.from('4 0 '); // object 4 at offset 0
  let data = await deflatedSpaces(inflated, header, Buffer.from('42'));
  let filter = '/FlateDecode';
  if (doubleFlate) {
    data = deflateSync(data, { level: 9 });
    filter = '[/FlateDecode /FlateDecode]';
  }
  const stream = Buffer.concat([
    Buffer.from(
      `<< /Type /ObjStm /N 1 /First ${header.length} /Filter ${filter} /Length ${data.length} >>\nstream\n`,
    ),
    data,
    Buffer.from('\nendstream'),
  ]);
  return pdf([CATALOG, '<< /Type /Pages /Kids [3 0 R] /Count 1 >>', page(2), stream]);
}

/** A one-page PDF whose cross-reference stream claims `size` entries and holds one. */
function xrefStreamBomb(size: number): Buffer {
  const objects = [CATALOG, '<< /Type /Pages /Kids [3 0 R] /Count 1 >>', page(2)];
  const parts: Buffer[] = [Buffer.from('%PDF-1.7\n')];
  let offset = parts[0]!.length;
  objects.forEach((body, i) => {
    const obj = Buffer.from(`${i + 1} 0 obj\n${body}\nendobj\n`);
    parts.push(obj);
    offset += obj.length;
  });
  const entry = Buffer.from([1, 0, 0]);
  parts.push(
    Buffer.from(
      `4 0 obj\n<< /Type /XRef /Size ${size} /W [1 1 1] /Root 1 0 R /Length ${entry.length} >>\nstream\n`,
    ),
    entry,
    Buffer.from(`\nendstream\nendobj\nstartxref\n${offset}\n%%EOF\n`),
  );
  return Buffer.concat(parts);
}

describe('PDF bombs through /media/merge-pdfs', () => {
  const cases: [string, () => Promise<Buffer> | Buffer, number, string | undefined, RegExp][] = [
    [
      'page tree 10,000 levels deep',
      () => deepPageTree(10_000),
      422,
      'UNREADABLE_MEDIA',
      /page tree/,
    ],
    [
      '100,000 references to one page',
      () => pageReferences(100_000, 100_000),
      413,
      'PAYLOAD_TOO_LARGE',
      /10,000 pages/,
    ],
    ['2^40 pages from 40 objects', () => exponentialTree(40), 413, 'PAYLOAD_TOO_LARGE', /pages/],
    ['arrays nested 100,000 deep', () => nestedArrays(100_000), 422, 'UNREADABLE_MEDIA', /damaged/],
    [
      'object stream inflating to 256 MB',
      () => objectStreamBomb(256 * MB, false),
      422,
      'UNREADABLE_MEDIA',
      /decompression bomb/,
    ],
    [
      'object stream inflating to 1 GB through two Flate filters',
      () => objectStreamBomb(1024 * MB, true),
      422,
      'UNREADABLE_MEDIA',
      /decompression bomb/,
    ],
    [
      'cross-reference stream claiming 2,000,000,000 entries',
      () => xrefStreamBomb(2_000_000_000),
      422,
      'UNREADABLE_MEDIA',
      /decompression bomb.*2,000,000,000 entries/,
    ],
    [
      '/Count 2,000,000,000 over one real page',
      () => pageReferences(1, 2_000_000_000),
      201,
      undefined,
      /Success/,
    ],
  ];

  it.each(cases)('%s', async (what, make, status, code, message) => {
    const bytes = await make();
    expect(bytes.length).toBeLessThan(2 * MB);
    const name = `${what.replace(/[^a-z0-9]+/gi, '-')}.pdf`;
    const result = await measured(what, bytes.length, () =>
      merge([
        [fixture('minimal-document.pdf'), 'fine.pdf'],
        [bytes, name],
      ]),
    );
    expect({ status: result.status, code: result.body.error }).toEqual({ status, code });
    expect(result.body.message).toMatch(message);
    if (status === 422) {
      // The bomb is named: its index in the form and its name.
      expect(result.body.details).toEqual([expect.objectContaining({ index: 1, name })]);
    }
    if (status === 201) {
      const out = await fetch(
        `${api.url}/media/download?media=${encodeURIComponent(result.body.data!.key!)}`,
        { headers: org.auth },
      );
      expect(out.status).toBe(200);
      const { PDFDocument } = await import('pdf-lib');
      expect((await PDFDocument.load(await out.arrayBuffer())).getPageCount()).toBe(2);
    }
    // The job's temporary inputs are gone, whatever the outcome.
    await api.expectNoObjects('bombs/.tmp/');
  });

  it('the worker carries on: a normal merge and conversion afterwards', async () => {
    expect(worker.child.exitCode).toBeNull();
    const ok = await merge([
      [fixture('minimal-document.pdf'), 'a.pdf'],
      [fixture('pdflatex-4-pages.pdf'), 'b.pdf'],
    ]);
    expect(ok.status).toBe(201);
    const key = await org.upload('xmp-BlueSquare.jpg', 'after.jpg');
    expect((await job('POST', '/media/convert', { mediaKey: key, format: 'png' })).status).toBe(
      201,
    );
    // No record came out of a refused job: only uploads, the warm-up results and these two.
    const results = await api.ctx.models.Media.find({
      organizationId: org.organization.id,
      jobId: { $exists: true, $ne: null },
    }).lean();
    expect(results.map((r) => r.mimetype).sort()).toEqual([
      'application/pdf', // warm-up merge
      'application/pdf', // /Count bomb, processed
      'application/pdf', // this merge
      'image/png', // warm-up convert
      'image/png', // this convert
    ]);
  });
});
