/**
 * The one place that picks the object store from the configuration: S3 when
 * S3_ENDPOINT is set, else the local file system under STORAGE_DIR (a
 * development default; production configuration requires S3_ENDPOINT).
 */
import type { Config } from '../config';
import type { Logger } from '../logger';
import { FsObjectStore } from './fs-object-store';
import type { ObjectStore } from './object-store';
import { createS3Client } from './s3-client';
import { S3ObjectStore } from './s3-object-store';

export function createObjectStore(config: Config, logger: Logger): ObjectStore {
  const s3 = config.s3;
  if (!s3) {
    return new FsObjectStore({
      root: config.storageDir,
      logger,
      bucket: config.bucket,
      publicEndpoint: config.storagePublicEndpoint,
    });
  }
  return new S3ObjectStore({
    client: createS3Client(s3),
    bucket: s3.bucket,
    region: s3.region,
    publicEndpoint: s3.publicEndpoint,
    logger,
    partSize: s3.partSize,
    queueSize: s3.uploadConcurrency,
    singlePutMax: s3.singlePutMax,
    streamParts: s3.streamParts,
    description: `S3 ${s3.endpoint} bucket ${s3.bucket}`,
    // Presigned URLs are signed for the host clients reach (S3_PUBLIC_ENDPOINT).
    ...(s3.publicEndpoint !== s3.endpoint.replace(/\/+$/, '')
      ? { presigner: createS3Client({ ...s3, endpoint: s3.publicEndpoint }) }
      : {}),
  });
}
