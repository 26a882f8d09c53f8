/**
 * api/openapi.yaml against the code it describes: exactly the routes the app
 * registers, the error codes of shared/errors.ts, the records toMediaView
 * builds, the metadata the image adapter reads (test/fixtures), and the
 * formats convert accepts.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createApp, type AppDeps } from '../../../api/app';
import type { DownloadService } from '../../../api/services/download.service';
import type { RenderService } from '../../../api/services/render.service';
import type { FoldersService } from '../../../api/services/folders.service';
import type { JobsService } from '../../../api/services/jobs.service';
import type { MediaJobsService } from '../../../api/services/media-jobs.service';
import type { MediaService } from '../../../api/services/media.service';
import type { TrashService } from '../../../api/services/trash.service';
import type { SignedUrlService } from '../../../api/services/signed-urls.service';
import type { ArchiveService } from '../../../api/services/archive.service';
import { toMediaView } from '../../../api/domain/media-view';
import type { TokensService } from '../../../api/services/tokens.service';
import type { UploadService } from '../../../api/services/upload.service';
import type { ResumableService } from '../../../api/services/resumable.service';
import type { DirectUploadService } from '../../../api/services/direct-upload.service';
import type { WebhooksService } from '../../../api/services/webhooks.service';
import { loadConfig } from '../../../shared/config';
import { createLogger } from '../../../shared/logger';
import { createApiMetrics } from '../../../shared/metrics';
import { CONVERT_FORMAT_NAMES } from '../../../shared/media/formats';
import { ImageAdapter } from '../../../worker/image/image.adapter';
import { describeAjvErrors, nodeAt, specOperations, validatorAt } from '../../support/openapi';
import { root, sampleRecord } from './samples';

/** The ErrorCode union of shared/errors.ts, read from its source. */
function errorCodesInSource(): string[] {
  const source = readFileSync(join(root, 'shared', 'errors.ts'), 'utf8');
  const union = /export type ErrorCode =([^;]+);/.exec(source)?.[1];
  if (!union) throw new Error('ErrorCode not found in shared/errors.ts');
  return [...union.matchAll(/'([A-Z_]+)'/g)].map((m) => m[1]!);
}

interface StackLayer {
  route?: { path: unknown; methods: Record<string, boolean | undefined> };
  handle?: unknown;
  rawPath?: unknown;
}

/** Every route of an Express router stack, as `METHOD /path` (OpenAPI path syntax). */
function routesOf(stack: StackLayer[], prefix = ''): string[] {
  const found: string[] = [];
  for (const layer of stack) {
    if (layer.route) {
      const { path, methods } = layer.route;
      if (typeof path !== 'string')
        throw new Error(`route with a non-string path: ${String(path)}`);
      for (const [method, on] of Object.entries(methods)) {
        if (!on) continue;
        if (method === '_all') throw new Error(`${path}: router.all() routes cannot be checked`);
        found.push(`${method.toUpperCase()} ${prefix}${path.replace(/:(\w+)/g, '{$1}')}`);
      }
      continue;
    }
    const inner = (layer.handle as { stack?: unknown } | undefined)?.stack;
    if (Array.isArray(inner)) {
      const mount = typeof layer.rawPath === 'string' && layer.rawPath !== '/' ? layer.rawPath : '';
      found.push(...routesOf(inner as StackLayer[], prefix + mount));
    }
  }
  return found;
}

function appRoutes(): string[] {
  const deps: AppDeps = {
    config: loadConfig({}),
    logger: createLogger({ level: 'silent' }),
    tokens: {} as TokensService,
    uploads: {} as UploadService,
    resumable: {} as ResumableService,
    directUploads: {} as DirectUploadService,
    downloads: {} as DownloadService,
    renders: {} as RenderService,
    jobs: {} as JobsService,
    mediaJobs: {} as MediaJobsService,
    mediaService: {} as MediaService,
    trash: {} as TrashService,
    signedUrls: {} as SignedUrlService,
    archives: {} as ArchiveService,
    webhooks: {} as WebhooksService,
    folders: {} as FoldersService,
    metrics: createApiMetrics(),
    readiness: {},
  };
  const app = createApp(deps);
  return routesOf(app.router.stack as unknown as StackLayer[]);
}

describe('api/openapi.yaml and the code', () => {
  it('lists every error code of shared/errors.ts, and only those', () => {
    const enumCodes = (nodeAt('/components/schemas/ErrorCode') as { enum: string[] }).enum;
    expect([...enumCodes].sort()).toEqual(errorCodesInSource().sort());
  });

  it('describes exactly the routes the app registers', () => {
    const registered = appRoutes();
    const described = specOperations().map((o) => `${o.method} ${o.path}`);
    // Express answers HEAD with a GET route, so a described HEAD needs a registered GET.
    const served = new Set(registered);
    for (const route of registered) {
      if (route.startsWith('GET ')) served.add(`HEAD ${route.slice(4)}`);
    }
    expect(registered).toEqual(
      expect.arrayContaining([
        'GET /healthz',
        'GET /readyz',
        'GET /metrics',
        'POST /media/upload',
        'POST /media/upload/multiple',
        'POST /media/upload/base64',
        'GET /media/download',
        'GET /media/metadata',
        'POST /media/convert',
        'POST /media/merge-pdfs',
        'GET /media/jobs/{id}',
      ]),
    );
    expect(registered.filter((r) => !described.includes(r))).toEqual([]);
    expect(described.filter((d) => !served.has(d))).toEqual([]);
  });

  it('MediaRecord and UploadedMediaRecord are what toMediaView builds (every field, nothing more)', () => {
    const settings = { publicBaseUrl: 'https://media.example.com', bucket: 'media' };
    const shown = { folderId: true, rootFolderId: 1 } as const;
    const withFolder = toMediaView(sampleRecord(), settings, shown);
    const noFolder = toMediaView({ ...sampleRecord(), folderId: null, bytes: 70 }, settings, shown);
    // A file in no folder answers the root folder's id: an integer, never null.
    expect(noFolder.folderId).toBe(1);
    const uploaded = toMediaView(sampleRecord(), settings, { folderId: false });
    const validate = validatorAt('/components/schemas/MediaRecord');
    const validateUploaded = validatorAt('/components/schemas/UploadedMediaRecord');
    for (const view of [withFolder, noFolder]) {
      expect({ valid: validate(view), errors: validate.errors ?? null }).toEqual({
        valid: true,
        errors: null,
      });
      // folderId is not part of an upload's answer.
      expect(validateUploaded(view)).toBe(false);
    }
    expect(validateUploaded(uploaded)).toBe(true);
    expect(validate(uploaded)).toBe(false);
    const required = (nodeAt('/components/schemas/MediaRecordFields') as { required: string[] })
      .required;
    expect([...required, 'folderId'].sort()).toEqual(Object.keys(withFolder).sort());
    expect([...required].sort()).toEqual(Object.keys(uploaded).sort());
  });

  it('ImageMetadata matches what the image adapter reads', async () => {
    const validate = validatorAt('/components/schemas/ImageMetadata');
    const adapter = new ImageAdapter({ maxInputPixels: 100_000_000 });
    const fixtures = join(root, 'test', 'fixtures');
    const images = readdirSync(fixtures).filter((f) =>
      /\.(jpe?g|png|webp|gif|tiff?|heic|heif)$/i.test(f),
    );
    expect(images.length).toBeGreaterThan(2);
    const failures: string[] = [];
    for (const file of images) {
      // As the worker sends it: through JSON (Buffers become { type, data }).
      const metadata = JSON.parse(
        JSON.stringify(await adapter.readMetadata(readFileSync(join(fixtures, file)))),
      ) as unknown;
      if (!validate(metadata)) failures.push(`${file}:\n${describeAjvErrors(validate.errors)}`);
    }
    expect(failures).toEqual([]);
  });

  it('ConvertRequest.format accepts the formats in any case, and nothing else', () => {
    const validate = validatorAt('/components/schemas/ConvertRequest');
    const accepts = (format: string) => validate({ mediaKey: 'k', format });
    for (const format of CONVERT_FORMAT_NAMES) {
      expect([format, accepts(format), accepts(format.toUpperCase())]).toEqual([
        format,
        true,
        true,
      ]);
    }
    for (const format of ['svg', 'heic', ' png', 'jpegg', '']) {
      expect([format, accepts(format)]).toEqual([format, false]);
    }
  });
});
