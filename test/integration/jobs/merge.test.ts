/**
 * POST /media/merge-pdfs through the queue: inputs as uploaded parts and/or
 * stored keys, merged in form order (checked with pages of different sizes);
 * encrypted, damaged-but-recoverable and truncated inputs; temporary inputs
 * removed afterwards.
 */
import { PDFDocument } from 'pdf-lib';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { dependencyCalls } from '../../support/metrics';
import { corpusFile, fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Media = { id: number; key: string; name: string; mimetype: string; folderId: number | null };
type Body<T> = {
  statusCode: number;
  data: T;
  error?: string;
  details?: { index?: number; name?: string }[];
};

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('merge');
  worker = await startWorker(api.env.env);
  org = await api.createOrg('merger');
});
afterAll(async () => {
  await worker.close();
  await api.close();
});

/** A PDF whose pages have the given sizes (so order can be read back). */
async function pdfWithPages(...sizes: [number, number][]): Promise<Buffer> {
  const doc = await PDFDocument.create();
  for (const size of sizes) doc.addPage(size);
  return Buffer.from(await doc.save());
}

async function pageSizes(bytes: Buffer): Promise<[number, number][]> {
  const doc = await PDFDocument.load(bytes);
  return doc.getPages().map((p) => [Math.round(p.getWidth()), Math.round(p.getHeight())]);
}

type Part = { file: Buffer; name: string } | { key: string } | { field: string; value: string };

async function merge(parts: Part[]) {
  const fd = new FormData();
  for (const p of parts) {
    if ('file' in p) fd.append('files', new Blob([p.file]), p.name);
    else if ('key' in p) fd.append('mediaKeys', p.key);
    else fd.append(p.field, p.value);
  }
  const res = await fetch(`${api.url}/media/merge-pdfs`, {
    method: 'POST',
    headers: org.auth,
    body: fd,
  });
  const body = (await res.json()) as Body<Media>;
  expectMatchesSpec('POST', '/media/merge-pdfs', res.status, body, res.headers);
  return { status: res.status, body };
}

/** The API's storage writes so far, from its /metrics. */
const storagePuts = () => dependencyCalls(api.url, 'storage', 'put');

async function download(key: string): Promise<Buffer> {
  const res = await fetch(`${api.url}/media/download?media=${encodeURIComponent(key)}`, {
    headers: org.auth,
  });
  return Buffer.from(await res.arrayBuffer());
}

describe('POST /media/merge-pdfs', () => {
  it('merges uploaded parts and stored keys in form order, an input twice if given twice', async () => {
    const a = await pdfWithPages([100, 100], [110, 110]);
    const b = await pdfWithPages([200, 300]);
    const c = await org.uploadRecord(
      await pdfWithPages([400, 500], [410, 510], [420, 520]),
      'c.pdf',
    );
    const puts = await storagePuts();
    const { status, body } = await merge([
      { file: a, name: 'a.pdf' },
      { key: c.key },
      { file: b, name: 'b.pdf' },
      { key: c.key },
      { field: 'folder', value: 'Merged' },
    ]);
    expect(status).toBe(201);
    // The interface's form: key at the bucket's root, name the object's address.
    expect(body.data.key).toMatch(/^merged_\d{13}\.pdf$/);
    expect(body.data.name).toBe(api.ctx.store.address(body.data.key));
    expect(body.data.mimetype).toBe('application/pdf');
    // The folder is kept on the record.
    const folder = await api.ctx.models.Folder.findOne({
      organizationId: org.organization.id,
      name: 'Merged',
    }).lean();
    expect(body.data.folderId).toBe(folder!.id);
    const merged = await download(body.data.key);
    expect(await pageSizes(merged)).toEqual([
      [100, 100],
      [110, 110],
      [400, 500],
      [410, 510],
      [420, 520],
      [200, 300],
      [400, 500],
      [410, 510],
      [420, 520],
    ]);
    // The two uploaded parts went to storage as one temporary object (one PUT by the API),
    // removed once the merge is recorded: nothing of them is left.
    expect(await storagePuts()).toBe(puts + 1);
    await eventually(async () => expect(await api.objectKeys('merger/.tmp/')).toEqual([]));
  });

  it('merges every readable corpus PDF, repairing the damaged one', async () => {
    const files = [
      ['minimal-document.pdf', 1],
      ['002-trivial-libre-office-writer.pdf', 1],
      ['pdflatex-4-pages.pdf', 4],
      ['habibi-rotated.pdf', 4],
      // 4 pages once; 1.1 MB of it is zeros, taking the page tree and one page with
      // it: qpdf keeps the 3 surviving pages and the adapter rebuilds their tree.
      ['unreadablemetadata.pdf', 3],
      ['with-attachment.pdf', 1],
    ] as const;
    const { status, body } = await merge(
      files.map(([name]) => ({ file: corpusFile(`pdfs/${name}`), name })),
    );
    expect(status).toBe(201);
    const doc = await PDFDocument.load(await download(body.data.key));
    expect(doc.getPageCount()).toBe(files.reduce((n, [, pages]) => n + pages, 0));
  });

  it('names the encrypted input (422) and keeps nothing', async () => {
    const { status, body } = await merge([
      { file: fixture('minimal-document.pdf'), name: 'fine.pdf' },
      { file: corpusFile('pdfs/libreoffice-writer-password.pdf'), name: 'secret.pdf' },
    ]);
    expect(status).toBe(422);
    expect(body.error).toBe('ENCRYPTED_PDF');
    expect(body.details).toEqual([expect.objectContaining({ index: 1, name: 'secret.pdf' })]);
    await api.expectNoObjects('merger/.tmp/');
  });

  it('names an unrecoverable input (422)', async () => {
    const { status, body } = await merge([
      { file: corpusFile('pdfs/truncated-pdflatex-4-pages.pdf'), name: 'cut.pdf' },
      { file: fixture('minimal-document.pdf'), name: 'fine.pdf' },
    ]);
    expect(status).toBe(422);
    expect(body.error).toBe('UNREADABLE_MEDIA');
    expect(body.details).toEqual([expect.objectContaining({ index: 0, name: 'cut.pdf' })]);
  });

  it('refuses inputs that are not PDFs (415), unknown keys (404), no inputs (400)', async () => {
    const image = await org.uploadRecord('Canon_40D.jpg', 'photo.jpg');
    const notPdf = await merge([{ file: fixture('Canon_40D.jpg'), name: 'photo.jpg' }]);
    expect([notPdf.status, notPdf.body.error]).toEqual([415, 'UNSUPPORTED_MEDIA_TYPE']);
    const storedImage = await merge([
      { file: fixture('minimal-document.pdf'), name: 'a.pdf' },
      { key: image.key },
    ]);
    expect([storedImage.status, storedImage.body.details?.[0]?.index]).toEqual([415, 1]);
    const unknown = await merge([{ key: 'merger/none.pdf' }]);
    expect([unknown.status, unknown.body.error]).toEqual([404, 'MEDIA_NOT_FOUND']);
    const none = await merge([{ field: 'folder', value: 'x' }]);
    expect(none.status).toBe(400);
    await api.expectNoObjects('merger/.tmp/');
  });

  it('accepts mediaKeys as one JSON array', async () => {
    const one = await org.uploadRecord(await pdfWithPages([300, 300]), 'one.pdf');
    const two = await org.uploadRecord(await pdfWithPages([600, 600]), 'two.pdf');
    const { status, body } = await merge([
      { field: 'mediaKeys', value: JSON.stringify([two.key, one.key]) },
    ]);
    expect(status).toBe(201);
    expect(await pageSizes(await download(body.data.key))).toEqual([
      [600, 600],
      [300, 300],
    ]);
  });
});
