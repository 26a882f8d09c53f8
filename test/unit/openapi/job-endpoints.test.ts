/**
 * The job endpoints (metadata, convert, merge-pdfs, jobs/{id}) answer as
 * api/openapi.yaml says: the real app, routes, MediaJobsService and
 * JobsService on an HTTP server in this process (port 0, loopback), with
 * in-memory stand-ins for the queue, the records and the token check. No
 * service is needed; each answer goes through expectMatchesSpec.
 */
import { DEFAULT_POLICY } from '../../../shared/egress/egress';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createApp } from '../../../api/app';
import type { DownloadService } from '../../../api/services/download.service';
import type { RenderService } from '../../../api/services/render.service';
import type { FoldersService } from '../../../api/services/folders.service';
import type { IngestService } from '../../../api/services/ingest.service';
import { JobsService } from '../../../api/services/jobs.service';
import { MediaJobsService } from '../../../api/services/media-jobs.service';
import type { MediaService } from '../../../api/services/media.service';
import type { TrashService } from '../../../api/services/trash.service';
import type { SignedUrlService } from '../../../api/services/signed-urls.service';
import type { ArchiveService } from '../../../api/services/archive.service';
import { SCOPES, type TokensService } from '../../../api/services/tokens.service';
import type { UploadService } from '../../../api/services/upload.service';
import type { ResumableService } from '../../../api/services/resumable.service';
import type { DirectUploadService } from '../../../api/services/direct-upload.service';
import type { WebhooksService } from '../../../api/services/webhooks.service';
import { loadConfig } from '../../../shared/config';
import { Errors, type AppError } from '../../../shared/errors';
import { decodeJobError, encodeJobError, newJobId, type JobName } from '../../../shared/jobs';
import { createLogger } from '../../../shared/logger';
import { createApiMetrics } from '../../../shared/metrics';
import type { JobOutcome, JobQueue, JobSnapshot } from '../../../shared/queue/job-queue';
import type { MediaRecord, MediaRepository } from '../../../shared/repositories/media.repository';
import { expectMatchesSpec } from '../../support/openapi';
import { fromJob, type JsonObject } from './samples';

describe('the job endpoints answer as api/openapi.yaml says (in-process, stand-in queue)', () => {
  const org = { id: 3, slug: 'acme', name: 'Acme', quotaBytes: null, rootFolderId: 2 };
  const publicBaseUrl = 'http://localhost:3000';
  const at = new Date('2025-11-22T06:52:11.408Z');
  const record = (id: number, key: string, mimetype: string, name: string): MediaRecord => ({
    id,
    organizationId: org.id,
    folderId: null,
    key,
    name,
    mimetype,
    bytes: 2048,
    checksum: `sha256:${'0'.repeat(64)}`,
    metaData: { ipAddress: '::ffff:127.0.0.1', userAgent: '' },
    createdBy: null,
    deletingAt: null,
    jobId: null,
    createdAt: at,
    updatedAt: at,
  });
  const records = [
    record(1, 'acme/photo-ILm6DTZ4Wc-R.jpg', 'image/jpeg', 'photo.jpg'),
    record(2, 'acme/doc-FxV27-xy8auL.pdf', 'application/pdf', 'doc.pdf'),
    record(3, 'acme/photo-Q2x9LwPz0aB7.webp', 'image/webp', 'photo.jpg'),
    record(
      4,
      'merged_1763795531408.pdf',
      'application/pdf',
      'http://127.0.0.1:9000/media/merged_1763795531408.pdf',
    ),
    // Neither an image nor a PDF (a type an ACCEPTED_TYPES setting could have let in).
    record(5, 'acme/notes-Hq3vN8sT1uYw.txt', 'text/plain', 'notes.txt'),
  ];
  const metadata = {
    format: 'jpeg',
    size: 2048,
    width: 100,
    height: 68,
    space: 'srgb',
    channels: 3,
    depth: 'uchar',
    isProgressive: false,
    hasProfile: false,
    hasAlpha: false,
    exif: { type: 'Buffer', data: [69, 120, 105, 102, 0, 0] },
  };

  /** What the stand-in queue does with the next job, and the jobs it knows. */
  let outcome: JobOutcome<JobName>;
  let addFails: AppError | undefined;
  const jobs = new Map<string, JobSnapshot>();
  const queue: JobQueue = {
    add(name, payload, uuid) {
      if (addFails) return Promise.reject(addFails);
      const id = newJobId(name, uuid);
      jobs.set(id, { id, name, data: payload, state: 'waiting', attemptsMade: 0 });
      return Promise.resolve(id);
    },
    wait: () => Promise.resolve(outcome as never),
    get: (jobId) => Promise.resolve(jobs.get(jobId) ?? null),
    settleShared: () => Promise.resolve(),
    forgetShared: () => Promise.resolve(),
    counts: () => Promise.reject(new Error('not used')),
    ping: () => Promise.resolve(),
    close: () => Promise.resolve(),
  };
  const media = {
    findByKey: (orgId: number, key: string) =>
      Promise.resolve(records.find((r) => r.organizationId === orgId && r.key === key) ?? null),
    findByKeys: (orgId: number, keys: string[]) =>
      Promise.resolve(
        new Map(
          records
            .filter((r) => r.organizationId === orgId && keys.includes(r.key))
            .map((r) => [r.key, r]),
        ),
      ),
    findById: (orgId: number, id: number) =>
      Promise.resolve(records.find((r) => r.organizationId === orgId && r.id === id) ?? null),
  } as unknown as MediaRepository;
  const jobsService = new JobsService({
    queue,
    media,
    publicBaseUrl,
    bucket: 'media',
    waitMs: 50,
    storedResults: { take: () => Promise.resolve(null) },
  });
  const mediaJobs = new MediaJobsService({
    jobs: jobsService,
    media,
    // Merges here name stored keys only: their input bundle stays empty.
    ingest: {
      bundle: () => ({
        used: false,
        add: () => Promise.reject(new Error('no uploaded inputs in this test')),
        finish: () => Promise.resolve(),
        discard: () => Promise.resolve(),
      }),
    } as unknown as IngestService,
    folders: { resolve: () => Promise.resolve(null) } as unknown as FoldersService,
    limits: { maxMergeInputs: 50, maxMergeBytes: 256 * 1024 * 1024 },
    scan: { enabled: false, defaultPolicy: 'clean-only' },
    egress: DEFAULT_POLICY,
    onDuplicate: 'allow',
  });
  const tokens = {
    verify: (token: string) =>
      Promise.resolve(
        token === 'mine'
          ? { organization: org, tokenId: 't1', scopes: new Set(SCOPES) }
          : token === 'theirs'
            ? {
                organization: {
                  id: 4,
                  slug: 'other',
                  name: 'Other',
                  quotaBytes: null,
                  rootFolderId: 5,
                },
                tokenId: 't2',
                scopes: new Set(SCOPES),
              }
            : null,
      ),
  } as unknown as TokensService;

  let server: Server;
  let base: string;
  beforeAll(async () => {
    const app = createApp({
      config: loadConfig({}),
      logger: createLogger({ level: 'silent' }),
      tokens,
      uploads: {} as UploadService,
      resumable: {} as ResumableService,
      directUploads: {} as DirectUploadService,
      downloads: {} as DownloadService,
      renders: {} as RenderService,
      jobs: jobsService,
      mediaJobs,
      mediaService: {} as MediaService,
      trash: {} as TrashService,
      signedUrls: {} as SignedUrlService,
      archives: {} as ArchiveService,
      webhooks: {} as WebhooksService,
      folders: {} as FoldersService,
      metrics: createApiMetrics(),
      readiness: {},
    });
    server = createServer(app);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  beforeEach(() => {
    outcome = { state: 'timeout' };
    addFails = undefined;
  });

  /** Sends a request and checks the answer against the document; returns it. */
  async function call(
    method: string,
    template: string,
    path: string,
    init: { headers?: Record<string, string>; body?: string | FormData; token?: string } = {},
  ) {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { Authorization: `Bearer ${init.token ?? 'mine'}`, ...init.headers },
      body: init.body,
    });
    const body = (await res.json()) as JsonObject;
    expectMatchesSpec(method, template, res.status, body, res.headers);
    return { status: res.status, body, headers: res.headers };
  }
  const json = { 'Content-Type': 'application/json' };
  const convert = (format: string, extra: Record<string, string> = {}) =>
    call('POST', '/media/convert', '/media/convert', {
      headers: { ...json, ...extra },
      body: JSON.stringify({ mediaKey: records[0]!.key, format }),
    });
  const metadataOf = (key: string, headers: Record<string, string> = {}) =>
    call('GET', '/media/metadata', `/media/metadata?mediaKey=${encodeURIComponent(key)}`, {
      headers,
    });
  const status = (jobId: string, token?: string) =>
    call('GET', '/media/jobs/{id}', `/media/jobs/${encodeURIComponent(jobId)}`, { token });

  it('metadata: 200, 202 with Prefer: respond-async, 504, 404, 415, 400, 422 with jobId', async () => {
    outcome = { state: 'completed', result: { metadata } };
    expect((await metadataOf(records[0]!.key)).status).toBe(200);
    const accepted = await metadataOf(records[0]!.key, { Prefer: 'respond-async' });
    expect(accepted.status).toBe(202);
    expect(accepted.headers.get('location')).toBe((accepted.body.data as JsonObject).statusUrl);
    outcome = { state: 'timeout' };
    expect((await metadataOf(records[0]!.key)).status).toBe(504);
    expect((await metadataOf('acme/none-ILm6DTZ4Wc-R.jpg')).status).toBe(404);
    expect((await metadataOf(records[4]!.key)).status).toBe(415);
    expect((await call('GET', '/media/metadata', '/media/metadata')).status).toBe(400);
    outcome = { state: 'failed', error: fromJob(Errors.unreadable('damaged header')) };
    const failed = await metadataOf(records[0]!.key);
    expect([failed.status, typeof failed.body.jobId]).toEqual([422, 'string']);
  });

  it('convert: 201 with the new record, 202, 400, 503 from Redis and from the job', async () => {
    outcome = { state: 'completed', result: { mediaId: 3 } };
    expect((await convert('WEBP')).status).toBe(201);
    expect((await convert('png', { Prefer: 'wait=5, Respond-Async' })).status).toBe(202);
    expect((await convert('bmp')).status).toBe(400);
    addFails = Errors.unavailable('Redis');
    expect((await convert('png')).status).toBe(503);
    addFails = undefined;
    outcome = { state: 'failed', error: fromJob(Errors.unavailable('storage')) };
    expect((await convert('png')).status).toBe(503);
  });

  it('merge-pdfs: 201, 404 and 415 naming the input, 400', async () => {
    const form = (...keys: string[]) => {
      const fd = new FormData();
      for (const key of keys) fd.append('mediaKeys', key);
      return fd;
    };
    const merge = (body: FormData | string) =>
      call('POST', '/media/merge-pdfs', '/media/merge-pdfs', { body });
    outcome = { state: 'completed', result: { mediaId: 4 } };
    expect((await merge(form(records[1]!.key, records[1]!.key))).status).toBe(201);
    const unknown = await merge(form(records[1]!.key, 'acme/none.pdf'));
    expect([unknown.status, unknown.body.details]).toEqual([
      404,
      [expect.objectContaining({ index: 1, name: 'acme/none.pdf' })],
    ]);
    const notPdf = await merge(form(records[0]!.key));
    expect([notPdf.status, notPdf.body.details]).toEqual([
      415,
      [expect.objectContaining({ index: 0 })],
    ]);
    expect((await merge(form())).status).toBe(400);
    expect((await merge('mediaKeys=x')).status).toBe(400);
  });

  it('the status URL: 202 while pending, 200 once done (even for a 201), the error with jobId, 404', async () => {
    const accepted = await convert('png', { Prefer: 'respond-async' });
    const jobId = String((accepted.body.data as JsonObject).jobId);
    const job = jobs.get(jobId)!;
    for (const state of [
      'waiting',
      'active',
      'delayed',
      'prioritized',
      'waiting-children',
    ] as const) {
      job.state = state;
      const pending = await status(jobId);
      expect([pending.status, (pending.body.data as JsonObject).state]).toEqual([202, state]);
    }
    Object.assign(job, { state: 'completed', result: { mediaId: 3 } });
    expect((await status(jobId)).status).toBe(200);
    Object.assign(job, {
      state: 'failed',
      error: decodeJobError(
        encodeJobError(
          Errors.encryptedPdf('encrypted', [{ index: 1, name: 's.pdf', message: 'x' }]),
        ),
      ),
    });
    const failed = await status(jobId);
    expect([failed.status, failed.body.jobId]).toEqual([422, jobId]);
    const meta = await metadataOf(records[0]!.key, { Prefer: 'respond-async' });
    const metaJob = jobs.get(String((meta.body.data as JsonObject).jobId))!;
    Object.assign(metaJob, { state: 'completed', result: { metadata } });
    expect((await status(metaJob.id)).status).toBe(200);
    expect((await status(jobId, 'theirs')).body.error).toBe('JOB_NOT_FOUND');
    expect((await status('nonsense')).status).toBe(404);
    expect((await status(jobId, 'nobody')).status).toBe(401);
  });
});
