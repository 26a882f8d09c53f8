/**
 * The worker's composition root: MongoDB, object storage, the repositories
 * and services, built from the configuration. Processors see only the
 * `JobContext` part, and each declares which of it it uses.
 */
import type { Connection } from 'mongoose';
import { BackgroundTasks } from '@shared/background';
import type { Config } from '@shared/config';
import { connectMongo } from '@shared/db/connection';
import { createModels, syncIndexes, type Models } from '@shared/db/models';
import type { JobPayloads } from '@shared/jobs';
import type { RenderOptions } from '@shared/media/render-options';
import type { Logger } from '@shared/logger';
import { MediaCreation } from '@shared/media-creation';
import { MediaDeletion } from '@shared/media-deletion';
import type { DependencyMetrics, WorkerMetrics } from '@shared/metrics';
import { InvalidationPublisher } from '@shared/queue/invalidations';
import { BullJobQueue } from '@shared/queue/job-queue';
import { ClamdScanner } from '@shared/scan/clamd-scanner';
import type { ScanSettings } from '@shared/scan/scan';
import { JobHandoff } from '@shared/queue/handoff';
import { createRedis, waitForRedis, type RedisConnection } from '@shared/queue/redis';
import { createRepositories, type Repositories } from '@shared/repositories';
import { createObjectStore } from '@shared/storage/create-object-store';
import type { ObjectStore } from '@shared/storage/object-store';
import { observeObjectStore } from '@shared/storage/observed-object-store';
import { expireResumableUploads } from '@shared/resumable-uploads';
import { StoredResults } from '@shared/stored-results';
import { LISTENERS } from './listeners';
import { buildListeners, type Listener, type Listeners } from './listeners/listener';
import { ResultsService } from './services/results.service';
import { WebhookDeliveries } from './services/webhook-deliveries.service';
import { ScanService } from './services/scan.service';
import { ImportService } from './services/import.service';
import { DirectCompletionService } from './services/direct-completion.service';
import { DirectUploads } from '@shared/uploads/direct-uploads';

/** Image work (over sharp): what the image processors need. */
export interface ImageOps {
  readMetadata(input: Buffer): Promise<Record<string, unknown>>;
  /** A PDF's information (format `pdf`, pages, page sizes, title, author, producer...). */
  readPdfInfo(
    input: Buffer,
    time: { signal?: AbortSignal; timeoutMs?: number },
  ): Promise<{ pages: number }>;
  convert(
    input: Buffer,
    format: JobPayloads['image.convert']['format'],
    options: { quality?: number; signal?: AbortSignal; timeoutMs?: number },
  ): Promise<{ data: Buffer; mime: string; ext: string }>;
  /** Stops when `time.signal` aborts or `time.timeoutMs` has gone by (the job's time limit). */
  render(
    input: Buffer,
    options: RenderOptions,
    time: { signal?: AbortSignal; timeoutMs?: number },
  ): Promise<{ data: Buffer; mime: string; width: number; height: number; pages?: number }>;
  /** The image's placeholder (ThumbHash, base64); stops as `render` does. */
  thumbhash(input: Buffer, time: { signal?: AbortSignal; timeoutMs?: number }): Promise<string>;
}

/** PDF work (over pdf-lib and qpdf): what the merge processor needs. */
export interface PdfOps {
  merge(inputs: { name: string; data: Buffer }[]): Promise<{ data: Buffer; pages: number }>;
}

/** What processors may use; each picks the parts it needs (see worker/registry.ts). */
export interface JobContext {
  limits: Config['limits'];
  /** Render bounds (RENDER_MAX_VARIANTS is checked again where a variant is recorded). */
  render: Config['render'];
  store: ObjectStore;
  media: Repositories['media'];
  variants: Repositories['variants'];
  folders: Repositories['folders'];
  organizations: Repositories['organizations'];
  /** The organizations' counters: a variant's bytes are reserved against the quota before it is written. */
  usage: Repositories['usage'];
  results: ResultsService;
  /** Job results too large for Redis, bounded and kept until read or expired. */
  storedResults: StoredResults;
  deletion: MediaDeletion;
  images: ImageOps;
  pdfs: PdfOps;
  /** Hands a job's output to the API requests waiting for it, beside storage (first renders). */
  handoff: Pick<JobHandoff, 'offer' | 'accepts'>;
  /** Domain events: recorded with their changes, dispatched to listeners (shared/events/). */
  events: Repositories['events'];
  /** The listeners of domain events (worker/listeners/index.ts, or a test's own). */
  listeners: Listeners;
  /** Work off the job's answer (awaited by the worker's shutdown, not by the job). */
  background: Pick<BackgroundTasks, 'run'>;
  /** Webhook messages queued for an event and each attempt made (worker/services/webhook-deliveries.service.ts). */
  webhooks: WebhookDeliveries;
  /** Malware scanning: on when CLAMD_URL is set (shared/scan/); the policy applies to job inputs. */
  scan: ScanSettings;
  /** The scans themselves (null: scanning is off). */
  scans: ScanService | null;
  /** URL imports: fetched through the guarded way out, streamed to storage, recorded. */
  imports: ImportService;
  /** Direct-to-storage uploads' state (in Redis): their expiry cleanup. */
  directUploads: DirectUploads;
  /** Direct-to-storage uploads' completion: read back, checked, copied, recorded. */
  directCompletions: DirectCompletionService;
  /** Resumable uploads past their expiry removed (shared/resumable-uploads.ts); answers how many. */
  resumable: { expire(): Promise<number> };
}

export interface WorkerContext extends JobContext {
  config: Config;
  logger: Logger;
  connection: Connection;
  models: Models;
  close(): Promise<void>;
}

export async function createWorkerContext(
  config: Config,
  logger: Logger,
  adapters: { images: ImageOps; pdfs: PdfOps },
  overrides: {
    store?: ObjectStore;
    /** Times MongoDB commands and storage calls (the worker's metrics), and counts scans. */
    metrics?: DependencyMetrics &
      Partial<
        Pick<
          WorkerMetrics,
          'scanned' | 'imported' | 'resumableExpiredCleaned' | 'directExpiredCleaned'
        >
      >;
    /** The listeners of domain events (LISTENERS by default). */
    listeners?: readonly Listener[];
  } = {},
): Promise<WorkerContext> {
  if (!config.mongodbUri) throw new Error('MONGODB_URI is not set');
  const { metrics } = overrides;
  const connection = await connectMongo(config.mongodbUri, logger, metrics ? { metrics } : {});
  try {
    const models = createModels(connection);
    await syncIndexes(models);
    // Every storage call is timed and traced (shared/storage/observed-object-store.ts).
    const store = observeObjectStore(overrides.store ?? createObjectStore(config, logger), metrics);
    if (!overrides.store) await store.init();
    const { media, folders, organizations, usage, variants, jobResults, events, webhooks } =
      createRepositories(models, { usageBookingTtlMs: config.usageBookingTtlMs });
    // The webhook deliveries' own queue producer, made on first use.
    let webhookQueue: BullJobQueue | undefined;
    // Its own fail-fast connection, made on the first handoff (a worker without image jobs never makes it).
    let handoffRedis: RedisConnection | undefined;
    // Direct uploads' state, for their completion jobs and cleanup (made on first use; each
    // waits until it is ready: DirectUploads.ready).
    let directRedis: RedisConnection | undefined;
    // And one for the resumable uploads' cleanup, made on its first run.
    let resumableRedis: RedisConnection | undefined;
    const { redisUrl } = config;
    const handoff = new JobHandoff({
      redis: () => (handoffRedis ??= createRedis(redisUrl!, 'producer', logger)),
      queuePrefix: config.queuePrefix,
      maxBytes: redisUrl ? config.render.handoffMaxBytes : 0,
      logger,
    });
    // Tells the API replicas of keys a folder's delete removed (connects on the first one).
    const invalidations = new InvalidationPublisher({
      redisUrl,
      queuePrefix: config.queuePrefix,
      logger,
    });
    const deletion = new MediaDeletion({
      media,
      usage,
      store,
      events,
      logger,
      invalidations,
      trash: { retentionS: config.trash.retentionS, organizations },
    });
    const background = new BackgroundTasks(logger);
    const creation = new MediaCreation({
      media,
      usage,
      folders,
      deletion,
      store,
      outbox: events,
      logger,
      background: (what, task) => background.run(what, task),
      scanning: config.scan.clamdUrl !== undefined,
    });
    const directUploads = new DirectUploads({
      redis: () =>
        redisUrl ? (directRedis ??= createRedis(redisUrl, 'producer', logger)) : undefined,
      store,
      usage,
      queuePrefix: config.queuePrefix,
      logger,
      ...(metrics?.directExpiredCleaned
        ? { metrics: { directExpiredCleaned: metrics.directExpiredCleaned } }
        : {}),
    });
    const scan: ScanSettings = {
      enabled: config.scan.clamdUrl !== undefined,
      defaultPolicy: config.scan.defaultPolicy,
    };
    // Scan jobs are queued by the scan listener through a producer of its own (connected on
    // the first job: nothing is opened while scanning is off).
    const scanQueue =
      config.scan.clamdUrl && redisUrl
        ? new BullJobQueue(
            { redisUrl, queuePrefix: config.queuePrefix, fairQueues: config.fairQueues },
            logger,
          )
        : undefined;
    const scans =
      config.scan.clamdUrl && scanQueue
        ? new ScanService({
            clamd: new ClamdScanner({
              url: config.scan.clamdUrl,
              timeoutMs: config.scan.timeoutMs,
            }),
            store,
            media,
            organizations,
            queue: scanQueue,
            maxBytes: config.scan.maxBytes,
            ...(metrics?.scanned ? { metrics: { scanned: metrics.scanned } } : {}),
            logger,
          })
        : null;
    return {
      config,
      logger,
      connection,
      models,
      limits: config.limits,
      render: config.render,
      store,
      media,
      variants,
      folders,
      organizations,
      usage,
      results: new ResultsService({
        store,
        media,
        folders,
        creation,
        logger,
        sourceCacheBytes: config.render.sourceCacheBytes,
      }),
      storedResults: new StoredResults({
        store,
        results: jobResults,
        usage,
        settings: config.results,
        logger,
      }),
      deletion,
      images: adapters.images,
      pdfs: adapters.pdfs,
      handoff,
      events,
      listeners: buildListeners(
        overrides.listeners ?? LISTENERS.filter((l) => l.enabled?.(config) ?? true),
      ),
      background,
      webhooks: new WebhookDeliveries({
        webhooks,
        events,
        rootFolderId: async (id) => (await organizations.findById(id))?.rootFolderId,
        queue: () =>
          (webhookQueue ??= new BullJobQueue(
            { redisUrl: config.redisUrl, queuePrefix: config.queuePrefix },
            logger,
          )),
        settings: config.webhooks,
        egress: config.egress,
        queuePrefix: config.queuePrefix,
        logger,
      }),
      scan,
      scans,
      directUploads,
      directCompletions: new DirectCompletionService({
        store,
        uploads: directUploads,
        creation,
        media,
        folders,
        limits: config.limits,
      }),
      imports: new ImportService({
        store,
        creation,
        folders,
        usage,
        media,
        egress: config.egress,
        limits: config.limits,
        timeoutMs: config.imports.timeoutMs,
        ...(metrics?.imported ? { metrics: { imported: metrics.imported } } : {}),
        logger,
      }),
      resumable: {
        expire: async () => {
          // A fail-fast connection: its first command waits until it is ready.
          resumableRedis ??= createRedis(redisUrl!, 'producer', logger);
          await waitForRedis(resumableRedis);
          const expired = await expireResumableUploads({
            redis: resumableRedis,
            store,
            queuePrefix: config.queuePrefix,
            logger,
          });
          metrics?.resumableExpiredCleaned?.(expired);
          return expired;
        },
      },
      close: async () => {
        await background.drain();
        resumableRedis?.disconnect();
        await webhookQueue?.close();
        await scanQueue?.close();
        handoffRedis?.disconnect();
        directRedis?.disconnect();
        invalidations.close();
        await connection.close();
      },
    };
  } catch (err) {
    await connection.close();
    throw err;
  }
}
