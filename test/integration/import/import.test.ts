/**
 * URL imports (POST /media/upload/url) through the real API, worker, Redis,
 * S3 and MongoDB. The "public" server is a raw TCP server on a loopback
 * address opened on purpose through the allowlist (EGRESS_ALLOWLIST's CIDR
 * 127.0.0.3/32, EGRESS_ALLOWED_PORTS its port), not a network namespace: it
 * writes each answer byte by byte as the test scripts it (lying
 * Content-Length, chunked, slow, gzip). A sentinel listener on 127.0.0.1 and
 * [::1] (where every refused form points) counts its connections and must
 * count none. DNS rebinding is held by test/integration/egress (an injected
 * resolver; the import reads through the same guard).
 */
import { once } from 'node:events';
import net, { type AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

const SOURCE_IP = '127.0.0.3';
const MAX_FILE_SIZE = 64 * 1024;
const JPEG = fixture('Canon_40D.jpg'); // 7,958 bytes
const BIG_JPEG = fixture('orientation-landscape_6.jpg'); // 137,628 bytes: over MAX_FILE_SIZE

let api: TestApi;
let worker: TestWorker;
let source: net.Server;
let sentinel4: net.Server;
let sentinel6: net.Server | undefined;
let sentinelPort: number;
let sentinelConnections = 0;
let base: string;
let org: TestOrg;
/** Paths the source server was asked for. */
const asked: string[] = [];

type Script = (socket: net.Socket) => void;
const head = (status: string, headers: Record<string, string | number>) =>
  `HTTP/1.1 ${status}\r\n${Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('')}connection: close\r\n\r\n`;

/** What the source answers, by path. */
const scripts: Record<string, Script> = {
  '/photo.jpg': (s) =>
    s.end(Buffer.concat([Buffer.from(head('200 OK', { 'content-length': JPEG.length })), JPEG])),
  '/chunked.jpg': (s) => {
    s.write(head('200 OK', { 'transfer-encoding': 'chunked', 'content-type': 'image/jpeg' }));
    for (let i = 0; i < JPEG.length; i += 1000) {
      const part = JPEG.subarray(i, i + 1000);
      s.write(`${part.length.toString(16)}\r\n`);
      s.write(part);
      s.write('\r\n');
    }
    s.end('0\r\n\r\n');
  },
  '/chunked-big.jpg': (s) => {
    s.write(head('200 OK', { 'transfer-encoding': 'chunked' }));
    for (let i = 0; i < BIG_JPEG.length; i += 8192) {
      const part = BIG_JPEG.subarray(i, i + 8192);
      s.write(
        Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from('\r\n')]),
      );
    }
    s.end('0\r\n\r\n');
  },
  // Says 10 MB (over MAX_FILE_SIZE), sends a small valid JPEG and closes.
  '/claims-more-huge': (s) =>
    s.end(Buffer.concat([Buffer.from(head('200 OK', { 'content-length': 10_000_000 })), JPEG])),
  // Says 20,000 bytes (under the limit), sends the 7,958 of a JPEG and closes: cut short.
  '/claims-more': (s) =>
    s.end(Buffer.concat([Buffer.from(head('200 OK', { 'content-length': 20_000 })), JPEG])),
  // Says 2,000 bytes, sends a JPEG then more than MAX_FILE_SIZE past it.
  '/claims-fewer': (s) =>
    s.end(
      Buffer.concat([Buffer.from(head('200 OK', { 'content-length': 2_000 })), JPEG, BIG_JPEG]),
    ),
  // A JPEG's first bytes, then one byte a second: cut at IMPORT_TIMEOUT_MS.
  '/slow.jpg': (s) => {
    s.write(head('200 OK', { 'content-length': JPEG.length }));
    s.write(JPEG.subarray(0, 4200));
    let i = 4200;
    const timer = setInterval(() => {
      if (s.destroyed || i >= JPEG.length) return clearInterval(timer);
      s.write(JPEG.subarray(i, ++i));
    }, 1000);
    s.on('close', () => clearInterval(timer));
  },
  // 50 MB of zeros gzipped (~50 KB), labelled a PNG, sent gzip-encoded although identity was asked.
  '/bomb.png': (s) => {
    const bomb = gzipSync(Buffer.alloc(50 * 1024 * 1024), { level: 9 });
    s.end(
      Buffer.concat([
        Buffer.from(
          head('200 OK', {
            'content-type': 'image/png',
            'content-encoding': 'gzip',
            'content-length': bomb.length,
          }),
        ),
        bomb,
      ]),
    );
  },
  '/page.png': (s) => {
    const html = Buffer.from(
      `<!doctype html><html><body>${'<p>hello</p>'.repeat(500)}</body></html>`,
    );
    s.end(
      Buffer.concat([
        Buffer.from(head('200 OK', { 'content-type': 'image/png', 'content-length': html.length })),
        html,
      ]),
    );
  },
  '/missing.jpg': (s) => s.end(head('404 Not Found', { 'content-length': 0 })),
};

function listen(server: net.Server, host: string, port = 0): Promise<number> {
  server.listen(port, host);
  return once(server, 'listening').then(() => (server.address() as AddressInfo).port);
}

beforeAll(async () => {
  const count = (s: net.Socket) => {
    s.on('error', () => undefined);
    sentinelConnections++;
    s.destroy();
  };
  sentinel4 = net.createServer(count);
  sentinelPort = await listen(sentinel4, '127.0.0.1');
  sentinel6 = net.createServer(count);
  try {
    await listen(sentinel6, '::1', sentinelPort);
  } catch {
    sentinel6 = undefined; // no IPv6 loopback here: the v4 sentinel still counts
  }
  source = net.createServer((s) => {
    s.on('error', () => undefined);
    let request = '';
    const onData = (chunk: Buffer) => {
      request += chunk.toString('latin1');
      if (!request.includes('\r\n\r\n')) return;
      s.off('data', onData);
      const path = request.split(' ')[1]!;
      const url = new URL(path, 'http://x');
      asked.push(path);
      const to = url.searchParams.get('to');
      if (url.pathname === '/redirect' && to) {
        s.end(head('302 Found', { location: to, 'content-length': 0 }));
        return;
      }
      (scripts[url.pathname] ?? scripts['/missing.jpg']!)(s);
    };
    s.on('data', onData);
  });
  const port = await listen(source, SOURCE_IP);
  base = `http://${SOURCE_IP}:${port}`;
  api = await startApi('import', {
    env: {
      RATE_LIMIT_MAX: '0',
      EGRESS_ALLOWLIST: `${SOURCE_IP}/32`,
      EGRESS_ALLOWED_PORTS: `${port},${sentinelPort}`,
      MAX_FILE_SIZE: String(MAX_FILE_SIZE),
      IMPORT_TIMEOUT_MS: '3000',
      JOB_WAIT_MS: '20000',
    },
  });
  worker = await startWorker(api.env.env);
  org = await api.createOrg();
}, 60_000);

afterAll(async () => {
  for (const s of [source, sentinel4, sentinel6]) s?.close();
  await worker?.close();
  await api?.close();
});

interface Answer {
  status: number;
  headers: Headers;
  body: {
    error?: string;
    message?: string;
    details?: Record<string, unknown>[];
    data: Record<string, unknown> & { id: number; key: string; jobId?: string };
  };
}

async function importUrl(
  body: Record<string, unknown>,
  options: { auth?: { Authorization: string }; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const res = await fetch(`${api.url}/media/upload/url`, {
    method: 'POST',
    headers: {
      ...(options.auth ?? org.auth),
      ...options.headers,
      'content-type': 'application/json',
    },
    body: JSON.stringify(body),
  });
  const answer = {
    status: res.status,
    headers: res.headers,
    body: (await res.json()) as Answer['body'],
  };
  expectMatchesSpec('POST', '/media/upload/url', res.status, answer.body, res.headers);
  return answer;
}

/** What the organization holds: its objects, records and usage. */
async function holdings(of: TestOrg = org) {
  const id = of.organization.id;
  return {
    objects: await api.objectKeys(`${of.organization.slug}/`),
    records: await api.ctx.models.Media.countDocuments({ organizationId: id }),
    usage: await api.ctx.repositories.usage.get(id),
  };
}

describe('imports that succeed', () => {
  it('stores the bytes of the source, read back equal; sourceUrl without its query', async () => {
    const before = await holdings();
    const answer = await importUrl({ url: `${base}/photo.jpg?sig=secret#frag` });
    expect(answer.status).toBe(201);
    expect(answer.body.data).toMatchObject({
      name: 'photo.jpg',
      mimetype: 'image/jpeg',
      bytes: JPEG.length,
      sourceUrl: `${base}/photo.jpg`,
      folderId: org.organization.rootFolderId,
    });
    const download = await fetch(`${api.url}/media/download?media=${answer.body.data.key}`, {
      headers: org.auth,
    });
    expect(download.status).toBe(200);
    expect(Buffer.from(await download.arrayBuffer()).equals(JPEG)).toBe(true);
    expect((await holdings()).usage).toEqual({
      bytes: before.usage.bytes + JPEG.length,
      files: before.usage.files + 1,
    });
    // media.created followed: its listeners ran (the ThumbHash is set).
    await eventually(async () => {
      const record = await fetch(`${api.url}/media/${answer.body.data.id}`, { headers: org.auth });
      expect(((await record.json()) as Answer['body']).data.thumbhash).toEqual(expect.any(String));
    }, 20_000);
  });

  it('a chunked answer without Content-Length, into a folder by name, with a name', async () => {
    const answer = await importUrl({
      url: `${base}/chunked.jpg`,
      folder: 'Imports',
      name: 'mine.jpg',
    });
    expect(answer.status).toBe(201);
    expect(answer.body.data).toMatchObject({ name: 'mine.jpg', bytes: JPEG.length });
    expect(answer.body.data.key).toMatch(new RegExp(`^${org.organization.slug}/imports/mine-`));
    const download = await fetch(`${api.url}/media/download?media=${answer.body.data.key}`, {
      headers: org.auth,
    });
    expect(Buffer.from(await download.arrayBuffer()).equals(JPEG)).toBe(true);
  });

  it('Idempotency-Key: a repeat gets the same record; onDuplicate reject and reuse', async () => {
    const own = await api.createOrg();
    const url = `${base}/photo.jpg`;
    const headers = { 'idempotency-key': 'import-once' };
    const first = await importUrl({ url }, { auth: own.auth, headers });
    const again = await importUrl({ url }, { auth: own.auth, headers });
    expect(first.status).toBe(201);
    expect(again.body.data.id).toBe(first.body.data.id);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    const rejected = await importUrl({ url, onDuplicate: 'reject' }, { auth: own.auth });
    expect({ status: rejected.status, code: rejected.body.error }).toEqual({
      status: 409,
      code: 'DUPLICATE',
    });
    const reused = await importUrl({ url, onDuplicate: 'reuse' }, { auth: own.auth });
    expect(reused.status).toBe(201);
    expect(reused.body.data.id).toBe(first.body.data.id);
    expect(await holdings(own)).toMatchObject({
      records: 1,
      usage: { bytes: JPEG.length, files: 1 },
    });
    expect((await holdings(own)).objects).toHaveLength(1);
  });
});

describe('imports that are refused leave nothing', () => {
  const cases: [string, string, number, string][] = [
    ['Content-Length over the limit', '/claims-more-huge', 413, 'FILE_TOO_LARGE'],
    ['Content-Length claiming more than is sent', '/claims-more', 502, 'URL_FETCH_FAILED'],
    ['bytes past a smaller Content-Length', '/claims-fewer', 502, 'URL_FETCH_FAILED'],
    ['chunked past MAX_FILE_SIZE', '/chunked-big.jpg', 413, 'FILE_TOO_LARGE'],
    ['a gzip bomb (never inflated)', '/bomb.png', 415, 'UNSUPPORTED_MEDIA_TYPE'],
    ['HTML labelled image/png', '/page.png', 415, 'UNSUPPORTED_MEDIA_TYPE'],
    ['a remote 404', '/missing.jpg', 502, 'URL_FETCH_FAILED'],
  ];
  it.each(cases)('%s', async (_what, path, status, code) => {
    const own = await api.createOrg();
    const answer = await importUrl({ url: `${base}${path}` }, { auth: own.auth });
    expect({ status: answer.status, code: answer.body.error }).toEqual({ status, code });
    if (path === '/missing.jpg') expect(answer.body.details?.[0]).toMatchObject({ status: 404 });
    expect(await holdings(own)).toEqual({ objects: [], records: 0, usage: { bytes: 0, files: 0 } });
  });

  it('a 1 byte/s sender is cut at IMPORT_TIMEOUT_MS (504)', async () => {
    const own = await api.createOrg();
    const started = Date.now();
    const answer = await importUrl({ url: `${base}/slow.jpg` }, { auth: own.auth });
    expect({ status: answer.status, code: answer.body.error }).toEqual({
      status: 504,
      code: 'URL_FETCH_FAILED',
    });
    expect(answer.body.details?.[0]).toMatchObject({ reason: 'timeout' });
    // 3 s of import time, with room for a loaded machine; never the 1 byte/s transfer's ~4 s more.
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(await holdings(own)).toEqual({ objects: [], records: 0, usage: { bytes: 0, files: 0 } });
  });

  it('the quota, while streaming', async () => {
    const own = await api.createOrg();
    await api.ctx.organizations.setQuota(own.organization.id, 5_000);
    const answer = await importUrl({ url: `${base}/chunked.jpg` }, { auth: own.auth });
    expect({ status: answer.status, code: answer.body.error }).toEqual({
      status: 413,
      code: 'QUOTA_EXCEEDED',
    });
    expect(await holdings(own)).toEqual({ objects: [], records: 0, usage: { bytes: 0, files: 0 } });
  });
});

describe('the blocked-target matrix', () => {
  it('every form is refused (400 URL_NOT_ALLOWED with the reason); the sentinel sees nothing', async () => {
    const own = await api.createOrg();
    const p = sentinelPort;
    const forms = [
      `http://127.0.0.1:${p}/`,
      `http://2130706433:${p}/`,
      `http://017700000001:${p}/`,
      `http://0x7f000001:${p}/`,
      `http://0x7f.1:${p}/`,
      `http://127.1:${p}/`,
      `http://0:${p}/`,
      `http://localhost:${p}/`,
      `http://localhost.:${p}/`,
      `http://[::1]:${p}/`,
      `http://[::ffff:127.0.0.1]:${p}/`,
      `http://[::ffff:7f00:1]:${p}/`,
      `http://[::7f00:1]:${p}/`,
      `http://[64:ff9b::7f00:1]:${p}/`,
      `http://[2002:7f00:1::]:${p}/`,
      `http://169.254.169.254:${p}/latest/meta-data/`,
      `http://[fd00:ec2::254]:${p}/`,
      `http://user:pw@${SOURCE_IP}:${base.split(':')[2]}/photo.jpg`,
      `http://${SOURCE_IP}:1/photo.jpg`,
      'file:///etc/passwd',
      `gopher://127.0.0.1:${p}/`,
      'data:image/png;base64,iVBORw0KGgo=',
      // Allowed itself, it redirects to loopback: refused at the hop, by the worker.
      `${base}/redirect?to=${encodeURIComponent(`http://127.0.0.1:${p}/x`)}`,
      `${base}/redirect?to=${encodeURIComponent(`http://localhost:${p}/x`)}`,
    ];
    for (const url of forms) {
      const answer = await importUrl({ url }, { auth: own.auth });
      expect({ url, status: answer.status, code: answer.body.error }).toEqual({
        url,
        status: 400,
        code: 'URL_NOT_ALLOWED',
      });
      expect(answer.body.message).toMatch(/not allowed: .+/);
    }
    await new Promise((r) => setTimeout(r, 50));
    expect(sentinelConnections).toBe(0);
    expect(await holdings(own)).toEqual({ objects: [], records: 0, usage: { bytes: 0, files: 0 } });
  });
});

describe('access', () => {
  it('needs the write scope: a read-only token is refused, nothing fetched', async () => {
    const limited = await api.ctx.tokens.issue(org.organization.id, { scopes: ['read'] });
    const before = asked.length;
    const answer = await importUrl(
      { url: `${base}/photo.jpg` },
      { auth: { Authorization: `Bearer ${limited.token}` } },
    );
    expect({ status: answer.status, code: answer.body.error }).toEqual({
      status: 403,
      code: 'INSUFFICIENT_SCOPE',
    });
    expect(asked.length).toBe(before);
  });

  it('tenancy: another organization’s folder is not found; its job and record are not seen', async () => {
    const mine = await api.createOrg();
    const theirs = await api.createOrg();
    const folder = await fetch(`${api.url}/media/folders`, {
      method: 'POST',
      headers: { ...theirs.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Theirs' }),
    });
    const folderId = ((await folder.json()) as { data: { id: number } }).data.id;
    const answer = await importUrl({ url: `${base}/photo.jpg`, folderId }, { auth: mine.auth });
    expect({ status: answer.status, code: answer.body.error }).toEqual({
      status: 404,
      code: 'FOLDER_NOT_FOUND',
    });
    const queued = await fetch(`${api.url}/media/upload/url`, {
      method: 'POST',
      headers: { ...mine.auth, 'content-type': 'application/json', prefer: 'respond-async' },
      body: JSON.stringify({ url: `${base}/photo.jpg` }),
    });
    expect(queued.status).toBe(202);
    const { jobId } = ((await queued.json()) as { data: { jobId: string } }).data;
    expect(jobId).toMatch(/^import-/);
    const done = await eventually(async () => {
      const status = await fetch(`${api.url}/media/jobs/${jobId}`, { headers: mine.auth });
      expect(status.status).toBe(200);
      return ((await status.json()) as Answer['body']).data;
    }, 20_000);
    // The job's outcome and the record's creation are events, as for convert.
    await eventually(async () => {
      const events = await api.ctx.models.Event.find({
        _id: { $in: [`job.completed:${jobId}`, `media.created:${done.id}`] },
      }).lean();
      expect(events.map((e) => e._id).sort()).toEqual([
        `job.completed:${jobId}`,
        `media.created:${done.id}`,
      ]);
      const completed = events.find((e) => e.type === 'job.completed')!;
      expect(completed).toMatchObject({
        organizationId: mine.organization.id,
        data: { job: { id: jobId, name: 'media.import', status: 'completed', mediaId: done.id } },
      });
    }, 20_000);
    expect((await fetch(`${api.url}/media/jobs/${jobId}`, { headers: theirs.auth })).status).toBe(
      404,
    );
    expect((await fetch(`${api.url}/media/${done.id}`, { headers: theirs.auth })).status).toBe(404);
    expect(await holdings(theirs)).toMatchObject({ records: 0, objects: [] });
  });
});

describe('metrics', () => {
  it('the worker counts imports by outcome, and the bytes stored', async () => {
    const scrape = await (await fetch(`${worker.opsUrl}/metrics`)).text();
    // Stored and reused (the tests above), refused (413, 415, URL_NOT_ALLOWED at a redirect),
    // failed (502, 504).
    for (const outcome of ['stored', 'reused', 'refused', 'failed']) {
      expect(scrape).toMatch(
        new RegExp(`^media_imports_total\\{outcome="${outcome}"\\} [1-9]`, 'm'),
      );
    }
    expect(scrape).toMatch(/^media_imported_bytes_total [1-9]/m);
  });
});
