/**
 * The S3 client (`minio`), path-style, for MinIO, AWS S3 and OpenStack Swift's
 * s3api alike. `ensureBucket` creates the bucket on start when it is missing.
 */
import { Client } from 'minio';
import type { Logger } from '../logger';

export interface S3Settings {
  endpoint: string;
  region: string;
  accessKey: string;
  secretKey: string;
}

export function createS3Client(settings: S3Settings): Client {
  const url = new URL(settings.endpoint);
  const useSSL = url.protocol === 'https:';
  return new Client({
    endPoint: url.hostname,
    port: url.port ? Number(url.port) : useSSL ? 443 : 80,
    useSSL,
    accessKey: settings.accessKey,
    secretKey: settings.secretKey,
    region: settings.region,
    pathStyle: true,
  });
}

export async function ensureBucket(
  client: Client,
  bucket: string,
  region: string,
  logger: Logger,
): Promise<void> {
  if (await client.bucketExists(bucket)) return;
  try {
    await client.makeBucket(bucket, region);
    logger.info({ bucket }, 'created bucket');
  } catch (err) {
    // Another process (a second replica) may have created it in between.
    if (!(await client.bucketExists(bucket))) throw err;
  }
}
