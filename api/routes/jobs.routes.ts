/**
 * The queue-backed endpoints: GET /media/metadata, POST /media/convert,
 * POST /media/merge-pdfs, and the job status URL GET /media/jobs/:id.
 * Each validates its input, checks the records it names (404/415 before any
 * job is made), and lets the jobs service enqueue and wait.
 * `Prefer: respond-async` answers 202 at once with the job id and its URL.
 */
import express, { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { Config } from '@shared/config';
import { Errors, isAppError } from '@shared/errors';
import type { JobName, JobPayloads } from '@shared/jobs';
import { CONVERT_FORMAT_NAMES as FORMATS } from '@shared/media/formats';
import type { MediaRepository } from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
import { principalOf } from '../middleware/auth';
import { originOf, requestIdOf } from '../middleware/request-context';
import {
  closeAfterAnswer,
  isMultipart,
  lastField,
  MultipartFailure,
  parseMultipart,
  readFields,
} from '../middleware/multipart';
import { success } from '../respond';
import type { JobAnswer, JobsService } from '../services/jobs.service';
import type { StoredObject, UploadService } from '../services/upload.service';

function prefersAsync(req: Request): boolean {
  const prefer = req.headers.prefer;
  return typeof prefer === 'string' && /(^|[,\s])respond-async\b/i.test(prefer);
}

function validationError(error: z.ZodError): Error {
  return Errors.validation(
    error.issues.map((i) => ({ field: i.path.join('.') || 'body', message: i.message })),
  );
}

/** Sends a job answer: the finished result, or 202 with where to ask. */
function respond(res: Response, answer: JobAnswer): void {
  if (answer.kind === 'done') {
    success(res, answer.data, answer.creates ? 201 : 200);
    return;
  }
  res.setHeader('Location', answer.statusUrl);
  res.status(202).json({
    statusCode: 202,
    message: 'Accepted',
    data: { jobId: answer.jobId, state: answer.state, statusUrl: answer.statusUrl },
  });
}

export function jobRoutes(deps: {
  jobs: JobsService;
  uploads: UploadService;
  media: MediaRepository;
  config: Config;
}): Router {
  const router = Router();
  const { jobs, media, uploads, config } = deps;
  const bodies = [
    express.json({ limit: '64kb', type: ['application/json', 'application/*+json'] }),
    express.urlencoded({ limit: '64kb', extended: false }),
  ];

  /** The record of an image key of this organization (404 unknown, 415 not an image). */
  async function imageRecord(org: Organization, key: string) {
    const record = await media.findByKey(org.id, key);
    if (!record) throw Errors.mediaNotFound(key);
    if (!record.mimetype.startsWith('image/')) {
      throw Errors.unsupportedType(`"${key}" is ${record.mimetype}, not an image`);
    }
    return record;
  }

  const metadataInput = z.object({
    mediaKey: z.string({ error: 'mediaKey is required' }).min(1, 'mediaKey is required'),
  });

  router.get('/media/metadata', ...bodies, async (req, res) => {
    const org = principalOf(req).organization;
    const parsed = metadataInput.safeParse(await readFields(req, ['mediaKey']));
    if (!parsed.success) throw validationError(parsed.error);
    const record = await imageRecord(org, parsed.data.mediaKey);
    respond(
      res,
      await run(req, 'image.metadata', {
        organizationId: org.id,
        requestId: requestIdOf(req),
        key: record.key,
      }),
    );
  });

  const convertInput = z.object({
    mediaKey: z.string({ error: 'mediaKey is required' }).min(1, 'mediaKey is required'),
    format: z
      .string({ error: 'format is required' })
      .transform((f) => f.toLowerCase())
      .pipe(z.enum(FORMATS, { error: `format must be one of ${FORMATS.join(', ')}` })),
    quality: z.coerce
      .number({ error: 'quality must be a number' })
      .int('quality must be an integer')
      .min(1, 'quality must be between 1 and 100')
      .max(100, 'quality must be between 1 and 100')
      .optional(),
  });

  router.post('/media/convert', ...bodies, async (req, res) => {
    const org = principalOf(req).organization;
    const parsed = convertInput.safeParse(await readFields(req, ['mediaKey', 'format', 'quality']));
    if (!parsed.success) throw validationError(parsed.error);
    const { mediaKey, format, quality } = parsed.data;
    const record = await imageRecord(org, mediaKey);
    respond(
      res,
      await run(req, 'image.convert', {
        organizationId: org.id,
        requestId: requestIdOf(req),
        origin: originOf(req),
        key: record.key,
        format: format === 'jpg' ? 'jpeg' : format,
        ...(quality === undefined ? {} : { quality }),
      }),
    );
  });

  router.post('/media/merge-pdfs', async (req, res) => {
    const org = principalOf(req).organization;
    if (!isMultipart(req)) throw Errors.badRequest('The request must be multipart/form-data');
    const maxInputs = config.limits.maxMergeInputs;
    // Inputs in form order: stored keys (looked up together once the form is read)
    // and uploaded parts (streamed to temporary objects as they arrive).
    const inputs: (Promise<{ key: string; name: string }> | { storedKey: string })[] = [];
    const temporary: StoredObject[] = [];
    const addInput = (input: Promise<{ key: string; name: string }> | { storedKey: string }) => {
      if (inputs.length >= maxInputs) throw Errors.tooManyFiles(maxInputs, 'merge inputs');
      if (input instanceof Promise) input.catch(() => undefined); // observed below
      inputs.push(input);
    };
    const uploadsSettled = () => Promise.allSettled(inputs.filter((i) => i instanceof Promise));
    /** Every input's key and name, in form order; one query for all the stored keys. */
    const resolveInputs = async () => {
      const storedKeys = inputs.flatMap((i) => (i instanceof Promise ? [] : [i.storedKey]));
      const records = await media.findByKeys(org.id, storedKeys);
      return Promise.all(
        inputs.map(async (input, index) => {
          if (input instanceof Promise) return input;
          const key = input.storedKey;
          const record = records.get(key);
          if (!record) throw Errors.mediaNotFound(key).forInput(index, key);
          if (record.mimetype !== 'application/pdf') {
            throw Errors.unsupportedType(`Input ${index + 1} ("${key}") is not a PDF`).forInput(
              index,
              key,
            );
          }
          return { key: record.key, name: record.name };
        }),
      );
    };
    try {
      const { fields } = await parseMultipart(
        req,
        {
          maxFileSize: config.limits.maxFileSize,
          maxFiles: maxInputs,
          filesNoun: 'merge inputs',
          maxFields: maxInputs + 10,
        },
        {
          onField(name, value) {
            if (name === 'mediaKeys' || name === 'mediaKeys[]') {
              for (const key of parseKeys(value)) addInput({ storedKey: key });
            } else if (name !== 'folder' && name !== 'folderId') {
              throw Errors.validation([
                {
                  field: name,
                  message: `unknown field "${name}" (accepted: files, mediaKeys, folder, folderId)`,
                },
              ]);
            }
          },
          async onFile(part) {
            if (part.field !== 'files' && part.field !== 'files[]') {
              throw Errors.validation([
                {
                  field: part.field,
                  message: `unexpected file field "${part.field}" (send PDFs as "files")`,
                },
              ]);
            }
            const index = inputs.length;
            if (index >= maxInputs) throw Errors.tooManyFiles(maxInputs, 'merge inputs');
            const stored = uploads
              .storeTemporary(org, part.stream, part.filename, ['application/pdf'])
              .then((object) => {
                temporary.push(object);
                return { key: object.key, name: object.name };
              })
              .catch((err: unknown) => {
                throw isAppError(err) ? err.forInput(index, part.filename) : err;
              });
            addInput(stored);
            await stored;
          },
        },
      );
      if (inputs.length === 0) {
        throw Errors.validation([
          {
            field: 'files',
            message: 'at least one input is required: "files" parts and/or "mediaKeys"',
          },
        ]);
      }
      const resolved = await resolveInputs();
      const folder = await uploads.resolveFolder(org, {
        folder: lastField(fields, 'folder'),
        folderId: lastField(fields, 'folderId'),
      });
      const payload: JobPayloads['pdf.merge'] = {
        organizationId: org.id,
        requestId: requestIdOf(req),
        origin: originOf(req),
        inputs: resolved,
        folderId: folder?.id ?? null,
        temporaryKeys: temporary.map((t) => t.key),
      };
      respond(
        res,
        await jobs.run('pdf.merge', payload, {
          async: prefersAsync(req),
          // Once queued, the job owns the temporary inputs (and removes them when it ends);
          // until then (Redis refusing the job) they are this request's to remove.
          onQueued: () => void (temporary.length = 0),
        }),
      );
    } catch (err) {
      await uploadsSettled();
      await uploads.discard(temporary);
      if (err instanceof MultipartFailure) {
        closeAfterAnswer(req);
        throw (err as MultipartFailure<unknown>).error;
      }
      throw err;
    }
  });

  router.get('/media/jobs/:id', async (req, res) => {
    const org = principalOf(req).organization;
    const answer = await jobs.status(org, String(req.params.id));
    if (answer.kind === 'done') success(res, answer.data, 200);
    else respond(res, answer);
  });

  function run<N extends JobName>(
    req: Request,
    name: N,
    payload: JobPayloads[N],
  ): Promise<JobAnswer> {
    return jobs.run(name, payload, { async: prefersAsync(req) });
  }

  return router;
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
