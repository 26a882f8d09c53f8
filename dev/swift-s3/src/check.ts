/**
 * Starts the Swift s3api backend (./swift.ts) and runs the S3 operations the
 * service relies on through the `minio` client, printing what Swift actually
 * does. The package's test (test/check.test.ts) runs it and fails on any
 * failed step; run it by hand after touching swift.ts or upgrading
 * Swift/minio, to read what each operation answers:
 *
 *   npm run check        (in dev/swift-s3; from the root: npm run check -w @media/swift-s3)
 *
 * Exits non-zero if any operation failed or a started process survived stop().
 */
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { connect } from 'node:net';
import { Readable } from 'node:stream';
import {
  Client,
  CopyConditions,
  CopyDestinationOptions,
  CopySourceOptions,
  type BucketStream,
} from 'minio';
import { startSwift, type S3Backend } from './swift';

const MiB = 1024 * 1024;
const BIG = 20 * MiB;
const ABORT_AFTER = 12 * MiB;
const BUCKET = 'media-check';

/** One step of the check: an S3 operation (or a group of them) and what Swift did. */
export interface CheckStep {
  name: string;
  ok: boolean;
  detail: string;
  ms: number;
}

export interface CheckReport {
  /** Seconds from `startSwift()` to its first successful S3 request. */
  startSeconds: number;
  steps: CheckStep[];
}

function describeError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as Error & { code?: unknown }).code;
  return `${err.name}${typeof code === 'string' ? ` [${code}]` : ''}: ${err.message}`;
}

/** What a call that is expected to fail fails with ("no error" if it succeeded). */
async function failureOf(run: () => Promise<unknown>): Promise<string> {
  try {
    await run();
    return 'no error';
  } catch (err) {
    return describeError(err);
  }
}

const sha256 = (data: Buffer): string => createHash('sha256').update(data).digest('hex');

/**
 * A byte stream of unknown length (no `length`, no `path`), 1 MiB per chunk.
 * With `failAfter` it errors once that many bytes have been handed out, like
 * a client connection that drops mid-upload.
 */
function streamOf(data: Buffer, failAfter?: number): Readable {
  let offset = 0;
  const readable = new Readable({
    read() {
      if (failAfter !== undefined && offset >= failAfter) {
        setTimeout(() => readable.destroy(new Error('source aborted on purpose')), 50);
        return;
      }
      if (offset >= data.length) {
        this.push(null);
        return;
      }
      const end = Math.min(offset + MiB, data.length);
      this.push(data.subarray(offset, end));
      offset = end;
    },
  });
  return readable;
}

async function readAll(readable: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of readable) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

function collect<T>(stream: BucketStream<T>): Promise<T[]> {
  return new Promise((resolve, reject) => {
    const items: T[] = [];
    stream.on('data', (item: T) => items.push(item));
    stream.on('error', reject);
    stream.on('end', () => resolve(items));
  });
}

/** How a promise settles within `ms`: minio can hang when its source stream errors. */
async function settleWithin<T>(promise: Promise<T>, ms: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<string>((resolve) => {
    timer = setTimeout(() => resolve(`still pending after ${ms} ms`), ms);
  });
  const settled = promise.then(
    (value) => `resolved: ${JSON.stringify(value)}`,
    (err: unknown) => `rejected: ${describeError(err)}`,
  );
  const outcome = await Promise.race([settled, timeout]);
  clearTimeout(timer);
  return outcome;
}

function httpGet(url: string): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    request(url, (res) => {
      readAll(res).then((body) => resolve({ status: res.statusCode ?? 0, body }), reject);
    })
      .on('error', reject)
      .end();
  });
}

function portClosed(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(true));
  });
}

function clientFor(s3: S3Backend, partSize?: number): Client {
  const url = new URL(s3.endpoint);
  return new Client({
    endPoint: url.hostname,
    port: Number(url.port),
    useSSL: false,
    accessKey: s3.accessKey,
    secretKey: s3.secretKey,
    region: s3.region,
    pathStyle: true,
    ...(partSize ? { partSize } : {}),
  });
}

/** Runs every step against a fresh Swift; `print` receives the start-up lines and each step's outcome. */
export async function checkSwift(print: (text: string) => void = () => {}): Promise<CheckReport> {
  const results: CheckStep[] = [];
  const step = async (name: string, run: () => Promise<string>): Promise<void> => {
    const started = Date.now();
    try {
      const detail = await run();
      results.push({ name, ok: true, detail, ms: Date.now() - started });
      print(`ok   ${name} (${Date.now() - started} ms)\n     ${detail.replace(/\n/g, '\n     ')}`);
    } catch (err) {
      const detail = describeError(err);
      results.push({ name, ok: false, detail, ms: Date.now() - started });
      print(`FAIL ${name} (${Date.now() - started} ms)\n     ${detail}`);
    }
  };
  const started = Date.now();
  const s3 = await startSwift({ log: print });
  const startSeconds = (Date.now() - started) / 1000;
  print(`started in ${startSeconds.toFixed(2)} s: ${s3.endpoint}\n`);

  // The default client uploads a stream of unknown length with a part size
  // computed for a 5 TiB object (528 MiB), so 20 MB become one part; the
  // second client uses 5 MiB parts, as the service should for streams.
  const client = clientFor(s3);
  const parts = clientFor(s3, 5 * MiB);
  const big = randomBytes(BIG);
  const bigSha = sha256(big);

  try {
    await step('makeBucket', async () => {
      await client.makeBucket(BUCKET, s3.region);
      const again = await failureOf(() => client.makeBucket(BUCKET, s3.region));
      const dotted = 'media.check.dotted';
      const dots = await failureOf(async () => {
        await client.makeBucket(dotted, s3.region);
        await client.removeBucket(dotted);
      });
      return `created ${BUCKET}; creating it again: ${again}; bucket with dots (${dotted}): ${dots}`;
    });

    await step('putObject 20 MB stream, default part size; getObject sha256', async () => {
      const uploaded = await client.putObject(BUCKET, 'big/default.bin', streamOf(big));
      const back = await readAll(await client.getObject(BUCKET, 'big/default.bin'));
      if (sha256(back) !== bigSha)
        throw new Error(`read back ${back.length} bytes, sha256 differs`);
      return `etag ${uploaded.etag}; read back ${back.length} bytes, sha256 equal`;
    });

    await step('putObject 20 MB stream, 5 MiB parts; getObject sha256', async () => {
      const uploaded = await parts.putObject(BUCKET, 'big/parts.bin', streamOf(big));
      const back = await readAll(await client.getObject(BUCKET, 'big/parts.bin'));
      if (sha256(back) !== bigSha)
        throw new Error(`read back ${back.length} bytes, sha256 differs`);
      return `etag ${uploaded.etag}; read back ${back.length} bytes, sha256 equal`;
    });

    await step('statObject', async () => {
      const small = Buffer.from('hello swift');
      const put = await client.putObject(BUCKET, 'small.txt', small, small.length, {
        'Content-Type': 'text/plain',
        'X-Amz-Meta-Owner': 'tenant-1',
      });
      const md5 = createHash('md5').update(small).digest('hex');
      const lines = [`small.txt put etag ${put.etag} (md5 ${md5})`];
      for (const key of ['small.txt', 'big/default.bin', 'big/parts.bin']) {
        const stat = await client.statObject(BUCKET, key);
        lines.push(
          `${key}: size ${stat.size}, etag ${stat.etag}, lastModified ${stat.lastModified.toISOString()}, metaData ${JSON.stringify(stat.metaData)}`,
        );
      }
      return lines.join('\n');
    });

    await step('copyObject (server-side), then removeObject of the source', async () => {
      const copied = await client.copyObject(BUCKET, 'copy/parts.bin', `/${BUCKET}/big/parts.bin`);
      const v2 = await client.copyObject(
        new CopySourceOptions({ Bucket: BUCKET, Object: 'small.txt' }),
        new CopyDestinationOptions({
          Bucket: BUCKET,
          Object: 'copy/small-replaced-meta.txt',
          MetadataDirective: 'REPLACE',
          UserMetadata: { owner: 'tenant-2' },
          Headers: { 'Content-Type': 'text/markdown' },
        }),
      );
      const v2Stat = await client.statObject(BUCKET, 'copy/small-replaced-meta.txt');
      await client.removeObject(BUCKET, 'big/parts.bin');
      const gone = await failureOf(() => client.statObject(BUCKET, 'big/parts.bin'));
      const back = await readAll(await client.getObject(BUCKET, 'copy/parts.bin'));
      if (sha256(back) !== bigSha) throw new Error('copy differs from the source');
      const copyStat = await client.statObject(BUCKET, 'copy/parts.bin');
      const [listed] = await collect(client.listObjectsV2(BUCKET, 'copy/parts.bin', true));
      const md5 = createHash('md5').update(big).digest('hex');
      return [
        `copy of a multipart object: ${JSON.stringify(copied)}`,
        `copy's etag ${copyStat.etag} (statObject) / ${listed?.etag} (listObjectsV2; md5 of the bytes is ${md5}), size ${copyStat.size}; bytes equal after removing the source`,
        `copy (v2 API) with MetadataDirective REPLACE: ${JSON.stringify(v2)}; metaData ${JSON.stringify(v2Stat.metaData)}`,
        `statObject of the removed source: ${gone}`,
      ].join('\n');
    });

    await step('copyObject conditions (x-amz-copy-source-if-*)', async () => {
      const lines: string[] = [];
      for (const key of ['small.txt', 'big/default.bin']) {
        const { etag, lastModified } = await client.statObject(BUCKET, key);
        const probes: [string, (c: CopyConditions) => void, string][] = [
          ['if-match its etag', (c) => c.setMatchETag(etag), 'copy'],
          ['if-match another etag', (c) => c.setMatchETag('0'.repeat(32)), 'PreconditionFailed'],
          ['if-none-match its etag', (c) => c.setMatchETagExcept(etag), 'PreconditionFailed'],
          [
            'if-modified-since an hour before',
            (c) => c.setModified(new Date(lastModified.getTime() - 3_600_000)),
            'copy',
          ],
          [
            'if-unmodified-since an hour before',
            (c) => c.setUnmodified(new Date(lastModified.getTime() - 3_600_000)),
            'PreconditionFailed',
          ],
        ];
        for (const [what, set, expected] of probes) {
          const conditions = new CopyConditions();
          set(conditions);
          const outcome = await client
            .copyObject(BUCKET, 'copy/conditional', `/${BUCKET}/${key}`, conditions)
            .then(
              () => 'copy',
              (err: unknown) => describeError(err),
            );
          const agrees = outcome === expected || outcome.includes(`[${expected}]`);
          lines.push(
            `${key} (etag ${etag}) ${what}: ${agrees ? 'as S3' : 'DIFFERS from S3'}, ${outcome}`,
          );
        }
      }
      await client.removeObject(BUCKET, 'copy/conditional');
      return lines.join('\n');
    });

    await step('getPartialObject (range)', async () => {
      const offset = 5 * MiB - 10;
      const length = 1000;
      const range = await readAll(
        await client.getPartialObject(BUCKET, 'copy/parts.bin', offset, length),
      );
      if (!range.equals(big.subarray(offset, offset + length))) throw new Error('range differs');
      const tail = await readAll(await client.getPartialObject(BUCKET, 'copy/parts.bin', BIG - 7));
      if (!tail.equals(big.subarray(BIG - 7))) throw new Error('open-ended range differs');
      const beyond = await failureOf(() => client.getPartialObject(BUCKET, 'small.txt', 1000, 10));
      return `bytes ${offset}-${offset + length - 1} equal; open-ended range from ${BIG - 7}: ${tail.length} bytes equal; range beyond the end: ${beyond}`;
    });

    await step('listObjectsV2', async () => {
      const all = await collect(client.listObjectsV2(BUCKET, '', true));
      const top = await collect(client.listObjectsV2(BUCKET, '', false));
      const after = await collect(client.listObjectsV2(BUCKET, 'copy/', true, 'copy/parts.bin'));
      return [
        `recursive: ${all.map((o) => `${o.name} (${o.size} B, etag ${o.etag}, ${o.lastModified?.toISOString()})`).join(', ')}`,
        `delimited: ${top.map((o) => o.name ?? `prefix ${o.prefix}`).join(', ')}`,
        `prefix copy/ startAfter copy/parts.bin: ${after.map((o) => o.name).join(', ')}`,
      ].join('\n');
    });

    await step(
      'abort a multipart upload mid-stream; listIncompleteUploads; removeIncompleteUpload',
      async () => {
        const key = 'aborted/parts.bin';
        const outcome = await settleWithin(
          parts.putObject(
            BUCKET,
            key,
            streamOf(big, ABORT_AFTER).on('error', () => {}),
          ),
          10_000,
        );
        // minio sends `delimiter=` (empty) when recursive; s3api treats that as a
        // delimiter matching at the prefix and returns no uploads at all.
        const recursive = await collect(parts.listIncompleteUploads(BUCKET, '', true));
        const delimited = await collect(parts.listIncompleteUploads(BUCKET, 'aborted/', false));
        const upload = delimited.find((u) => u.key === key);
        // minio finds the upload id with the same empty-delimiter listing, finds
        // nothing and sends DELETE ?uploadId=undefined.
        const removed = await failureOf(() => parts.removeIncompleteUpload(BUCKET, key));
        const afterRemove = await collect(parts.listIncompleteUploads(BUCKET, 'aborted/', false));
        if (upload) await parts.abortMultipartUpload(BUCKET, key, upload.uploadId);
        const afterAbort = await collect(parts.listIncompleteUploads(BUCKET, 'aborted/', false));
        const objects = await collect(client.listObjectsV2(BUCKET, 'aborted/', true));
        const buckets = await client.listBuckets();
        return [
          `putObject (5 MiB parts) with the source failing after ${ABORT_AFTER} bytes: ${outcome}`,
          `listIncompleteUploads(bucket, '', recursive=true): ${JSON.stringify(recursive)}`,
          `listIncompleteUploads(bucket, 'aborted/', recursive=false): ${JSON.stringify(delimited)}`,
          `removeIncompleteUpload(bucket, '${key}'): ${removed}; open uploads after: ${JSON.stringify(afterRemove)}`,
          `after abortMultipartUpload(bucket, key, uploadId): ${JSON.stringify(afterAbort)}; objects under aborted/: ${objects.length}`,
          `listBuckets: ${buckets.map((b) => b.name).join(', ')}`,
        ].join('\n');
      },
    );

    await step(
      'abort with the default part size; removeBucket with an open upload; retry the key',
      async () => {
        const key = 'aborted/default.bin';
        const outcome = await settleWithin(
          client.putObject(
            BUCKET,
            key,
            streamOf(big, ABORT_AFTER).on('error', () => {}),
          ),
          10_000,
        );
        const listed = await collect(client.listIncompleteUploads(BUCKET, 'aborted/', false));
        const removeBucket = await failureOf(async () => {
          await client.makeBucket('media-check-open-upload', s3.region);
          await parts.initiateNewMultipartUpload('media-check-open-upload', 'k', {});
          await client.removeBucket('media-check-open-upload');
        });
        const stillThere = await client.bucketExists('media-check-open-upload');
        // minio would resume an upload it finds for the key; on Swift it finds none.
        const retried = await parts.putObject(BUCKET, key, streamOf(big));
        const back = await readAll(await client.getObject(BUCKET, key));
        if (sha256(back) !== bigSha) throw new Error('retried upload differs');
        const left = await collect(client.listIncompleteUploads(BUCKET, 'aborted/', false));
        for (const u of left) await client.abortMultipartUpload(BUCKET, u.key, u.uploadId);
        return [
          `putObject (default part size) with the source failing after ${ABORT_AFTER} bytes: ${outcome}`,
          `listIncompleteUploads(bucket, 'aborted/', false): ${JSON.stringify(listed)}`,
          `removeBucket of a bucket whose only content is an open multipart upload: ${removeBucket}; bucketExists after: ${stillThere}`,
          `retry of the same key (5 MiB parts): etag ${retried.etag}, bytes equal; open uploads then (aborted): ${JSON.stringify(left)}`,
        ].join('\n');
      },
    );

    await step('presignedGetObject', async () => {
      const url = await client.presignedGetObject(BUCKET, 'small.txt', 60);
      const res = await httpGet(url);
      return `GET ${url.split('?')[0]}?X-Amz-...: ${res.status} "${res.body.toString()}"`;
    });

    await step('error codes', async () => {
      const rows = [
        ['getObject missing key', () => client.getObject(BUCKET, 'missing')],
        ['statObject missing key', () => client.statObject(BUCKET, 'missing')],
        ['getObject missing bucket', () => client.getObject('no-such-bucket-x', 'k')],
        ['removeBucket not empty', () => client.removeBucket(BUCKET)],
        ['removeObject missing key', () => client.removeObject(BUCKET, 'missing')],
      ] as const;
      const lines: string[] = [];
      for (const [what, run] of rows) lines.push(`${what}: ${await failureOf(run)}`);
      return lines.join('\n');
    });

    await step('removeObjects', async () => {
      const names = (await collect(client.listObjectsV2(BUCKET, '', true))).map((o) => o.name!);
      const response = await client.removeObjects(BUCKET, [...names, 'never-existed']);
      const left = await collect(client.listObjectsV2(BUCKET, '', true));
      return `removed ${names.join(', ')} + never-existed: response ${JSON.stringify(response)}; objects left: ${left.length}`;
    });

    await step('removeBucket', async () => {
      await client.removeBucket(BUCKET);
      const buckets = await client.listBuckets();
      const exists = await client.bucketExists(BUCKET);
      return `removed; bucketExists ${exists}; listBuckets: ${JSON.stringify(buckets.map((b) => b.name))}`;
    });
  } finally {
    await step('stop() twice', async () => {
      const t = Date.now();
      await s3.stop();
      const first = Date.now() - t;
      await s3.stop();
      const closed = await portClosed(Number(new URL(s3.endpoint).port));
      if (!closed) throw new Error('the proxy port still accepts connections');
      return `first stop ${first} ms; second stop is a no-op; proxy port closed`;
    });
  }

  return { startSeconds, steps: results };
}

async function main(): Promise<void> {
  const print = (text: string): void => void process.stdout.write(`${text}\n`);
  const { startSeconds, steps } = await checkSwift(print);
  const failed = steps.filter((r) => !r.ok);
  print(
    `\nstartup ${startSeconds.toFixed(2)} s; ${steps.length - failed.length}/${steps.length} steps ok${failed.length ? `; failed: ${failed.map((r) => r.name).join('; ')}` : ''}`,
  );
  process.exitCode = failed.length ? 1 : 0;
}

if (require.main === module) {
  main().catch((err: unknown) => {
    process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  });
}
