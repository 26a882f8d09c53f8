/**
 * The queue-backed endpoints: GET /media/metadata, POST /media/convert,
 * POST /media/merge-pdfs, and the job status URL GET /media/jobs/:id.
 * Each parses its input and makes one call into MediaJobsService (or
 * JobsService for the status URL), which checks what the request names and
 * waits for the job. `Prefer: respond-async` answers 202 at once with the
 * job id and its URL.
 */
import express, { Router, type Request } from 'express';
import { z } from 'zod';
import { CONVERT_FORMAT_NAMES, convertFormatOf } from '@shared/media/formats';
import { multipartForm, readFields } from '../forms/multipart-form';
import { principalOf } from '../middleware/auth';
import { originOf, requestIdOf } from '../middleware/request-context';
import type { JobsService } from '../services/jobs.service';
import type { JobRequest, MediaJobsService } from '../services/media-jobs.service';
import { respondToJob } from '../http/job-answer';
import { RouteTable, type RouteGuards } from './route-table';
import { parseInput } from '../http/validate';

const FORMAT_NAMES = CONVERT_FORMAT_NAMES;

function prefersAsync(req: Request): boolean {
  const prefer = req.headers.prefer;
  return typeof prefer === 'string' && /(^|[,\s])respond-async\b/i.test(prefer);
}

function jobRequest(req: Request): JobRequest {
  const async = prefersAsync(req);
  const idempotent = req.idempotency;
  return {
    requestId: requestIdOf(req),
    origin: originOf(req),
    tokenId: principalOf(req).tokenId,
    async,
    // A keyed request: its retries get this job's outcome.
    onQueued: idempotent ? (jobId) => idempotent.jobQueued(jobId, async) : undefined,
  };
}

const metadataInput = z.object({
  mediaKey: z.string({ error: 'mediaKey is required' }).min(1, 'mediaKey is required'),
});

const convertInput = z.object({
  mediaKey: z.string({ error: 'mediaKey is required' }).min(1, 'mediaKey is required'),
  format: z
    .string({ error: 'format is required' })
    .transform((f) => f.toLowerCase())
    .pipe(z.enum(FORMAT_NAMES, { error: `format must be one of ${FORMAT_NAMES.join(', ')}` }))
    .transform((f) => convertFormatOf(f)!),
  quality: z.coerce
    .number({ error: 'quality must be a number' })
    .int('quality must be an integer')
    .min(1, 'quality must be between 1 and 100')
    .max(100, 'quality must be between 1 and 100')
    .optional(),
});

export function jobRoutes(deps: {
  jobs: JobsService;
  mediaJobs: MediaJobsService;
  guards: RouteGuards;
}): Router {
  const routes = new RouteTable(Router(), deps.guards);
  const { jobs, mediaJobs } = deps;
  const bodies = [
    express.json({ limit: '64kb', type: ['application/json', 'application/*+json'] }),
    express.urlencoded({ limit: '64kb', extended: false }),
  ];

  routes.get('/media/metadata', { scope: 'read', cost: 5 }, ...bodies, async (req, res) => {
    const { mediaKey } = parseInput(metadataInput, await readFields(req, ['mediaKey']));
    const org = principalOf(req).organization;
    respondToJob(res, await mediaJobs.metadata(org, mediaKey, jobRequest(req)));
  });

  routes.post('/media/convert', { scope: 'write', cost: 20 }, ...bodies, async (req, res) => {
    const input = parseInput(
      convertInput,
      await readFields(req, ['mediaKey', 'format', 'quality']),
    );
    const org = principalOf(req).organization;
    respondToJob(
      res,
      await mediaJobs.convert(
        org,
        { key: input.mediaKey, format: input.format, quality: input.quality },
        jobRequest(req),
      ),
    );
  });

  routes.post('/media/merge-pdfs', { scope: 'write', cost: 50, upload: true }, async (req, res) => {
    const org = principalOf(req).organization;
    respondToJob(res, await mediaJobs.merge(org, multipartForm(req), jobRequest(req)));
  });

  routes.get('/media/jobs/:id', { scope: 'read' }, async (req, res) => {
    const org = principalOf(req).organization;
    // Once finished, the original request's answer, with 200 (also for a 201).
    respondToJob(res, await jobs.status(org, String(req.params.id)), 200);
  });

  return routes.router;
}
