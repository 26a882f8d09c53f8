/**
 * The S3 client (`minio`), for MinIO, AWS S3 and OpenStack Swift's s3api
 * alike. `ensureBucket` creates the bucket on start when it is missing.
 *
 * Credentials, in this order (docs/operations.md, "S3 credentials"):
 * 1. static keys, S3_ACCESS_KEY and S3_SECRET_KEY, with S3_SESSION_TOKEN when
 *    they are temporary ones;
 * 2. a web identity (EKS IAM roles for service accounts): the token file
 *    Kubernetes projects (AWS_WEB_IDENTITY_TOKEN_FILE) exchanged with STS for
 *    the role AWS_ROLE_ARN, through minio's own `IamAwsProvider`, which reads
 *    those variables (and AWS_REGION, AWS_ROLE_SESSION_NAME) from the process
 *    environment, re-reads the token file at each exchange, and exchanges
 *    again 10 s before the credentials expire.
 *
 * Addresses are path-style (`<endpoint>/<bucket>/<key>`) unless S3_PATH_STYLE
 * is false (virtual-hosted: `<bucket>.<endpoint>/<key>`). minio uses
 * virtual-hosted addresses for amazonaws.com endpoints whatever the setting,
 * and path-style for a bucket name with a dot over https.
 */
import { Client, IamAwsProvider } from 'minio';
import type { Logger } from '../logger';

export interface S3Settings {
  endpoint: string;
  region: string;
  /** Static keys; when unset, `webIdentity` gives the credentials. */
  accessKey?: string;
  secretKey?: string;
  /** The session token of temporary static keys (S3_SESSION_TOKEN). */
  sessionToken?: string;
  webIdentity?: { tokenFile: string; roleArn: string };
  /** Default true. */
  pathStyle?: boolean;
}

export type S3CredentialSource = 'static' | 'web-identity';

/** Where the client's credentials come from (static keys win over a web identity). */
export function s3CredentialSource(settings: S3Settings): S3CredentialSource {
  if (settings.accessKey && settings.secretKey) return 'static';
  if (settings.webIdentity) return 'web-identity';
  throw new Error('S3 needs S3_ACCESS_KEY and S3_SECRET_KEY, or a web identity');
}

export function createS3Client(settings: S3Settings): Client {
  const url = new URL(settings.endpoint);
  const useSSL = url.protocol === 'https:';
  const common = {
    endPoint: url.hostname,
    port: url.port ? Number(url.port) : useSSL ? 443 : 80,
    useSSL,
    region: settings.region,
    pathStyle: settings.pathStyle ?? true,
  };
  if (s3CredentialSource(settings) === 'static') {
    return new Client({
      ...common,
      accessKey: settings.accessKey,
      secretKey: settings.secretKey,
      ...(settings.sessionToken ? { sessionToken: settings.sessionToken } : {}),
    });
  }
  return new Client({ ...common, credentialsProvider: new IamAwsProvider({}) });
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
