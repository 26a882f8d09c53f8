/**
 * Uploads that fail half-way leave nothing behind: no record, no object, no
 * open multipart upload. Faults are real: a client that goes away, a limit
 * that trips, and storage or MongoDB that stop answering (cut with a TCP
 * proxy in front of the real service).
 */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { request } from 'node:http';
import {
  startApi,
  startApiWithProxiedStorage,
  type TestApi,
  type TestOrg,
} from '../../support/api';
import { mongoUriFor } from '../../support/context';
import { fixture, form } from '../../support/files';
import { hostPortOf, startTcpProxy } from '../../support/tcp-proxy';
import { eventually } from '../../support/eventually';

const MB = 1024 * 1024;
const jpegHead = fixture('Canon_40D.jpg');

/**
 * Starts a multipart upload of a JPEG-looking file of `total` bytes and writes
 * `sendFirst` bytes of it; the caller decides what happens next.
 */
function streamingUpload(api: TestApi, org: TestOrg, total: number) {
  const boundary = `----test${randomBytes(8).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jpg"\r\nContent-Type: image/jpeg\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const { port } = new URL(api.url);
  const req = request({
    host: '127.0.0.1',
    port,
    method: 'POST',
    path: '/media/upload',
    headers: {
      ...org.auth,
      'Content-Type': `multipart/form-data; boundary=${boundary}`,
      'Content-Length': String(head.length + total + tail.length),
    },
  });
  const response = new Promise<{ status: number; body: { error?: string } }>((resolve, reject) => {
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          body: JSON.parse(Buffer.concat(chunks).toString() || '{}') as { error?: string },
        }),
      );
    });
    req.on('error', reject);
  });
  response.catch(() => undefined);
  // Writing stops, as a real client's does, once the answer has come or the
  // connection is gone: the server answers an early 413 and reads on for only
  // LINGER_MS, and a socket it then closes never emits 'drain' again.
  let stopped = false;
  const stop = new Promise<void>((resolve) => {
    const settle = () => {
      stopped = true;
      resolve();
    };
    req.once('close', settle);
    req.once('error', settle);
    response.then(settle, settle);
  });
  req.write(head);
  let sent = 0;
  const chunk = randomBytes(MB);
  const write = async (bytes: number) => {
    while (sent < bytes && !stopped) {
      const piece = sent === 0 ? Buffer.concat([jpegHead, chunk.subarray(jpegHead.length)]) : chunk;
      const n = Math.min(piece.length, bytes - sent);
      if (!req.write(piece.subarray(0, n))) await Promise.race([once(req, 'drain'), stop]);
      sent += n;
    }
  };
  return {
    req,
    response,
    sendUntil: write,
    finish: async () => {
      await write(total);
      if (!stopped) req.end(tail);
      return response;
    },
  };
}

describe('an upload that fails half-way', () => {
  let api: TestApi;
  let org: TestOrg;

  beforeAll(async () => {
    api = await startApi('partial', { env: { MAX_FILE_SIZE: String(20 * MB) } });
    org = await api.createOrg('half');
  });
  afterAll(() => api.close());

  async function expectNothingLeft() {
    expect(await api.ctx.models.Media.countDocuments({ organizationId: org.organization.id })).toBe(
      0,
    );
    expect(await api.objectKeys('half/')).toEqual([]);
    expect(await api.ctx.store.listIncompleteUploads('half/')).toEqual([]);
  }

  it('leaves nothing when the client disconnects half-way through 30 MB', async () => {
    const upload = streamingUpload(api, org, 30 * MB);
    // Past S3_SINGLE_PUT_MAX (16 MiB): the bytes are flowing into a multipart upload in the bucket...
    await upload.sendUntil(20 * MB);
    await eventually(async () =>
      expect(await api.ctx.store.listIncompleteUploads('half/')).toHaveLength(1),
    );
    // ...when the client goes away.
    upload.req.destroy();
    await eventually(expectNothingLeft);
  });

  it('leaves nothing when the client disconnects before its body reached storage (read ahead for one PUT)', async () => {
    const upload = streamingUpload(api, org, 14 * MB);
    await upload.sendUntil(12 * MB);
    upload.req.destroy();
    await eventually(expectNothingLeft);
  });

  it('answers 413 when the size limit trips half-way, and leaves nothing', async () => {
    const upload = streamingUpload(api, org, 30 * MB);
    const result = await upload.finish().catch(() => upload.response);
    expect(result.status).toBe(413);
    expect(result.body.error).toBe('FILE_TOO_LARGE');
    await eventually(expectNothingLeft);
  });
});

describe('a dependency that stops answering', () => {
  it('storage refusing a write: 503, and no record', async () => {
    const { api, proxy, close } = await startApiWithProxiedStorage('s3down');
    try {
      const org = await api.createOrg('nos3');
      await proxy.cut();
      const res = await fetch(`${api.url}/media/upload`, {
        method: 'POST',
        headers: org.auth,
        body: form([['file', jpegHead, 'a.jpg']]),
      });
      expect(res.status).toBe(503);
      expect(await res.json()).toMatchObject({
        error: 'DEPENDENCY_UNAVAILABLE',
        dependency: 'storage',
      });
      expect(res.headers.get('retry-after')).toBeTruthy();
      expect(await api.ctx.models.Media.countDocuments()).toBe(0);
    } finally {
      await close();
    }
  });

  it('MongoDB refusing the record after the object was written: 503, and the object is removed', async () => {
    const dbName = `t_mongodown_${randomBytes(4).toString('hex')}`;
    const direct = mongoUriFor(dbName);
    const { host, port } = hostPortOf(direct);
    const proxy = await startTcpProxy(host, port);
    // S3_SINGLE_PUT_MAX=0: a body past one part goes as a multipart upload at once.
    const api = await startApi('mongodown', {
      env: { MONGODB_URI: proxy.via(direct), S3_SINGLE_PUT_MAX: '0' },
    });
    try {
      const org = await api.createOrg('nomongo');
      const upload = streamingUpload(api, org, 12 * MB);
      await upload.sendUntil(10 * MB);
      await eventually(async () =>
        expect(await api.ctx.store.listIncompleteUploads('nomongo/')).toHaveLength(1),
      );
      await proxy.cut();
      const result = await upload.finish();
      expect(result.status).toBe(503);
      expect(result.body).toMatchObject({ error: 'DEPENDENCY_UNAVAILABLE', dependency: 'MongoDB' });
      expect(await api.objectKeys('nomongo/')).toEqual([]);
      expect(await api.ctx.store.listIncompleteUploads('nomongo/')).toEqual([]);
    } finally {
      await proxy.restore();
      await api.close();
      await proxy.close();
    }
    // Looking past the proxy: no record was written.
    const mongoose = await import('mongoose');
    const conn = await mongoose.createConnection(direct).asPromise();
    try {
      expect(await conn.collection('media').countDocuments()).toBe(0);
    } finally {
      await conn.dropDatabase();
      await conn.close();
    }
  });
});
