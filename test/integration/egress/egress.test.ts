/**
 * The guarded way out (shared/egress/egress.ts) making real requests over
 * loopback. The "public" server is a loopback address the test opens through
 * the allowlist (EGRESS_ALLOWLIST's CIDR 127.0.0.3/32), not a network
 * namespace; a sentinel listener on 127.0.0.1 and [::1] (the addresses every
 * refused form points at) counts its connections, and must count none.
 * DNS is an injected resolver (rebinding: public, then private). Both ways
 * of reading an answer are held: kept (`egressRequest`) and streamed
 * (`egressStream`, URL imports).
 */
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import { parseAllowlist } from '@shared/egress/address';
import {
  egressRequest,
  egressStream,
  EgressFailed,
  EgressRefused,
  type EgressPolicy,
  type ResolvedAddress,
} from '@shared/egress/egress';

const RECEIVER_IP = '127.0.0.3';

interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

let sentinel4: net.Server;
let sentinel6: net.Server | undefined;
let sentinelPort: number;
let connections = 0;
let receiver: http.Server;
let receiverPort: number;
let second: http.Server;
let secondPort: number;
let raw: net.Server;
let rawPort: number;
const seen: Seen[] = [];
const seenBySecond: Seen[] = [];
let resolverCalls: string[] = [];

function listen(server: net.Server, host: string, port = 0): Promise<number> {
  server.listen(port, host);
  return once(server, 'listening').then(() => (server.address() as net.AddressInfo).port);
}

function record(into: Seen[]) {
  return (req: http.IncomingMessage, res: http.ServerResponse) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      into.push({ method: req.method!, url: req.url!, headers: req.headers, body });
      const u = new URL(req.url!, 'http://x');
      const to = u.searchParams.get('to');
      if (u.pathname === '/redirect' && to) {
        res.writeHead(Number(u.searchParams.get('status') ?? 302), { location: to }).end();
      } else if (u.pathname === '/hang') {
        // never answers
      } else if (u.pathname === '/drip') {
        // 10 bytes, then one byte every 200 ms.
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('x'.repeat(10));
        const timer = setInterval(() => res.write('y'), 200);
        res.on('close', () => clearInterval(timer));
      } else if (u.pathname === '/big') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end('x'.repeat(100_000));
      } else {
        res.writeHead(200, { 'content-type': 'text/plain' }).end(`ok ${req.method}`);
      }
    });
  };
}

beforeAll(async () => {
  sentinel4 = net.createServer((s) => {
    s.on('error', () => undefined);
    connections++;
    s.destroy();
  });
  sentinelPort = await listen(sentinel4, '127.0.0.1');
  sentinel6 = net.createServer((s) => {
    s.on('error', () => undefined);
    connections++;
    s.destroy();
  });
  try {
    await listen(sentinel6, '::1', sentinelPort);
  } catch {
    sentinel6 = undefined; // no IPv6 loopback here: the v4 sentinel still counts
  }
  receiver = http.createServer(record(seen));
  receiverPort = await listen(receiver, RECEIVER_IP);
  second = http.createServer(record(seenBySecond));
  secondPort = await listen(second, RECEIVER_IP);
  // Answers with a Content-Length that lies (says 10 MB, sends 100 KB and stalls).
  raw = net.createServer((s) => {
    s.on('error', () => undefined);
    s.once('data', () => {
      s.write('HTTP/1.1 200 OK\r\ncontent-length: 10000000\r\n\r\n');
      s.write('y'.repeat(100_000));
    });
  });
  rawPort = await listen(raw, RECEIVER_IP);
});

afterAll(() => {
  for (const s of [sentinel4, sentinel6, receiver, second, raw]) {
    if (!s) continue;
    (s as http.Server).closeAllConnections?.();
    s.close();
  }
});

beforeEach(() => {
  seen.length = 0;
  seenBySecond.length = 0;
  resolverCalls = [];
});

function policy(names: Record<string, string[] | (() => string[])> = {}): EgressPolicy {
  return {
    allowedPorts: [sentinelPort, receiverPort, secondPort, rawPort],
    allowlist: parseAllowlist(`${RECEIVER_IP}/32`),
    resolver: (host): Promise<ResolvedAddress[]> => {
      resolverCalls.push(host);
      const entry = names[host];
      if (!entry) return Promise.reject(new Error(`ENOTFOUND ${host}`));
      const list = typeof entry === 'function' ? entry() : entry;
      return Promise.resolve(
        list.map((address) => ({ address, family: address.includes(':') ? 6 : 4 })),
      );
    },
  };
}

describe('refused targets never see a connection', () => {
  const forms = () => [
    `http://127.0.0.1:${sentinelPort}/`,
    `http://2130706433:${sentinelPort}/`,
    `http://017700000001:${sentinelPort}/`,
    `http://0x7f000001:${sentinelPort}/`,
    `http://0x7f.1:${sentinelPort}/`,
    `http://127.1:${sentinelPort}/`,
    `http://0:${sentinelPort}/`,
    `http://localhost:${sentinelPort}/`,
    `http://localhost.:${sentinelPort}/`,
    `http://[::1]:${sentinelPort}/`,
    `http://[::ffff:127.0.0.1]:${sentinelPort}/`,
    `http://[::ffff:7f00:1]:${sentinelPort}/`,
    `http://[::7f00:1]:${sentinelPort}/`,
    `http://[64:ff9b::7f00:1]:${sentinelPort}/`,
    `http://[2002:7f00:1::]:${sentinelPort}/`,
    `http://user:pw@${RECEIVER_IP}:${receiverPort}/`,
    `http://${RECEIVER_IP}:1/`,
    `file:///etc/passwd`,
    `gopher://127.0.0.1:${sentinelPort}/`,
    `data:text/plain,hello`,
    `http://private.example:${sentinelPort}/`,
    `http://mixed.example:${sentinelPort}/`,
  ];

  it('each form of the matrix is refused before connecting', async () => {
    const p = policy({
      'private.example': ['127.0.0.1'],
      'mixed.example': [RECEIVER_IP, '127.0.0.1'],
    });
    for (const url of forms()) {
      await expect(egressRequest(url, {}, p)).rejects.toBeInstanceOf(EgressRefused);
    }
    expect(seen).toHaveLength(0);
    await new Promise((r) => setTimeout(r, 50));
    expect(connections).toBe(0);
  });
});

describe('requests that are allowed', () => {
  it('reaches the allowlisted receiver, pinned to the checked address, identity encoding', async () => {
    const answer = await egressRequest(
      `http://hooks.example:${receiverPort}/in`,
      {
        method: 'POST',
        body: '{"a":1}',
        headers: { 'content-type': 'application/json', 'Accept-Encoding': 'gzip' },
      },
      policy({ 'hooks.example': [RECEIVER_IP] }),
    );
    expect(answer.status).toBe(200);
    expect(answer.body.toString()).toBe('ok POST');
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({
      method: 'POST',
      body: '{"a":1}',
      headers: { host: `hooks.example:${receiverPort}`, 'accept-encoding': 'identity' },
    });
  });

  it('DNS rebinding: resolved once and pinned; the private answer later is refused', async () => {
    let n = 0;
    const p = policy({ 'rebind.example': () => (n++ === 0 ? [RECEIVER_IP] : ['127.0.0.1']) });
    const first = await egressRequest(`http://rebind.example:${receiverPort}/`, {}, p);
    expect(first.status).toBe(200);
    expect(resolverCalls).toEqual(['rebind.example']);
    await expect(egressRequest(`http://rebind.example:${sentinelPort}/`, {}, p)).rejects.toThrow(
      /loopback/,
    );
    expect(connections).toBe(0);
  });

  it('a 3xx is answered as it is unless redirects are asked for', async () => {
    const to = `http://127.0.0.1:${sentinelPort}/`;
    const answer = await egressRequest(
      `http://${RECEIVER_IP}:${receiverPort}/redirect?to=${encodeURIComponent(to)}`,
      {},
      policy(),
    );
    expect(answer.status).toBe(302);
    expect(connections).toBe(0);
  });

  it('a redirect to a private address is refused; the sentinel sees nothing', async () => {
    for (const to of [`http://127.0.0.1:${sentinelPort}/`, `http://localhost:${sentinelPort}/x`]) {
      await expect(
        egressRequest(
          `http://${RECEIVER_IP}:${receiverPort}/redirect?to=${encodeURIComponent(to)}`,
          { maxRedirects: 3 },
          policy(),
        ),
      ).rejects.toBeInstanceOf(EgressRefused);
    }
    expect(connections).toBe(0);
  });

  it('redirects: followed to another origin without credentials, at most 3', async () => {
    const final = `http://${RECEIVER_IP}:${secondPort}/landed`;
    const answer = await egressRequest(
      `http://${RECEIVER_IP}:${receiverPort}/redirect?status=307&to=${encodeURIComponent(final)}`,
      {
        maxRedirects: 3,
        headers: { authorization: 'Bearer secret', cookie: 'a=b', 'x-kept': '1' },
      },
      policy(),
    );
    expect(answer.status).toBe(200);
    expect(seen[0]!.headers.authorization).toBe('Bearer secret');
    expect(seenBySecond[0]!.headers).toMatchObject({ 'x-kept': '1' });
    expect(seenBySecond[0]!.headers.authorization).toBeUndefined();
    expect(seenBySecond[0]!.headers.cookie).toBeUndefined();

    // Four hops: one too many.
    let url = final;
    for (let i = 0; i < 4; i++) {
      url = `http://${RECEIVER_IP}:${receiverPort}/redirect?to=${encodeURIComponent(url)}`;
    }
    await expect(egressRequest(url, { maxRedirects: 3 }, policy())).rejects.toMatchObject({
      kind: 'too_many_redirects',
    });
  });

  it('keeps at most maxBytes of an answer, whatever Content-Length says', async () => {
    const big = await egressRequest(
      `http://${RECEIVER_IP}:${receiverPort}/big`,
      { maxBytes: 4096 },
      policy(),
    );
    expect(big.body.length).toBe(4096);
    expect(big.truncated).toBe(true);
    const lying = await egressRequest(
      `http://${RECEIVER_IP}:${rawPort}/`,
      { maxBytes: 4096 },
      policy(),
    );
    expect(lying.body.length).toBe(4096);
    expect(lying.truncated).toBe(true);
    await expect(
      egressRequest(
        `http://${RECEIVER_IP}:${receiverPort}/big`,
        { maxBytes: 1000, onLimit: 'fail' },
        policy(),
      ),
    ).rejects.toMatchObject({ kind: 'too_large' });
  });

  it('times out a server that never answers', async () => {
    const started = Date.now();
    const err = await egressRequest(
      `http://${RECEIVER_IP}:${receiverPort}/hang`,
      { headersMs: 300 },
      policy(),
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EgressFailed);
    expect(err).toMatchObject({ kind: 'timeout' });
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it('a closed port is a connect failure, not a refusal', async () => {
    const closed = net.createServer();
    const port = await listen(closed, RECEIVER_IP);
    closed.close();
    const p = policy();
    p.allowedPorts = [port];
    await expect(egressRequest(`http://${RECEIVER_IP}:${port}/`, {}, p)).rejects.toMatchObject({
      kind: 'connect',
    });
  });
});

/** Reads a stream to its end: its bytes, or what it failed with. */
async function drain(body: NodeJS.ReadableStream): Promise<Buffer | Error> {
  const chunks: Buffer[] = [];
  try {
    for await (const chunk of body) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  } catch (err) {
    return err as Error;
  }
}

describe('streamed answers (egressStream)', () => {
  it('hands over the whole body when it is within maxBytes', async () => {
    const answer = await egressStream(
      `http://${RECEIVER_IP}:${receiverPort}/big`,
      { maxBytes: 100_000 },
      policy(),
    );
    expect(answer.status).toBe(200);
    expect(((await drain(answer.body)) as Buffer).length).toBe(100_000);
  });

  it('fails on byte maxBytes + 1, whatever Content-Length says', async () => {
    const big = await egressStream(
      `http://${RECEIVER_IP}:${receiverPort}/big`,
      { maxBytes: 99_999 },
      policy(),
    );
    expect(await drain(big.body)).toMatchObject({ kind: 'too_large' });
    // Says 10 MB, sends 100 KB and stalls: cut at the limit, not waited for.
    const lying = await egressStream(
      `http://${RECEIVER_IP}:${rawPort}/`,
      { maxBytes: 4096 },
      policy(),
    );
    expect(await drain(lying.body)).toMatchObject({ kind: 'too_large' });
  });

  it('cuts a slow sender at the total timeout, though bytes keep coming', async () => {
    const started = Date.now();
    const answer = await egressStream(
      `http://${RECEIVER_IP}:${receiverPort}/drip`,
      { totalMs: 1_000, maxBytes: 1_000_000 },
      policy(),
    );
    expect(answer.status).toBe(200);
    expect(await drain(answer.body)).toMatchObject({ kind: 'timeout' });
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('checks every redirect again: one to a private address is refused, the sentinel sees nothing', async () => {
    const to = `http://127.0.0.1:${sentinelPort}/`;
    await expect(
      egressStream(
        `http://${RECEIVER_IP}:${receiverPort}/redirect?to=${encodeURIComponent(to)}`,
        { maxRedirects: 3 },
        policy(),
      ),
    ).rejects.toBeInstanceOf(EgressRefused);
    expect(connections).toBe(0);
  });

  it('DNS rebinding: the name resolved once, the connection pinned to the checked address', async () => {
    let n = 0;
    const p = policy({ 'rebind.example': () => (n++ === 0 ? [RECEIVER_IP] : ['127.0.0.1']) });
    const answer = await egressStream(`http://rebind.example:${receiverPort}/`, {}, p);
    expect(((await drain(answer.body)) as Buffer).toString()).toBe('ok GET');
    expect(resolverCalls).toEqual(['rebind.example']);
    expect(connections).toBe(0);
  });
});
