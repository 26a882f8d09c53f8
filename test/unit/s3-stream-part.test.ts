/**
 * A multipart upload's part streamed to S3 while its bytes come
 * (S3ObjectStore.multipart.streamPart), against a stand-in for the store's
 * HTTP side on a local port (the real store's behaviour, Swift's s3api, is
 * covered by test/integration/api/resumable.test.ts): the part goes to a
 * presigned URL (its payload unsigned) with its Content-Length; over HTTP its
 * MD5 is compared with the ETag answered; a store whose ETag is not the MD5
 * gets the part again, signed, and every later part signed; a body stopped
 * stops the PUT; S3_STREAM_PARTS=false offers no streamed parts.
 */
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import { createLogger } from '../../shared/logger';
import { createS3Client } from '../../shared/storage/s3-client';
import { S3ObjectStore } from '../../shared/storage/s3-object-store';

const md5 = (data: Buffer) => createHash('md5').update(data).digest('hex');

interface Seen {
  signed: 'presigned' | 'header';
  payload: string | undefined;
  length: number;
  contentLength: string | undefined;
  complete: boolean;
}

/** The store's HTTP side: answers a part's PUT with `etagOf(body)`. */
async function fakeStore(etagOf: (body: Buffer) => string, streamParts?: boolean) {
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    const query = new URL(req.url!, 'http://x').searchParams;
    const entry: Seen = {
      signed: query.has('X-Amz-Signature') ? 'presigned' : 'header',
      payload: req.headers['x-amz-content-sha256'] as string | undefined,
      length: 0,
      contentLength: req.headers['content-length'],
      complete: false,
    };
    seen.push(entry);
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      entry.length = body.length;
      entry.complete = true;
      res.writeHead(200, { ETag: `"${etagOf(body)}"` }).end();
    });
    req.on('error', () => undefined);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  const store = new S3ObjectStore({
    client: createS3Client({
      endpoint: `http://127.0.0.1:${port}`,
      region: 'us-east-1',
      accessKey: 'AKIAEXAMPLE',
      secretKey: 'secret-example',
      bucket: 'media',
    } as Parameters<typeof createS3Client>[0]),
    bucket: 'media',
    region: 'us-east-1',
    publicEndpoint: `http://127.0.0.1:${port}`,
    logger: createLogger({ level: 'silent' }),
    streamParts,
  });
  return {
    seen,
    store,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Streams `data` as part `n` in 64 KiB writes, as a PATCH body would come. */
async function stream(store: S3ObjectStore, n: number, data: Buffer) {
  const body = new PassThrough();
  const sent = store.multipart.streamPart!('acme/file.pdf', 'upload-1', n, data.length, body, data);
  for (let at = 0; at < data.length; at += 65_536) {
    if (!body.write(data.subarray(at, at + 65_536))) await once(body, 'drain');
  }
  body.end();
  return sent;
}

let stores: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(stores.map((s) => s.close()));
  stores = [];
});

it('sends the part to a presigned URL with its length, and answers the ETag when it is the MD5', async () => {
  const fake = await fakeStore(md5);
  stores.push(fake);
  const data = randomBytes(1024 * 1024 + 7);
  await expect(stream(fake.store, 1, data)).resolves.toBe(md5(data));
  expect(fake.seen).toEqual([
    {
      signed: 'presigned',
      payload: undefined,
      length: data.length,
      contentLength: String(data.length),
      complete: true,
    },
  ]);
});

it('sends the part again, signed, when the ETag is not its MD5; and every later part signed', async () => {
  const fake = await fakeStore((body) => `kms-${body.length}`);
  stores.push(fake);
  const data = randomBytes(300_000);
  await expect(stream(fake.store, 1, data)).resolves.toBe(`kms-${data.length}`);
  expect(fake.seen.map((s) => s.signed)).toEqual(['presigned', 'header']);
  // Signed: the payload's SHA-256 in the signed headers, the bytes the same.
  expect(fake.seen[1]).toMatchObject({
    payload: createHash('sha256').update(data).digest('hex'),
    length: data.length,
  });
  await expect(stream(fake.store, 2, data)).resolves.toBe(`kms-${data.length}`);
  expect(fake.seen.map((s) => s.signed)).toEqual(['presigned', 'header', 'header']);
});

it('stops the PUT when its body is stopped: the store never gets the whole part', async () => {
  const fake = await fakeStore(md5);
  stores.push(fake);
  const data = randomBytes(1024 * 1024);
  const body = new PassThrough();
  body.on('error', () => undefined);
  const sent = fake.store.multipart.streamPart!(
    'acme/file.pdf',
    'upload-1',
    1,
    data.length,
    body,
    data,
  );
  body.write(data.subarray(0, 100_000));
  await new Promise((resolve) => setTimeout(resolve, 50));
  body.destroy(new Error('the client went away'));
  await expect(sent).rejects.toThrow();
  expect(fake.seen).toHaveLength(1);
  expect(fake.seen[0]!.complete).toBe(false);
});

it('offers no streamed parts with S3_STREAM_PARTS=false: each part is sent signed once whole', async () => {
  const fake = await fakeStore(md5, false);
  stores.push(fake);
  expect(fake.store.multipart.streamPart).toBeUndefined();
  const data = randomBytes(200_000);
  await expect(fake.store.multipart.putPart('acme/file.pdf', 'upload-1', 1, data)).resolves.toBe(
    md5(data),
  );
  expect(fake.seen.map((s) => s.signed)).toEqual(['header']);
});
