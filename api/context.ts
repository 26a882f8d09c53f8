/**
 * The API's composition root: connections, repositories and services built
 * from the configuration. main.ts, the CLI and the tests build it the same way.
 */
import type { Connection } from 'mongoose';
import type { Queue } from 'bullmq';
import { QUEUE_NAMES, type Config } from '@shared/config';
import type { ScanSettings } from '@shared/scan/scan';
import { connectMongo, pingMongo } from '@shared/db/connection';
import { createModels, syncIndexes, type Models } from '@shared/db/models';
import type { Logger } from '@shared/logger';
import { BackgroundTasks } from '@shared/background';
import type { EventOutbox } from '@shared/events/outbox';
import { MediaCreation } from '@shared/media-creation';
import { MediaDeletion } from '@shared/media-deletion';
import { MediaRestore } from '@shared/media-restore';
import { createApiMetrics, type ApiMetrics, type DependencyMetrics } from '@shared/metrics';
import { observeChecks, type ReadinessChecks } from '@shared/readiness';
import { createRepositories, type Repositories } from '@shared/repositories';
import type { MediaRepository } from '@shared/repositories/media.repository';
import { createObjectStore } from '@shared/storage/create-object-store';
import { observeObjectStore } from '@shared/storage/observed-object-store';
import type { ObjectStore } from '@shared/storage/object-store';
import { StoredResults } from '@shared/stored-results';
import { BullJobQueue } from '@shared/queue/job-queue';
import { JobHandoff } from '@shared/queue/handoff';
import { createRedis, waitForRedis, type RedisConnection } from '@shared/queue/redis';
import {
  InvalidationPublisher,
  subscribeInvalidations,
  type Invalidation,
} from '@shared/queue/invalidations';
import { AuthCache } from './domain/auth-cache';
import { RevalidationCache } from './domain/revalidation-cache';
import { DownloadService } from './services/download.service';
import { RenderService } from './services/render.service';
import { FoldersService } from './services/folders.service';
import { WebhooksService } from './services/webhooks.service';
import { IdempotencyService } from './services/idempotency.service';
import { IngestService } from './services/ingest.service';
import { JobsService } from './services/jobs.service';
import { MediaJobsService } from './services/media-jobs.service';
import { MediaService } from './services/media.service';
import { TrashService } from './services/trash.service';
import { OrganizationsService } from './services/organizations.service';
import { ArchiveService } from './services/archive.service';
import { SignedUrlService } from './services/signed-urls.service';
import { TokensService } from './services/tokens.service';
import { ResumableService } from './services/resumable.service';
import { DirectUploadService } from './services/direct-upload.service';
import { DirectUploads } from '@shared/uploads/direct-uploads';
import { UploadService } from './services/upload.service';

export interface DataContext {
  config: Config;
  logger: Logger;
  connection: Connection;
  models: Models;
  repositories: Repositories;
  tokens: TokensService;
  organizations: OrganizationsService;
  /** Tells the API replicas of token and organization changes (connects to Redis on first use). */
  invalidations: InvalidationPublisher;
  close(): Promise<void>;
}

export interface ApiContext extends DataContext {
  /** Every queue (the dashboard shows them when DASHBOARD_USER/PASSWORD are set). */
  queues: Queue[];
  store: ObjectStore;
  queue: BullJobQueue;
  /**
   * The API's own fail-fast Redis connection: where the per-token rate limit
   * counts and `Idempotency-Key` entries live; undefined without REDIS_URL.
   */
  redis: RedisConnection | undefined;
  /** `Idempotency-Key` entries (in Redis). */
  idempotency: IdempotencyService;
  media: MediaRepository;
  uploads: UploadService;
  /** Resumable (tus) uploads: their state and lock in Redis, their bytes in the store. */
  resumable: ResumableService;
  /** Direct-to-storage uploads (S3): presigned requests, then a completion that records. */
  directUploads: DirectUploadService;
  downloads: DownloadService;
  /** Renders (GET /media/render). */
  renders: RenderService;
  jobs: JobsService;
  mediaJobs: MediaJobsService;
  mediaService: MediaService;
  /** The trash: list, restore, purge now. */
  trash: TrashService;
  folders: FoldersService;
  /** Webhook endpoints, their delivery log, replays, rotations and test sends. */
  webhooks: WebhooksService;
  /** Signs URLs (POST /media/sign) and verifies signed requests. */
  signedUrls: SignedUrlService;
  /** ZIP archives of a selection (POST /media/archive). */
  archives: ArchiveService;
  /** HTTP latency and bytes stored, served on GET /metrics. */
  metrics: ApiMetrics;
  /** The dependencies GET /readyz checks (MongoDB, Redis, storage). */
  readiness: ReadinessChecks;
}

function requireSetting<T>(value: T | undefined, name: string): T {
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
}

/** MongoDB, repositories and the token/organization services (what the CLI needs). */
export async function createDataContext(
  config: Config,
  logger: Logger,
  /** Times MongoDB's commands (the API's; the CLI has none). */
  metrics?: DependencyMetrics,
  /** Tokens and organizations kept in this process (the API's; the CLI has none). */
  cache?: AuthCache,
  /** This process's caches told at once of what it publishes (the API's revalidations). */
  local: readonly { invalidate(message: Invalidation): void }[] = [],
): Promise<DataContext> {
  const connection = await connectMongo(
    requireSetting(config.mongodbUri, 'MONGODB_URI'),
    logger,
    metrics ? { metrics } : {},
  );
  const models = createModels(connection);
  await syncIndexes(models);
  const repositories = createRepositories(models, {
    usageBookingTtlMs: config.usageBookingTtlMs,
  });
  const invalidations = new InvalidationPublisher({
    redisUrl: config.redisUrl,
    queuePrefix: config.queuePrefix,
    logger,
    local,
  });
  const tokens = new TokensService(repositories.tokens, repositories.organizations, undefined, {
    cache,
    invalidations,
  });
  return {
    config,
    logger,
    connection,
    models,
    repositories,
    tokens,
    organizations: new OrganizationsService(repositories.organizations, tokens, {
      cache,
      invalidations,
    }),
    invalidations,
    close: async () => {
      invalidations.close();
      await connection.close();
    },
  };
}

export async function createApiContext(
  config: Config,
  logger: Logger,
  overrides: { store?: ObjectStore } = {},
): Promise<ApiContext> {
  // The queue depth gauge reads the queue (made below, timed by these metrics) on each scrape.
  const made: { queue?: BullJobQueue; events?: EventOutbox; resumable?: ResumableService } = {};
  const metrics = createApiMetrics({
    queueCounts: () => made.queue?.counts() ?? Promise.reject(new Error('no queue yet')),
    eventStats: () => made.events?.stats() ?? Promise.reject(new Error('no outbox yet')),
    resumableInProgress: () =>
      made.resumable?.inProgress() ?? Promise.reject(new Error('no resumable uploads yet')),
  });
  // Authentication reads from memory; changes arrive through Redis (api/domain/auth-cache.ts).
  const cache = config.authCacheMs > 0 ? new AuthCache(config.authCacheMs) : undefined;
  // Revalidations answered from memory; deleted keys' entries dropped through Redis too.
  const revalidations =
    config.authCacheMs > 0 && config.revalidationCacheEntries > 0
      ? new RevalidationCache(config.revalidationCacheEntries, config.authCacheMs)
      : undefined;
  const caches = [cache, revalidations].filter((c) => c !== undefined);
  const data = await createDataContext(config, logger, metrics, cache, caches);
  const subscription =
    caches.length > 0 && config.redisUrl
      ? subscribeInvalidations(config.redisUrl, config.queuePrefix, logger, {
          onMessage: (message) => caches.forEach((c) => c.invalidate(message)),
          onResync: () => caches.forEach((c) => c.clear()),
        })
      : undefined;
  try {
    // Every storage call is timed and traced (shared/storage/observed-object-store.ts).
    const store = observeObjectStore(overrides.store ?? createObjectStore(config, logger), metrics);
    if (!overrides.store) await store.init();
    const { media, usage } = data.repositories;
    const ingest = new IngestService({
      store,
      limits: {
        maxFileSize: config.limits.maxFileSize,
        acceptedTypes: config.limits.acceptedTypes,
      },
      logger,
    });
    const queue = new BullJobQueue(config, logger, metrics);
    made.queue = queue;
    await queue.init();
    const redis = config.redisUrl ? createRedis(config.redisUrl, 'producer', logger) : undefined;
    const jobs = new JobsService({
      queue,
      media,
      publicBaseUrl: config.publicBaseUrl,
      bucket: config.bucket,
      waitMs: config.jobWaitMs,
      storedResults: new StoredResults({
        store,
        results: data.repositories.jobResults,
        usage,
        settings: config.results,
        logger,
      }),
    });
    const folders = new FoldersService({
      folders: data.repositories.folders,
      media,
      jobs,
      events: data.repositories.events,
    });
    const events = data.repositories.events;
    made.events = events;
    const deletion = new MediaDeletion({
      media,
      usage,
      store,
      events,
      logger,
      invalidations: data.invalidations,
      trash: {
        retentionS: config.trash.retentionS,
        organizations: data.repositories.organizations,
      },
    });
    // Work off the answers' path (settling bookings, recording events): the shutdown waits for it.
    const background = new BackgroundTasks(logger);
    // Malware scanning (shared/scan/): the workers scan, the API serves what the policy allows.
    const scan: ScanSettings = {
      enabled: config.scan.clamdUrl !== undefined,
      defaultPolicy: config.scan.defaultPolicy,
    };
    const creation = new MediaCreation({
      media,
      usage,
      folders: data.repositories.folders,
      deletion,
      store,
      outbox: events,
      logger,
      background: (what, task) => background.run(what, task),
      scanning: scan.enabled,
    });
    const renders = new RenderService({
      scan,
      revalidations,
      variants: data.repositories.variants,
      jobs,
      store,
      settings: config.render,
      maxOutputPixels: config.limits.maxOutputPixels,
      usage,
      handoff: redis
        ? new JobHandoff({
            redis: () => redis,
            queuePrefix: config.queuePrefix,
            maxBytes: config.render.handoffMaxBytes,
            logger,
          })
        : undefined,
    });
    const signedUrls = new SignedUrlService({
      signing: config.urlSigning,
      publicBaseUrl: config.publicBaseUrl,
      media,
      // The signing organization read through the token cache: a signed 304 reads no MongoDB.
      organizations: cache
        ? {
            findById: (id: number) =>
              cache.organization(id, () => data.repositories.organizations.findById(id)),
          }
        : data.repositories.organizations,
      renders,
    });
    const uploads = new UploadService({
      ingest,
      folders,
      creation,
      usage,
      maxBase64Size: config.limits.maxBase64Size,
      onDuplicate: config.limits.onDuplicate,
    });
    // (Expired uploads are cleaned up by the workers' media.expire-resumable job.)
    const resumable = new ResumableService({
      redis: () => redis,
      store,
      uploads,
      ingest,
      folders,
      media: data.repositories.media,
      usage,
      config,
      partSize: config.s3?.partSize ?? 8 * 1024 * 1024,
      metrics,
      logger,
      background: (what, task) => background.run(what, task),
    });
    made.resumable = resumable;
    if (redis) {
      await waitForRedis(redis).catch(async (err: unknown) => {
        redis.disconnect();
        await queue.close();
        throw err;
      });
    }
    return {
      ...data,
      close: async () => {
        await background.drain();
        subscription?.close();
        redis?.disconnect();
        await queue.close();
        await data.close();
      },
      store,
      queue,
      redis,
      idempotency: new IdempotencyService({
        redis,
        keyPrefix: `${config.queuePrefix}:idempotency:`,
        jobs,
        logger,
      }),
      queues: QUEUE_NAMES.map((name) => queue.queue(name)),
      media,
      jobs,
      mediaJobs: new MediaJobsService({
        jobs,
        media,
        ingest,
        folders,
        limits: {
          maxMergeInputs: config.limits.maxMergeInputs,
          maxMergeBytes: config.limits.maxMergeBytes,
        },
        scan,
        egress: config.egress,
        onDuplicate: config.limits.onDuplicate,
      }),
      uploads,
      resumable,
      directUploads: new DirectUploadService({
        store,
        uploads: new DirectUploads({
          redis: () => redis,
          store,
          usage,
          queuePrefix: config.queuePrefix,
          logger,
        }),
        folders,
        media,
        usage,
        jobs,
        config,
        onDuplicate: config.limits.onDuplicate,
        metrics,
        logger,
      }),
      mediaService: new MediaService({
        media,
        folders: data.repositories.folders,
        usage,
        jobResults: data.repositories.jobResults,
        variants: data.repositories.variants,
        store,
        deletion,
      }),
      trash: new TrashService({
        media,
        deletion,
        restore: new MediaRestore({ media, folders: data.repositories.folders, events }),
      }),
      folders,
      webhooks: new WebhooksService({
        webhooks: data.repositories.webhooks,
        settings: config.webhooks,
        egress: config.egress,
        queue,
      }),
      downloads: new DownloadService({ media, store, scan, revalidations }),
      signedUrls,
      archives: new ArchiveService({
        media,
        folders: data.repositories.folders,
        store,
        scan,
        limits: config.limits.archive,
        signedUrls,
      }),
      renders,
      metrics,
      readiness: observeChecks(
        {
          mongodb: () => pingMongo(data.connection),
          redis: () => queue.ping(),
          storage: () => store.ping(),
        },
        metrics,
      ),
    };
  } catch (err) {
    subscription?.close();
    await data.close();
    throw err;
  }
}
