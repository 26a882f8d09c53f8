/**
 * Which credentials the S3 client uses and how it addresses objects, without
 * AWS: static keys (with a session token, sent as x-amz-security-token, seen
 * by a local HTTP server standing in for S3), a web identity through minio's
 * IamAwsProvider, path-style or virtual-hosted addresses.
 */
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { IamAwsProvider, type Client } from 'minio';
import { createS3Client, s3CredentialSource } from '../../shared/storage/s3-client';

/** What the client's protected state says (minio keeps these on the instance). */
const internals = (client: Client) =>
  client as unknown as {
    credentialsProvider?: unknown;
    accessKey: string;
    sessionToken?: string;
    getRequestOptions(opts: { method: string; bucketName?: string; objectName?: string }): {
      host: string;
      path: string;
    };
  };

describe('S3 credentials', () => {
  it('chooses static keys over a web identity, and a web identity without keys', () => {
    const webIdentity = { tokenFile: '/var/run/secrets/token', roleArn: 'arn:aws:iam::1:role/r' };
    const base = { endpoint: 'https://s3.example.com', region: 'eu-west-1' };
    expect(s3CredentialSource({ ...base, accessKey: 'a', secretKey: 's', webIdentity })).toBe(
      'static',
    );
    expect(s3CredentialSource({ ...base, webIdentity })).toBe('web-identity');
    expect(() => s3CredentialSource(base)).toThrow(/S3_ACCESS_KEY/);

    const irsa = internals(createS3Client({ ...base, webIdentity }));
    expect(irsa.credentialsProvider).toBeInstanceOf(IamAwsProvider);
    const keys = internals(
      createS3Client({ ...base, accessKey: 'a', secretKey: 's', webIdentity }),
    );
    expect(keys.credentialsProvider).toBeUndefined();
    expect(keys.accessKey).toBe('a');
  });

  it('signs with static keys and sends the session token of temporary ones', async () => {
    const seen: IncomingHttpHeaders[] = [];
    const server = createServer((req, res) => {
      seen.push(req.headers);
      res.writeHead(200).end();
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const client = createS3Client({
        endpoint,
        region: 'us-east-1',
        accessKey: 'AKIDEXAMPLE',
        secretKey: 'secret',
        sessionToken: 'FwoGZXIvYXdzEXAMPLE',
      });
      expect(await client.bucketExists('media')).toBe(true);
      const plain = createS3Client({
        endpoint,
        region: 'us-east-1',
        accessKey: 'A',
        secretKey: 'S',
      });
      await plain.bucketExists('media');
    } finally {
      server.close();
    }
    expect(seen[0]).toMatchObject({
      'x-amz-security-token': 'FwoGZXIvYXdzEXAMPLE',
      authorization: expect.stringMatching(/^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\//) as string,
    });
    expect(seen[1]!['x-amz-security-token']).toBeUndefined();
  });
});

describe('S3 addressing', () => {
  const settings = {
    endpoint: 'https://objects.example.com',
    region: 'us-east-1',
    accessKey: 'a',
    secretKey: 's',
  };
  const request = (pathStyle?: boolean) =>
    internals(createS3Client({ ...settings, pathStyle })).getRequestOptions({
      method: 'GET',
      bucketName: 'media',
      objectName: 'org/photo.jpg',
    });

  it('is path-style by default', () => {
    expect(request()).toMatchObject({ host: 'objects.example.com', path: '/media/org/photo.jpg' });
    expect(request(true)).toMatchObject({
      host: 'objects.example.com',
      path: '/media/org/photo.jpg',
    });
  });

  it('is virtual-hosted with S3_PATH_STYLE=false', () => {
    expect(request(false)).toMatchObject({
      host: 'media.objects.example.com',
      path: '/org/photo.jpg',
    });
  });
});
