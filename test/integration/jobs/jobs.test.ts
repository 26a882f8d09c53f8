/**
 * The queue between API and worker: synchronous answers, respond-async, the
 * 504 with a job id and the status URL that answers later, tenant isolation of
 * job ids, queue selection per worker, and idempotent results.
 */
import { JOB_NAMES } from '../../../shared/jobs';
import { convertProcessor } from '../../../worker/processors/convert.processor';
import { startApi, type TestApi, type TestOrg, type UploadedMedia } from '../../support/api';
import { eventually } from '../../support/eventually';
import { corpusFile, fixture, form } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Media = { id: number; key: string; name: string; mimetype: string; folderId: number | null };
type Body<T> = { statusCode: number; message: string; data: T; error?: string; jobId?: string };

let api: TestApi;
let org: TestOrg;
let other: TestOrg;
let source: UploadedMedia;

beforeAll(async () => {
  api = await startApi('jobs', { env: { JOB_WAIT_MS: '20000' } });
  org = await api.createOrg('jobs');
  other = await api.createOrg('others');
  source = await org.uploadRecord('Canon_40D.jpg', 'Canon 40D.jpg', { folder: 'shots' });
});
afterAll(() => api.close());

async function call<T>(
  method: string,
  path: string,
  init: { headers?: Record<string, string>; body?: string | FormData; org?: TestOrg } = {},
) {
  const res = await fetch(`${api.url}${path}`, {
    method,
    headers: { ...(init.org ?? org).auth, ...(init.headers ?? {}) },
    body: init.body,
  });
  const body = (await res.json()) as Body<T>;
  return { res, body };
}

const convertBody = (format: string, key = source.key) => JSON.stringify({ mediaKey: key, format });
const json = { 'Content-Type': 'application/json' };

describe('with no worker running', () => {
  it('answers 504 with the job id past JOB_WAIT_MS; the status URL answers once a worker has done it', async () => {
    const slow = await startApi('jobs504', { env: { JOB_WAIT_MS: '300' } });
    try {
      const o = await slow.createOrg('late');
      const key = await o.upload('Canon_40D.jpg', 'a.jpg');
      const res = await fetch(`${slow.url}/media/convert`, {
        method: 'POST',
        headers: { ...o.auth, ...json },
        body: JSON.stringify({ mediaKey: key, format: 'png' }),
      });
      const body = (await res.json()) as Body<unknown>;
      expect(res.status).toBe(504);
      expect(body.error).toBe('JOB_TIMEOUT');
      expect(body.jobId).toMatch(/^image-/);
      expectMatchesSpec('POST', '/media/convert', 504, body, res.headers);
      const statusUrl = res.headers.get('location')!;
      expect(statusUrl).toBe(`${slow.env.config.publicBaseUrl}/media/jobs/${body.jobId!}`);

      const pending = await fetch(`${slow.url}/media/jobs/${body.jobId!}`, { headers: o.auth });
      expect(pending.status).toBe(202);
      expect(((await pending.json()) as Body<{ state: string }>).data.state).toBe('waiting');

      const worker = await startWorker(slow.env.env);
      try {
        const done = await eventually(async () => {
          const r = await fetch(`${slow.url}/media/jobs/${body.jobId!}`, { headers: o.auth });
          expect(r.status).toBe(200);
          return r;
        });
        const result = (await done.json()) as Body<Media>;
        expect(result).toMatchObject({
          statusCode: 200,
          message: 'Success',
          data: { mimetype: 'image/png', name: 'a.jpg' },
        });
        expectMatchesSpec('GET', '/media/jobs/{id}', 200, result, done.headers);
      } finally {
        await worker.close();
      }
    } finally {
      await slow.close();
    }
  });
});

describe('with a worker', () => {
  let worker: TestWorker;
  beforeAll(async () => {
    worker = await startWorker(api.env.env);
  });
  afterAll(() => worker.close());

  it('answers convert synchronously with the new record (201)', async () => {
    const { res, body } = await call<Media>('POST', '/media/convert', {
      headers: json,
      body: convertBody('webp'),
    });
    expect(res.status).toBe(201);
    expectMatchesSpec('POST', '/media/convert', 201, body, res.headers);
    expect(body.data).toMatchObject({
      name: 'Canon 40D.jpg',
      mimetype: 'image/webp',
      folderId: (await api.ctx.models.Media.findOne({ key: source.key }).lean())?.folderId,
    });
    expect(body.data.key).toMatch(/^jobs\/shots\/Canon-40D-[A-Za-z0-9_-]{12}\.webp$/);
    const download = await fetch(
      `${api.url}/media/download?media=${encodeURIComponent(body.data.key)}`,
      { headers: org.auth },
    );
    expect(download.headers.get('content-type')).toBe('image/webp');
  });

  it('answers 202 at once with Prefer: respond-async, and the same envelope at the status URL later', async () => {
    const { res, body } = await call<{ jobId: string; state: string; statusUrl: string }>(
      'POST',
      '/media/convert',
      {
        headers: { ...json, Prefer: 'respond-async' },
        body: convertBody('png'),
      },
    );
    expect(res.status).toBe(202);
    expectMatchesSpec('POST', '/media/convert', 202, body, res.headers);
    expect(res.headers.get('location')).toBe(body.data.statusUrl);
    const result = await eventually(async () => {
      const r = await call<Media>('GET', `/media/jobs/${body.data.jobId}`);
      expect(r.res.status).toBe(200);
      return r.body;
    });
    expect(result.data).toMatchObject({ mimetype: 'image/png', name: 'Canon 40D.jpg' });
  });

  it("refuses another organization's job id with 404", async () => {
    const { body } = await call<{ jobId: string }>('POST', '/media/convert', {
      headers: { ...json, Prefer: 'respond-async' },
      body: convertBody('gif'),
    });
    const theirs = await call('GET', `/media/jobs/${body.data.jobId}`, { org: other });
    expect(theirs.res.status).toBe(404);
    expect(theirs.body.error).toBe('JOB_NOT_FOUND');
    const unknown = await call('GET', '/media/jobs/image-00000000-0000-0000-0000-000000000000');
    expect(unknown.res.status).toBe(404);
    const garbage = await call('GET', '/media/jobs/nonsense');
    expect(garbage.res.status).toBe(404);
  });

  it('maps refusals from the worker to their 4xx, with the job id', async () => {
    const key = await org.upload(corpusFile('images/corrupted.jpg'), 'broken.jpg');
    const { res, body } = await call('POST', '/media/convert', {
      headers: json,
      body: convertBody('png', key),
    });
    expect(res.status).toBe(422);
    expect(body.error).toBe('UNREADABLE_MEDIA');
    expect(body.jobId).toMatch(/^image-/);
  });

  it('writes a retried job once: one record, one object', async () => {
    const jobId = 'image-retry-test';
    const job = {
      id: jobId,
      name: 'image.convert' as const,
      data: {
        organizationId: org.organization.id,
        requestId: 'r',
        origin: { ipAddress: '::ffff:127.0.0.1', userAgent: 'jobs-test' },
        tokenId: org.tokenId,
        key: source.key,
        format: 'png' as const,
      },
      timestamp: Date.now(),
      attemptsMade: 0,
      log: worker.ctx.logger,
      progress: () => Promise.resolve(),
      signal: new AbortController().signal,
      remainingMs: () => 60_000,
    };
    const first = await convertProcessor.process(job, worker.ctx);
    const second = await convertProcessor.process({ ...job, attemptsMade: 1 }, worker.ctx);
    expect(second).toEqual(first);
    const records = await api.ctx.models.Media.find({ jobId }).lean();
    expect(records).toHaveLength(1);
    const keys = await api.objectKeys('jobs/shots/');
    expect(keys.filter((k) => k === records[0]!.key)).toHaveLength(1);
    // Even if the record write is lost and the job runs again, the object key is the same.
    await api.ctx.models.Media.deleteOne({ jobId });
    const third = await convertProcessor.process({ ...job, attemptsMade: 2 }, worker.ctx);
    const again = await api.ctx.models.Media.find({ jobId }).lean();
    expect(again).toHaveLength(1);
    expect(again[0]!.key).toBe(records[0]!.key);
    expect(third.mediaId).not.toBe(first.mediaId);
  });
});

describe('queue selection', () => {
  it('a worker taking only the pdf queue never takes image jobs', async () => {
    const pdfOnly = await startWorker(api.env.env, { WORKER_QUEUES: 'pdf' });
    try {
      expect(pdfOnly.worker.workers.map((w) => w.name)).toEqual(['pdf']);
      const { res, body } = await call<{ jobId: string }>('POST', '/media/convert', {
        headers: { ...json, Prefer: 'respond-async' },
        body: convertBody('png'),
      });
      expect(res.status).toBe(202);
      // A pdf job queued after the image job: once the worker has done it, it
      // was taking jobs all along, and the image job is still waiting.
      const merged = await call<Media>('POST', '/media/merge-pdfs', {
        body: form([
          ['files', fixture('minimal-document.pdf'), 'one.pdf'],
          ['files', fixture('pdflatex-4-pages.pdf'), 'four.pdf'],
        ]),
      });
      expect(merged.res.status).toBe(201);
      expect(merged.body.data.mimetype).toBe('application/pdf');
      const status = await call<{ state: string }>('GET', `/media/jobs/${body.data.jobId}`);
      expect(status.res.status).toBe(202);
      expect(status.body.data.state).toBe('waiting');
    } finally {
      await pdfOnly.close();
    }
  });

  it('every job name belongs to a queue a worker can take', () => {
    expect(JOB_NAMES.sort()).toEqual([
      'event.deliver',
      'image.convert',
      'image.metadata',
      'image.render',
      'media.delete-folder',
      'media.expire-resumable',
      'media.import',
      'media.purge-trash',
      'media.scan',
      'pdf.merge',
      'upload.complete-direct',
      'upload.expire-direct',
      'upload.verify-direct',
      'webhook.deliver',
    ]);
  });
});
