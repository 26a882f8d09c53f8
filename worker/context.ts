/**
 * The worker's composition root: MongoDB, object storage and the repositories
 * the processors need, built from the configuration.
 */
import type { Connection } from 'mongoose';
import type { Config } from '@shared/config';
import type { JobPayloads } from '@shared/jobs';
import { connectMongo } from '@shared/db/connection';
import { createModels, syncIndexes, type Models } from '@shared/db/models';
import type { Logger } from '@shared/logger';
import type { DependencyMetrics } from '@shared/metrics';
import { CountersRepository } from '@shared/repositories/counters.repository';
import { FoldersRepository } from '@shared/repositories/folders.repository';
import { MediaRepository } from '@shared/repositories/media.repository';
import { OrganizationsRepository } from '@shared/repositories/organizations.repository';
import type { ObjectStore } from '@shared/storage/object-store';
import { createObjectStore } from '@shared/storage/create-object-store';
import { observeObjectStore } from '@shared/storage/observed-object-store';
import { ResultsService } from './services/results.service';

/** Image work (over sharp): what the image processors need. */
export interface ImageOps {
  readMetadata(input: Buffer): Promise<Record<string, unknown>>;
  convert(
    input: Buffer,
    format: JobPayloads['image.convert']['format'],
    options: { quality?: number },
  ): Promise<{ data: Buffer; mime: string; ext: string }>;
}

/** PDF work (over pdf-lib and qpdf): what the merge processor needs. */
export interface PdfOps {
  merge(inputs: { name: string; data: Buffer }[]): Promise<{ data: Buffer; pages: number }>;
}

export interface WorkerContext {
  config: Config;
  logger: Logger;
  connection: Connection;
  models: Models;
  store: ObjectStore;
  media: MediaRepository;
  folders: FoldersRepository;
  organizations: OrganizationsRepository;
  results: ResultsService;
  images: ImageOps;
  pdfs: PdfOps;
  close(): Promise<void>;
}

export async function createWorkerContext(
  config: Config,
  logger: Logger,
  adapters: { images: ImageOps; pdfs: PdfOps },
  overrides: {
    store?: ObjectStore;
    /** Times MongoDB commands and storage calls (the worker's metrics). */
    metrics?: DependencyMetrics;
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
    const counters = new CountersRepository(models);
    const media = new MediaRepository(models, counters);
    const folders = new FoldersRepository(models, counters);
    const organizations = new OrganizationsRepository(models, counters);
    return {
      config,
      logger,
      connection,
      models,
      store,
      media,
      folders,
      organizations,
      results: new ResultsService({ store, media, folders, logger }),
      images: adapters.images,
      pdfs: adapters.pdfs,
      close: () => connection.close(),
    };
  } catch (err) {
    await connection.close();
    throw err;
  }
}
