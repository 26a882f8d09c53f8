/**
 * A PDF bomb behind damage, through a real worker process:
 * pdf-lib's strict load stops at the damage before the object stream that
 * inflates to 512 MB, and qpdf's repair used to inflate it unbounded (1 GB of
 * RSS, 15 s). Now a lenient load within the decode budget refuses it before
 * qpdf runs (and qpdf itself runs under prlimit): 422 in the documented
 * envelope, nothing kept, the worker alive and serving the next tenant.
 */
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { bombBehindDamage } from '../../support/pdf-bombs';
import { startWorkerProcess, type ServiceProcess } from '../../support/processes';

type Body = { statusCode: number; error?: string; message?: string; data?: { key?: string } };

let api: TestApi;
let worker: ServiceProcess;
let org: TestOrg;
let other: TestOrg;

beforeAll(async () => {
  api = await startApi('qpdf-bomb', { env: { RATE_LIMIT_MAX: '0' } });
  org = await api.createOrg('qpdf-bomb');
  other = await api.createOrg('qpdf-bomb-other');
  worker = await startWorkerProcess({ ...api.env.env, WORKER_CONCURRENCY: '1' });
}, 90_000);

afterAll(async () => {
  await worker?.kill('SIGTERM');
  await api?.close();
}, 30_000);

async function merge(who: TestOrg, files: [Buffer, string][]) {
  const fd = new FormData();
  for (const [bytes, name] of files) fd.append('files', new Blob([bytes]), name);
  const res = await fetch(`${api.url}/media/merge-pdfs`, {
    method: 'POST',
    headers: who.auth,
    body: fd,
  });
  const body = (await res.json()) as Body;
  expectMatchesSpec('POST', '/media/merge-pdfs', res.status, body, res.headers);
  return { status: res.status, body };
}

it('refuses a bomb qpdf would inflate, before qpdf runs; the worker stays up for others', async () => {
  const { status, body } = await merge(org, [[bombBehindDamage(512 * 1024 * 1024), 'bomb.pdf']]);
  expect(status).toBe(422);
  expect(body.error).toBe('UNREADABLE_MEDIA');
  expect(body.message).toMatch(/decompression bomb/);
  expect(worker.child.exitCode).toBeNull();
  // Nothing kept: no record, no temporary input, no open upload.
  expect(await api.ctx.models.Media.countDocuments({})).toBe(0);
  // (the temporary input is removed by the job's failure handler, just after the answer)
  await eventually(async () => expect(await api.objectKeys()).toEqual([]));
  expect(await api.ctx.store.listIncompleteUploads('')).toEqual([]);
  // The same worker serves another tenant's merge.
  const ok = await merge(other, [[fixture('minimal-document.pdf'), 'a.pdf']]);
  expect(ok.status).toBe(201);
}, 120_000);
