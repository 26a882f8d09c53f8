import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { createS3Client, ensureBucket } from '../../../shared/storage/s3-client';
import { createLogger } from '../../../shared/logger';
import { isolatedEnv } from '../../support/context';

const SIZE = 20 * 1024 * 1024;

describe('S3 storage (smoke)', () => {
  const { config, bucket } = isolatedEnv('s3smoke');
  const client = createS3Client(config.s3!);
  const logger = createLogger({ level: 'silent' });

  afterAll(async () => {
    const names: string[] = [];
    for await (const item of client.listObjectsV2(bucket, '', true)) {
      const { name } = item as { name?: string };
      if (name) names.push(name);
    }
    if (names.length) await client.removeObjects(bucket, names);
    await client.removeBucket(bucket);
  });

  it('creates its bucket on start, and only once', async () => {
    expect(await client.bucketExists(bucket)).toBe(false);
    await ensureBucket(client, bucket, config.s3!.region, logger);
    await ensureBucket(client, bucket, config.s3!.region, logger);
    expect(await client.bucketExists(bucket)).toBe(true);
  });

  it('stores a 20 MB stream of unknown length and reads back the same bytes', async () => {
    const chunk = 256 * 1024;
    const expected = createHash('sha256');
    let sent = 0;
    const source = new Readable({
      read() {
        if (sent >= SIZE) return void this.push(null);
        const bytes = randomBytes(chunk);
        expected.update(bytes);
        sent += bytes.length;
        this.push(bytes);
      },
    });
    await client.putObject(bucket, 'smoke/big.bin', source);

    const stat = await client.statObject(bucket, 'smoke/big.bin');
    expect(stat.size).toBe(SIZE);

    const actual = createHash('sha256');
    let received = 0;
    for await (const data of await client.getObject(bucket, 'smoke/big.bin')) {
      const buf = data as Buffer;
      actual.update(buf);
      received += buf.length;
    }
    expect(received).toBe(SIZE);
    expect(actual.digest('hex')).toBe(expected.digest('hex'));
  });
});
