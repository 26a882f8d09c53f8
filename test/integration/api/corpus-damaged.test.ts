/**
 * The corpus files that are damaged or encrypted (see the corpus README), on
 * the paths the other suites leave out: uploaded through multipart and base64
 * (stored byte for byte: upload only sniffs the type), sent to metadata and
 * convert (PDFs: metadata read or 422, convert 415), converted to the formats convert.test.ts does not try
 * (corrupted.jpg: 422), and merged by stored key (encrypted: 422
 * ENCRYPTED_PDF, truncated: 422 UNREADABLE_MEDIA, damaged xref: repaired;
 * merge.test.ts sends them as uploaded parts). Refused jobs leave no record.
 */
import { PDFDocument } from 'pdf-lib';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { corpusFile, fixture, form, sha256 } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Media = {
  id: number;
  key: string;
  name: string;
  mimetype: string;
  bytes: number;
  checksum: string;
};
type Body<T> = {
  statusCode: number;
  message: string;
  data: T;
  error?: string;
  details?: { index?: number; name?: string; message: string }[];
};

const DAMAGED = {
  'images/corrupted.jpg': 'image/jpeg',
  'pdfs/libreoffice-writer-password.pdf': 'application/pdf',
  'pdfs/unreadablemetadata.pdf': 'application/pdf',
  'pdfs/truncated-pdflatex-4-pages.pdf': 'application/pdf',
} as const;
type DamagedFile = keyof typeof DAMAGED;
const files = Object.keys(DAMAGED) as DamagedFile[];
const baseName = (path: string) => path.split('/').pop()!;

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;
/** The stored record of each damaged file (multipart upload). */
const stored = new Map<DamagedFile, Media>();

beforeAll(async () => {
  // corrupted.jpg is 3648 × 2736 (10 MP), past the default GIF bound (4 MP), which would
  // refuse it (422 OUTPUT_TOO_LARGE) before any decode: raised here, so that every format
  // meets its truncated pixels.
  api = await startApi('corpusdamaged', { env: { MAX_GIF_OUTPUT_PIXELS: String(12_000_000) } });
  worker = await startWorker(api.env.env);
  org = await api.createOrg('damaged');
}, 60_000);
afterAll(async () => {
  await worker?.close();
  await api?.close();
});

async function call<T>(method: string, path: string, body?: FormData | object) {
  const isForm = body instanceof FormData;
  const res = await fetch(`${api.url}${path}`, {
    method,
    headers: isForm || !body ? org.auth : { ...org.auth, 'Content-Type': 'application/json' },
    ...(body ? { body: isForm ? body : JSON.stringify(body) } : {}),
  });
  const json = (await res.json()) as Body<T>;
  expectMatchesSpec(method, path.split('?')[0]!, res.status, json, res.headers);
  return { status: res.status, body: json };
}

async function downloaded(key: string): Promise<Buffer> {
  const res = await fetch(`${api.url}/media/download?media=${encodeURIComponent(key)}`, {
    headers: org.auth,
  });
  expect(res.status).toBe(200);
  return Buffer.from(await res.arrayBuffer());
}

async function jobRecords(): Promise<number> {
  return api.ctx.models.Media.countDocuments({
    organizationId: org.organization.id,
    jobId: { $exists: true, $ne: null },
  });
}

describe('upload stores damaged and encrypted files as they are', () => {
  it.each(files)('%s through multipart and base64: 201, byte for byte', async (file) => {
    const bytes = corpusFile(file);
    const viaForm = await call<Media>(
      'POST',
      '/media/upload',
      form([['file', bytes, baseName(file)]]),
    );
    const viaBase64 = await call<Media>('POST', '/media/upload/base64', {
      file: `data:${DAMAGED[file]};base64,${bytes.toString('base64')}`,
      name: baseName(file),
    });
    for (const { status, body } of [viaForm, viaBase64]) {
      expect(status).toBe(201);
      expect(body.data).toMatchObject({
        name: baseName(file),
        mimetype: DAMAGED[file],
        bytes: bytes.length,
        checksum: sha256(bytes),
      });
      expect((await downloaded(body.data.key)).equals(bytes)).toBe(true);
    }
    stored.set(file, viaForm.body.data);
  });
});

/** What metadata answers of each damaged PDF (PDFium reads it in the job). */
const PDF_METADATA: Record<string, number> = {
  'pdfs/libreoffice-writer-password.pdf': 422, // ENCRYPTED_PDF: it needs a password
  // PDFium does not rebuild its cross-reference table; qpdf repairs it first (the corpus README).
  'pdfs/unreadablemetadata.pdf': 200,
  'pdfs/truncated-pdflatex-4-pages.pdf': 422,
};

describe('metadata reads PDFs, convert takes images only', () => {
  it.each(files.filter((f) => DAMAGED[f] === 'application/pdf'))(
    '%s: metadata answered or refused (never a 5xx), 415 for convert before any job',
    async (file) => {
      const { key } = stored.get(file)!;
      const meta = await call('GET', `/media/metadata?mediaKey=${encodeURIComponent(key)}`);
      expect(meta.status).toBe(PDF_METADATA[file]);
      if (meta.status === 200) {
        // Three of its four pages survive the damage (the merge recovers the same three).
        expect(meta.body.data).toMatchObject({ format: 'pdf', pages: 3 });
      } else {
        const code = file.includes('password') ? 'ENCRYPTED_PDF' : 'UNREADABLE_MEDIA';
        expect(meta.body.error).toBe(code);
      }
      const convert = await call('POST', '/media/convert', { mediaKey: key, format: 'png' });
      expect([convert.status, convert.body.error]).toEqual([415, 'UNSUPPORTED_MEDIA_TYPE']);
    },
  );

  it.each(['jpeg', 'webp', 'avif', 'tiff', 'gif'])(
    'corrupted.jpg (truncated pixels) to %s: 422 UNREADABLE_MEDIA, no record',
    async (format) => {
      const before = await jobRecords();
      const { key } = stored.get('images/corrupted.jpg')!;
      const r = await call('POST', '/media/convert', { mediaKey: key, format });
      expect([r.status, r.body.error]).toEqual([422, 'UNREADABLE_MEDIA']);
      expect(r.body.message).toMatch(/corrupt or truncated/);
      expect(await jobRecords()).toBe(before);
    },
    30_000,
  );
});

describe('merge by stored key', () => {
  const mergeKeys = (keys: string[]) =>
    call<Media>('POST', '/media/merge-pdfs', form(keys.map((k) => ['mediaKeys', k] as const)));

  it('refuses the encrypted PDF with 422 ENCRYPTED_PDF, naming it by its record name', async () => {
    const fine = await call<Media>(
      'POST',
      '/media/upload',
      form([['file', fixture('minimal-document.pdf'), 'fine.pdf']]),
    );
    const before = await jobRecords();
    const r = await mergeKeys([
      fine.body.data.key,
      stored.get('pdfs/libreoffice-writer-password.pdf')!.key,
    ]);
    expect([r.status, r.body.error]).toEqual([422, 'ENCRYPTED_PDF']);
    expect(r.body.details).toEqual([
      expect.objectContaining({ index: 1, name: 'libreoffice-writer-password.pdf' }),
    ]);
    expect(await jobRecords()).toBe(before);
  });

  it('reports the first unreadable input when several are: the truncated one before the encrypted one', async () => {
    const r = await mergeKeys([
      stored.get('pdfs/truncated-pdflatex-4-pages.pdf')!.key,
      stored.get('pdfs/libreoffice-writer-password.pdf')!.key,
    ]);
    expect([r.status, r.body.error]).toEqual([422, 'UNREADABLE_MEDIA']);
    expect(r.body.details).toEqual([
      expect.objectContaining({ index: 0, name: 'truncated-pdflatex-4-pages.pdf' }),
    ]);
  });

  it('repairs unreadablemetadata.pdf (damaged cross-reference table) and merges its 3 surviving pages', async () => {
    const r = await mergeKeys([
      stored.get('pdfs/unreadablemetadata.pdf')!.key,
      stored.get('pdfs/unreadablemetadata.pdf')!.key,
    ]);
    expect(r.status).toBe(201);
    const merged = await PDFDocument.load(await downloaded(r.body.data.key));
    expect(merged.getPageCount()).toBe(6);
  });

  it('refuses the corrupted JPEG as a merge input (415), naming it', async () => {
    const r = await mergeKeys([stored.get('images/corrupted.jpg')!.key]);
    expect([r.status, r.body.error]).toEqual([415, 'UNSUPPORTED_MEDIA_TYPE']);
    expect(r.body.details).toEqual([expect.objectContaining({ index: 0 })]);
    await api.expectNoObjects('damaged/.tmp/');
  });
});
