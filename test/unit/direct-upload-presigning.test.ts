/**
 * Direct-to-storage uploads' presigned requests, signed offline by the S3
 * store (no request is sent): the POST policy holds the client to the key,
 * the exact size and the type (what AWS S3 and MinIO enforce; the harness's
 * Swift takes no POST policy, so the integration tests use PUT and parts);
 * presigned URLs point at the public endpoint; the part size grows past
 * 10,000 parts.
 */
import { Client } from 'minio';
import { MAX_PARTS, partSizeFor } from '../../api/services/direct-upload.service';
import { createLogger } from '../../shared/logger';
import { S3ObjectStore } from '../../shared/storage/s3-object-store';

const MiB = 1024 * 1024;
const client = (endPoint: string) =>
  new Client({
    endPoint,
    port: 443,
    useSSL: true,
    region: 'us-east-1',
    accessKey: 'AKIAEXAMPLE',
    secretKey: 'secret-example',
    pathStyle: true,
  });
const store = new S3ObjectStore({
  client: client('s3.internal'),
  presigner: client('uploads.example.com'),
  bucket: 'media',
  region: 'us-east-1',
  publicEndpoint: 'https://uploads.example.com',
  logger: createLogger({ level: 'silent' }),
});

describe('presigned requests of direct uploads', () => {
  it('a POST policy for exactly the key, the size and the type, at the public endpoint', async () => {
    const expiresAt = new Date(Date.now() + 3_600_000);
    const { url, fields } = await store.presigned.presignPost('acme/.tmp/direct/abc', {
      contentType: 'image/jpeg',
      bytes: 1234,
      expiresAt,
    });
    expect(url).toBe('https://uploads.example.com/media');
    expect(fields).toMatchObject({ key: 'acme/.tmp/direct/abc', 'Content-Type': 'image/jpeg' });
    const policy = JSON.parse(Buffer.from(fields.policy!, 'base64').toString()) as {
      expiration: string;
      conditions: unknown[];
    };
    expect(policy.conditions).toEqual(
      expect.arrayContaining([
        ['eq', '$key', 'acme/.tmp/direct/abc'],
        ['eq', '$Content-Type', 'image/jpeg'],
        ['content-length-range', 1234, 1234],
      ]),
    );
    expect(new Date(policy.expiration).getTime()).toBe(expiresAt.getTime());
  });

  it('presigned PUT and UploadPart URLs name the key at the public endpoint and expire', async () => {
    const put = new URL(await store.presigned.presignPut('acme/.tmp/direct/abc', 600));
    expect(put.host).toBe('uploads.example.com');
    expect(put.pathname).toBe('/media/acme/.tmp/direct/abc');
    expect(put.searchParams.get('X-Amz-Expires')).toBe('600');
    const part = new URL(await store.presigned.presignPart('acme/.tmp/direct/abc', 'up-1', 3, 600));
    expect(part.searchParams.get('uploadId')).toBe('up-1');
    expect(part.searchParams.get('partNumber')).toBe('3');
  });

  it('parts: the setting, grown in whole MiB past 10,000 parts', () => {
    expect(partSizeFor(100 * MiB, 16 * MiB)).toBe(16 * MiB);
    expect(partSizeFor(16 * MiB * MAX_PARTS, 16 * MiB)).toBe(16 * MiB);
    const grown = partSizeFor(16 * MiB * MAX_PARTS + 1, 16 * MiB);
    expect(grown).toBe(17 * MiB);
    expect(Math.ceil((16 * MiB * MAX_PARTS + 1) / grown)).toBeLessThanOrEqual(MAX_PARTS);
  });
});
