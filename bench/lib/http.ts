/**
 * HTTP clients for the benchmarks: a multipart upload streamed from a
 * generated body of any size, and a closed-loop load of one request shape.
 */
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { Readable } from 'node:stream';
import type { request as undiciRequest } from 'undici';
import { Agent } from 'undici';

/** A stream of `total` bytes made of `block` repeated (cheap to produce at any size). */
export function repeated(total: number, block: Buffer): Readable {
  let sent = 0;
  return new Readable({
    read() {
      if (sent >= total) return void this.push(null);
      const n = Math.min(block.length, total - sent);
      sent += n;
      this.push(n === block.length ? block : block.subarray(0, n));
    },
  });
}

export interface UploadedRecord {
  key: string;
  bytes: number;
  checksum: string;
}

/**
 * `POST /media/upload` of `total` bytes (`block` repeated) as one `file`
 * part, streamed with a Content-Length; resolves with the created record.
 */
export function uploadStream(
  url: string,
  token: string,
  total: number,
  block: Buffer,
  fileName = 'bench.jpg',
): Promise<UploadedRecord> {
  const boundary = `----bench${randomBytes(8).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${fileName}"\r\n` +
      'Content-Type: application/octet-stream\r\n\r\n',
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: hostname,
        port,
        method: 'POST',
        path: '/media/upload',
        headers: {
          Authorization: `Bearer ${token}`,
          'Content-Type': `multipart/form-data; boundary=${boundary}`,
          'Content-Length': String(head.length + total + tail.length),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          if (res.statusCode !== 201) {
            reject(new Error(`upload answered ${res.statusCode}: ${text.slice(0, 300)}`));
            return;
          }
          const record = (JSON.parse(text) as { data: UploadedRecord }).data;
          if (record.bytes !== total) {
            reject(new Error(`upload stored ${record.bytes} bytes, sent ${total}`));
            return;
          }
          resolve(record);
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.write(head);
    const body = repeated(total, block);
    body.pipe(req, { end: false });
    body.on('end', () => req.end(tail));
  });
}

export interface LoadRun {
  requests: number;
  seconds: number;
  /** Latency of every request, ms, from sending to the end of the body. */
  latencies: number[];
}

/**
 * `connections` clients, each on its own keep-alive connection with one
 * request at a time, repeat `send` for `durationMs`; every answer must be
 * `expectStatus`. Requests in flight at the deadline are finished and counted.
 */
export async function closedLoop(options: {
  connections: number;
  durationMs: number;
  send: (dispatcher: Agent) => ReturnType<typeof undiciRequest>;
  expectStatus: number;
}): Promise<LoadRun> {
  const latencies: number[] = [];
  const agents = Array.from(
    { length: options.connections },
    () => new Agent({ connections: 1, pipelining: 1 }),
  );
  const started = performance.now();
  const deadline = started + options.durationMs;
  try {
    await Promise.all(
      agents.map(async (agent) => {
        while (performance.now() < deadline) {
          const t = performance.now();
          const res = await options.send(agent);
          const body = await res.body.text();
          if (res.statusCode !== options.expectStatus) {
            throw new Error(`answered ${res.statusCode}: ${body.slice(0, 300)}`);
          }
          latencies.push(performance.now() - t);
        }
      }),
    );
  } finally {
    await Promise.all(agents.map((a) => a.close()));
  }
  return {
    requests: latencies.length,
    seconds: (performance.now() - started) / 1000,
    latencies,
  };
}
