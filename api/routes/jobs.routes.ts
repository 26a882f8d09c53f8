/**
 * The queue-backed endpoints: GET /media/metadata, POST /media/convert,
 * POST /media/merge-pdfs, POST /media/upload/url (a URL import), and the job
 * status URL GET /media/jobs/:id.
 * Each declares its input (the fields of metadata and convert, from
 * wherever the client put them; the merge's streamed form) and makes one
 * call into MediaJobsService (or JobsService for the status URL), which
 * checks what the request names and waits for the job. `Prefer:
 * respond-async` answers 202 at once with the job id and its URL.
 */
import { Router } from 'express';
import { z } from 'zod';
import type { Config } from '@shared/config';
import { Errors } from '@shared/errors';
import { CONVERT_FORMAT_NAMES, convertFormatOf } from '@shared/media/formats';
import { formSpec } from '../forms/form-spec';
import { respondToJob } from '../http/job-answer';
import type { JobsService } from '../services/jobs.service';
import type { MediaJobsService } from '../services/media-jobs.service';
import { ON_DUPLICATE } from '../services/upload.service';
import { fieldsBody, RouteTable, type RouteGuards } from './route-table';

const FORMAT_NAMES = CONVERT_FORMAT_NAMES;

/** Fields read from a multipart or urlencoded form, a JSON body or the query. */
const FIELDS_LIMIT = '64kb';

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

/** A URL import: the URL, the folder (by name and/or id), the record's name, what a duplicate does. */
const importInput = z.object({
  url: z
    .string({ error: 'url is required' })
    .min(1, 'url is required')
    .max(8192, 'url is longer than 8192 characters'),
  folder: z.string().optional(),
  folderId: z.union([z.string(), z.number().int()]).optional(),
  name: z.string().max(4096).optional(),
  onDuplicate: z
    .enum(ON_DUPLICATE, { error: `onDuplicate must be one of ${ON_DUPLICATE.join(', ')}` })
    .optional(),
});

const jobIdParams = z.object({ id: z.string() });

/**
 * The merge's form: its inputs in form order, uploaded PDFs (`files` parts)
 * and stored ones (`mediaKeys`, repeated or one JSON array), and the folder
 * of the result.
 */
const mergeForm = (limits: Config['limits']) =>
  formSpec({
    files: {
      names: ['files', 'files[]'],
      are: 'PDFs',
      max: limits.maxMergeInputs,
      noun: 'merge inputs',
      maxBytes: limits.maxFileSize,
      required: 'at least one input is required: "files" parts and/or "mediaKeys"',
    },
    fields: ['folder', 'folderId'],
    list: { name: 'mediaKeys', aliases: ['mediaKeys[]'], read: parseKeys },
    maxFields: limits.maxMergeInputs + 10,
    names: 'in-order',
  });

export function jobRoutes(deps: {
  jobs: JobsService;
  mediaJobs: MediaJobsService;
  config: Config;
  guards: RouteGuards;
}): Router {
  const routes = new RouteTable(Router(), deps.guards);
  const { jobs, mediaJobs } = deps;

  routes.get(
    '/media/metadata',
    { scope: 'read', cost: 5, body: fieldsBody(metadataInput, { limit: FIELDS_LIMIT }) },
    async ({ caller, body }, res) => {
      respondToJob(res, await mediaJobs.metadata(caller, { key: body.mediaKey }));
    },
  );

  routes.post(
    '/media/convert',
    { scope: 'write', cost: 20, body: fieldsBody(convertInput, { limit: FIELDS_LIMIT }) },
    async ({ caller, body }, res) => {
      const { mediaKey: key, format, quality } = body;
      respondToJob(res, await mediaJobs.convert(caller, { key, format, quality }));
    },
  );

  // Fetched by a worker (the `import` queue); answered like convert: the record, or 504/202.
  routes.post(
    '/media/upload/url',
    { scope: 'write', cost: 10, body: fieldsBody(importInput, { limit: FIELDS_LIMIT }) },
    async ({ caller, body }, res) => {
      respondToJob(res, await mediaJobs.importUrl(caller, body));
    },
  );

  routes.post(
    '/media/merge-pdfs',
    { scope: 'write', cost: 50, form: mergeForm(deps.config.limits) },
    async ({ caller, form }, res) => {
      respondToJob(res, await mediaJobs.merge(caller, { form }));
    },
  );

  routes.get(
    '/media/jobs/:id',
    { scope: 'read', params: jobIdParams },
    async ({ caller, params }, res) => {
      // Once finished, the original request's answer, with 200 (also for a 201).
      respondToJob(res, await jobs.status(caller, { jobId: params.id }), 200);
    },
  );

  return routes.router;
}

/** `mediaKeys` as repeated fields, or one JSON array. */
function parseKeys(value: string): string[] {
  const trimmed = value.trim();
  if (trimmed.startsWith('[')) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(trimmed);
    } catch {
      throw Errors.validation([
        { field: 'mediaKeys', message: 'mediaKeys is not a valid JSON array' },
      ]);
    }
    if (
      !Array.isArray(parsed) ||
      !parsed.every((k): k is string => typeof k === 'string' && k !== '')
    ) {
      throw Errors.validation([
        { field: 'mediaKeys', message: 'mediaKeys must be an array of keys' },
      ]);
    }
    return parsed;
  }
  if (!trimmed)
    throw Errors.validation([{ field: 'mediaKeys', message: 'mediaKeys must not be empty' }]);
  return [trimmed];
}
