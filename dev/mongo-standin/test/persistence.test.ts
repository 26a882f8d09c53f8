/**
 * The stand-in with a data directory: what a client wrote (documents, unique
 * indexes, collection options, deletes, drops) is there after a restart, and a
 * stand-in process killed with SIGKILL in the middle of a stream of writes
 * loses at most the write in flight: the store opens and every acknowledged
 * write is in it.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Decimal128, Int32, Long } from 'bson';
import mongoose from 'mongoose';
import { startMongoStandin, type MongoStandin } from '../src';
import { StorageEngine } from '../src/storage-engine';

// The driver mongoose brings (a dependency of the package already).
const { MongoClient, ObjectId } = mongoose.mongo;
type MongoClient = InstanceType<typeof MongoClient>;
type ObjectId = InstanceType<typeof ObjectId>;

const BIN = join(__dirname, '..', 'bin', 'mongo-standin.js');

let dataDir: string;

beforeEach(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'standin-persist-'));
});

afterEach(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

async function withClient<T>(
  standin: MongoStandin,
  use: (client: MongoClient) => Promise<T>,
): Promise<T> {
  const client = new MongoClient(`${standin.uri}/app`, { serverSelectionTimeoutMS: 5_000 });
  try {
    await client.connect();
    return await use(client);
  } finally {
    await client.close();
  }
}

it('keeps documents, their types and order, indexes and options across a restart; deletes and drops stay done', async () => {
  const id = new ObjectId();
  const first = await startMongoStandin({ dataDir });
  await withClient(first, async (client) => {
    const db = client.db('app');
    const items = db.collection('items');
    await items.createIndex({ slug: 1 }, { unique: true, name: 'slug_unique' });
    await items.insertMany([
      {
        _id: id,
        slug: 'a',
        n: new Int32(1),
        big: Long.fromString('9007199254740993'),
        at: new Date(0),
      },
      { slug: 'b', price: Decimal128.fromString('1.10'), tags: ['x', 'y'] },
      { slug: 'c' },
      { slug: 'gone' },
    ]);
    await items.updateOne({ slug: 'a' }, { $inc: { n: 1 }, $set: { nested: { ok: true } } });
    await items.deleteOne({ slug: 'gone' });
    await db
      .collection('counters')
      .findOneAndUpdate(
        { _id: 'media' as unknown as ObjectId },
        { $inc: { seq: 1 } },
        { upsert: true },
      );
    await db.createCollection('capped', { capped: true, size: 4096, max: 2 });
    await db.collection('scratch').insertOne({ x: 1 });
    await db.collection('scratch').drop();
    await client.db('other').collection('c').insertOne({ y: 1 });
    await client.db('other').dropDatabase();
  });
  await first.close();

  const second = await startMongoStandin({ dataDir });
  try {
    await withClient(second, async (client) => {
      const db = client.db('app');
      const items = db.collection('items');
      const docs = await items.find({}, { promoteValues: false, promoteLongs: false }).toArray();
      expect(docs.map((d) => String(d.slug))).toEqual(['a', 'b', 'c']);
      const a = docs[0]!;
      expect(a._id).toEqual(id);
      expect(a.n).toBeInstanceOf(Int32);
      expect(Number(a.n)).toBe(2);
      expect((a.big as Long).toString()).toBe('9007199254740993');
      expect(a.nested).toEqual({ ok: true });
      expect(String(docs[1]!.price)).toBe('1.10');
      // The unique index still holds.
      await expect(items.insertOne({ slug: 'b' })).rejects.toMatchObject({ code: 11000 });
      expect((await items.indexes()).map((i) => i.name)).toEqual(['_id_', 'slug_unique']);
      expect(await db.collection('counters').findOne({})).toMatchObject({ seq: 1 });
      const capped = (await db.listCollections({ name: 'capped' }).toArray())[0];
      expect(capped).toMatchObject({ options: { capped: true, max: 2 } });
      expect((await db.listCollections().toArray()).map((c) => c.name).sort()).toEqual([
        'capped',
        'counters',
        'items',
      ]);
      const dbs = await client.db('admin').admin().listDatabases();
      expect(dbs.databases.map((d) => d.name)).not.toContain('other');
    });
  } finally {
    await second.close();
  }
});

it('an engine without persistence notes no changes (nothing accumulates in memory)', () => {
  const engine = new StorageEngine();
  const { store } = engine.ensureCollection('app', 'c');
  for (let i = 0; i < 10; i++) store.insert({ _id: i });
  expect(engine.takeJournal()).toEqual([]);
});

it('without a data directory keeps nothing', async () => {
  const first = await startMongoStandin();
  expect(first.dataDir).toBeUndefined();
  await withClient(first, (client) => client.db('app').collection('c').insertOne({ x: 1 }));
  await first.close();
  const second = await startMongoStandin();
  try {
    expect(
      await withClient(second, (client) => client.db('app').collection('c').countDocuments()),
    ).toBe(0);
  } finally {
    await second.close();
  }
});

it('a stand-in killed with SIGKILL during writes loses at most the write in flight', async () => {
  const child = spawn(process.execPath, [BIN, '--port', '0', '--data-dir', dataDir], {
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const [uri] = (await once(createInterface({ input: child.stdout }), 'line')) as [string];
  const client = new MongoClient(`${uri}/app`, {
    serverSelectionTimeoutMS: 5_000,
    retryWrites: false,
  });
  await client.connect();
  const items = client.db('app').collection<{ _id: number; payload: string }>('items');
  await items.createIndex({ payload: 1 });
  // Writes one after the other; each acknowledged one is counted.
  let acknowledged = 0;
  let attempted = 0;
  const writing = (async () => {
    for (;;) {
      attempted++;
      await items.insertOne({ _id: attempted, payload: 'x'.repeat(2_000) });
      acknowledged = attempted;
      if (attempted % 3 === 0)
        await items.updateOne({ _id: attempted - 1 }, { $set: { payload: 'y' } });
    }
  })().catch(() => undefined);
  while (acknowledged < 300) await new Promise((r) => setTimeout(r, 5));
  child.kill('SIGKILL');
  await once(child, 'exit');
  await writing;
  await client.close(true);

  const restarted = await startMongoStandin({ dataDir });
  try {
    const stored = await withClient(restarted, async (c) =>
      c.db('app').collection<{ _id: number; payload: string }>('items').find().toArray(),
    );
    const ids = stored.map((d) => d._id);
    // Every acknowledged write, in order, and at most the one in flight beyond it.
    expect(ids.length).toBeGreaterThanOrEqual(acknowledged);
    expect(ids.length).toBeLessThanOrEqual(attempted);
    expect(ids).toEqual(Array.from({ length: ids.length }, (_, i) => i + 1));
    // Updates acknowledged before the kill are there too.
    expect(stored.find((d) => d._id === 2)!.payload).toBe('y');
    const indexes = await withClient(restarted, (c) => c.db('app').collection('items').indexes());
    expect(indexes.map((i) => i.name)).toEqual(['_id_', 'payload_1']);
  } finally {
    await restarted.close();
  }
});
