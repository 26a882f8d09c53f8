/**
 * Resumable uploads across API processes that die (docs/resumable-uploads.md,
 * "Several API replicas"): two API processes behind one address, a TCP front
 * that sends each new connection to the one currently serving. That one is
 * killed with SIGKILL (the front turns to the other) and started again as
 * the upload passes each quarter of the file, and once more as its last bytes
 * go out, cutting the completion off. tus-js-client uploads 200 MiB in 8 MiB chunks, retrying as
 * it does on a dropped connection; each retry asks the other process for the
 * offset (HEAD) and goes on from there, under the lock and the state both
 * processes share through Redis.
 *
 * The upload finishes as one record whose bytes are the file's (SHA-256),
 * with no temporary object and no open multipart upload left; the run's
 * reconcile checks records = objects for the whole environment.
 */
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createConnection, createServer, type AddressInfo, type Socket } from 'node:net';
import * as tus from 'tus-js-client';
import { startApi, type TestApi, type TestOrg } from '../support/api';
import { startApiProcess, type ServiceProcess } from '../support/processes';

const MiB = 1024 * 1024;
const SIZE = 200 * MiB;

let harness: TestApi; // in-process, only to set up the organization and look behind the API
let org: TestOrg;
let env: NodeJS.ProcessEnv;
const apis: ServiceProcess[] = [];
/** Which of `apis` new connections go to. */
let serving = 0;
const sockets = new Set<Socket>();
const front = createServer((client) => {
  const upstream = createConnection({
    host: '127.0.0.1',
    port: Number(new URL(apis[serving]!.url!).port),
  });
  for (const s of [client, upstream]) sockets.add(s);
  const drop = () => {
    for (const s of [client, upstream]) {
      s.destroy();
      sockets.delete(s);
    }
  };
  client.on('error', drop).on('close', drop);
  upstream.on('error', drop).on('close', drop);
  client.pipe(upstream);
  upstream.pipe(client);
});
let frontUrl: string;

beforeAll(async () => {
  harness = await startApi('e2etuskill');
  org = await harness.createOrg('tuskill');
  env = { ...harness.env.env, MAX_FILE_SIZE: String(256 * MiB) };
  apis.push(await startApiProcess(env), await startApiProcess(env));
  front.listen(0, '127.0.0.1');
  await once(front, 'listening');
  frontUrl = `http://127.0.0.1:${(front.address() as AddressInfo).port}`;
}, 120_000);
afterAll(async () => {
  for (const s of sockets) s.destroy();
  front.close();
  for (const p of apis) await p.kill('SIGTERM');
  await harness.close();
}, 60_000);

it('a 200 MiB tus upload whose serving API process is killed four times, the last as its completion runs, finishes whole, once', async () => {
  const head = Buffer.from('%PDF-1.4\n%\xe2\xe3\xcf\xd3\n', 'latin1');
  const data = randomBytes(SIZE);
  head.copy(data);

  // The serving process is killed as the upload passes a quarter, half and three quarters
  // of the file, and once more as its last bytes go out (the completion cut off).
  let kills = 0;
  let killing = Promise.resolve();
  const kill = () => {
    killing = killing.then(async () => {
      const victim = serving;
      serving = 1 - serving;
      await apis[victim]!.kill('SIGKILL');
      kills++;
      apis[victim] = await startApiProcess(env);
    });
  };
  const marks = [SIZE / 4, SIZE / 2, (3 * SIZE) / 4];
  let killedAtEnd = false;

  let mediaKey: string | undefined;
  let resumes = 0;
  try {
    await new Promise<void>((resolve, reject) => {
      const upload = new tus.Upload(data, {
        endpoint: `${frontUrl}/media/upload/resumable`,
        headers: org.auth,
        metadata: { filename: 'big-scan.pdf', filetype: 'application/pdf' },
        chunkSize: 8 * MiB,
        // Many retries, each soon: every kill drops the connection under the PATCH in flight.
        retryDelays: Array.from({ length: 60 }, () => 250),
        onShouldRetry: () => {
          resumes++;
          return true;
        },
        onChunkComplete: (_chunk, accepted) => {
          while (marks.length > 0 && accepted >= marks[0]!) {
            marks.shift();
            kill();
          }
        },
        onProgress: (sent, total) => {
          if (sent === total && !killedAtEnd) {
            killedAtEnd = true;
            kill();
          }
        },
        onAfterResponse: (_req, res) => {
          mediaKey = res.getHeader('Media-Key') ?? mediaKey;
        },
        onError: reject,
        onSuccess: () => resolve(),
      });
      upload.start();
    });
  } finally {
    await killing;
  }
  process.stdout.write(`tus across kills: ${kills} kills, ${resumes} retries\n`);
  expect(kills).toBe(4);
  expect(resumes).toBeGreaterThanOrEqual(kills - 1);

  // One record, its bytes the file's.
  expect(mediaKey).toBeDefined();
  const records = await harness.ctx.models.Media.find({
    organizationId: org.organization.id,
  }).lean();
  expect(records.map((r) => r.key)).toEqual([mediaKey]);
  const sha256 = createHash('sha256').update(data).digest('hex');
  expect(records[0]).toMatchObject({ bytes: SIZE, checksum: `sha256:${sha256}` });
  const stored = createHash('sha256');
  for await (const chunk of await harness.ctx.store.get(mediaKey!)) stored.update(chunk as Buffer);
  expect(stored.digest('hex')).toBe(sha256);

  // Nothing else under the organization: no temporary object (their removal may follow the
  // answer), no open multipart upload.
  const slug = org.organization.slug;
  await harness.expectNoObjects(`${slug}/.tmp/`);
  expect(await harness.objectKeys(`${slug}/`)).toEqual([mediaKey]);
  expect(await harness.ctx.store.listIncompleteUploads(`${slug}/`)).toEqual([]);
}, 240_000);
