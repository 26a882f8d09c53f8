/**
 * One mongoose suite, run against a fresh stand-in, or against a real server
 * when MONGODB_URI names one (test/support.ts). It
 * asserts only what real MongoDB does, so it passing against the stand-in
 * means the service's mongoose code cannot tell the difference.
 * mongoose-compat-updates.test.ts and mongoose-compat-queries.test.ts hold the
 * cases found by running mongoose's own suite against the stand-in.
 */
import mongoose, { Schema, type Connection, type Model, type Types } from 'mongoose';

import { mongoTarget, uniqueSuffix, type MongoTarget } from './support';

const dbName = `compat_${uniqueSuffix()}`;
let target: MongoTarget;
let uri: string;

interface CounterDoc {
  _id: string;
  seq: number;
}

interface ItemDoc {
  org: Types.ObjectId;
  name: string;
  seq?: number;
  size?: number;
  kind?: string;
  takenAt?: Date;
  data?: Buffer;
  matrix?: number[][];
  meta?: { width: number; height: number; tags: string[] };
}

const counterSchema = new Schema<CounterDoc>({ _id: String, seq: { type: Number, default: 0 } });

const itemSchema = new Schema<ItemDoc>(
  {
    org: { type: Schema.Types.ObjectId, required: true },
    name: { type: String, required: true },
    seq: Number,
    size: Number,
    kind: String,
    takenAt: Date,
    data: Buffer,
    matrix: [[Number]],
    meta: { width: Number, height: Number, tags: [String] },
  },
  { timestamps: true },
);
itemSchema.index({ org: 1, name: 1 }, { unique: true });
itemSchema.index({ seq: 1 }, { unique: true, sparse: true });

interface Models {
  Counter: Model<CounterDoc>;
  Item: Model<ItemDoc>;
}

function modelsOn(conn: Connection): Models {
  return {
    Counter: conn.model<CounterDoc>('Counter', counterSchema),
    Item: conn.model<ItemDoc>('Item', itemSchema),
  };
}

async function nextSeq(Counter: Model<CounterDoc>, name: string): Promise<number> {
  const counter = await Counter.findOneAndUpdate(
    { _id: name },
    { $inc: { seq: 1 } },
    { upsert: true, returnDocument: 'after' },
  ).lean();
  if (!counter) throw new Error('the upsert returned no counter');
  return counter.seq;
}

let conn: Connection;
let Counter: Model<CounterDoc>;
let Item: Model<ItemDoc>;
const commands: string[] = [];

beforeAll(async () => {
  target = await mongoTarget();
  uri = target.uri(dbName);
  conn = await mongoose.createConnection(uri, { monitorCommands: true }).asPromise();
  conn.getClient().on('commandStarted', (event) => commands.push(event.commandName));
  ({ Counter, Item } = modelsOn(conn));
  await Promise.all([Counter.init(), Item.init()]);
});

afterAll(async () => {
  await conn?.dropDatabase();
  await conn?.close();
  await target?.close();
});

describe('integer counters', () => {
  it('findOneAndUpdate + $inc + upsert creates the counter and returns each next value', async () => {
    const values = [];
    for (let i = 0; i < 5; i++) values.push(await nextSeq(Counter, 'sequential'));
    expect(values).toEqual([1, 2, 3, 4, 5]);
    const stored = await Counter.findById('sequential').lean();
    expect(stored).toMatchObject({ _id: 'sequential', seq: 5 });
  });

  it('returns the document before the update without returnDocument: after', async () => {
    const before = await Counter.findOneAndUpdate(
      { _id: 'before' },
      { $inc: { seq: 1 } },
      { upsert: true },
    );
    expect(before).toBeNull();
    const again = await Counter.findOneAndUpdate({ _id: 'before' }, { $inc: { seq: 10 } });
    expect(again?.seq).toBe(1);
    expect((await Counter.findById('before'))?.seq).toBe(11);
  });

  it('reports whether findOneAndUpdate upserted (includeResultMetadata)', async () => {
    const first = await Counter.findOneAndUpdate(
      { _id: 'meta' },
      { $inc: { seq: 1 } },
      { upsert: true, returnDocument: 'after', includeResultMetadata: true },
    );
    expect(first.lastErrorObject).toMatchObject({ n: 1, updatedExisting: false, upserted: 'meta' });
    const second = await Counter.findOneAndUpdate(
      { _id: 'meta' },
      { $inc: { seq: 1 } },
      { upsert: true, returnDocument: 'after', includeResultMetadata: true },
    );
    expect(second.lastErrorObject).toMatchObject({ n: 1, updatedExisting: true });
    expect(second.value?.seq).toBe(2);
  });
});

describe('unique indexes', () => {
  const org = new mongoose.Types.ObjectId();

  it('lists the schema indexes after init, _id_ included, and syncIndexes drops nothing', async () => {
    const indexes = (await Item.listIndexes()) as Array<{
      name: string;
      key: unknown;
      unique?: boolean;
    }>;
    const byName = Object.fromEntries(indexes.map((index) => [index.name, index]));
    expect(byName._id_?.key).toEqual({ _id: 1 });
    expect(byName.org_1_name_1).toMatchObject({ key: { org: 1, name: 1 }, unique: true });
    expect(byName.seq_1).toMatchObject({ key: { seq: 1 }, unique: true, sparse: true });
    expect(await Item.syncIndexes()).toEqual([]);
  });

  it('rejects a duplicate compound key with E11000 and the key that collided', async () => {
    await Item.create({ org, name: 'dup.jpg' });
    const error = await Item.create({ org, name: 'dup.jpg' }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(mongoose.mongo.MongoServerError);
    const serverError = error as InstanceType<typeof mongoose.mongo.MongoServerError>;
    expect(serverError.code).toBe(11000);
    expect(serverError.message).toMatch(
      new RegExp(
        `^E11000 duplicate key error collection: ${dbName}\\.items index: org_1_name_1 dup key: \\{ org: ObjectId\\('${org.toHexString()}'\\), name: "dup\\.jpg" \\}$`,
      ),
    );
    expect(serverError.keyPattern).toEqual({ org: 1, name: 1 });
    const keyValue = serverError.keyValue as Record<string, unknown> | undefined;
    expect(String(keyValue?.org)).toBe(org.toHexString());
    expect(keyValue?.name).toBe('dup.jpg');
    // The same name in another organization is fine.
    await expect(
      Item.create({ org: new mongoose.Types.ObjectId(), name: 'dup.jpg' }),
    ).resolves.toBeDefined();
  });

  it('stops an ordered insertMany at the first duplicate', async () => {
    const batchOrg = new mongoose.Types.ObjectId();
    const error = await Item.insertMany([
      { org: batchOrg, name: 'a' },
      { org: batchOrg, name: 'b' },
      { org: batchOrg, name: 'a' },
      { org: batchOrg, name: 'c' },
    ]).then(
      () => undefined,
      (err: unknown) => err as { code?: number },
    );
    expect(error?.code).toBe(11000);
    const names = (await Item.find({ org: batchOrg }).sort({ name: 1 }).lean()).map((d) => d.name);
    expect(names).toEqual(['a', 'b']);
  });

  it('enforces uniqueness on updates and on upserts too', async () => {
    const updateOrg = new mongoose.Types.ObjectId();
    await Item.create([
      { org: updateOrg, name: 'one' },
      { org: updateOrg, name: 'two' },
    ]);
    await expect(
      Item.updateOne({ org: updateOrg, name: 'two' }, { $set: { name: 'one' } }),
    ).rejects.toMatchObject({
      code: 11000,
    });
    await expect(
      Item.findOneAndUpdate({ org: updateOrg, name: 'two' }, { $set: { name: 'one' } }),
    ).rejects.toMatchObject({ code: 11000 });
    await expect(
      Item.findOneAndUpdate(
        { org: updateOrg, name: 'three' },
        { $set: { seq: 1_000_001 } },
        { upsert: true },
      ),
    ).resolves.toBeNull();
    await expect(
      Item.findOneAndUpdate(
        { org: updateOrg, name: 'four' },
        { $set: { seq: 1_000_001 } },
        { upsert: true },
      ),
    ).rejects.toMatchObject({ code: 11000, keyValue: { seq: 1_000_001 } });
    expect((await Item.find({ org: updateOrg }).lean()).map((d) => d.name).sort()).toEqual([
      'one',
      'three',
      'two',
    ]);
  });

  it('leaves documents without the field out of a sparse unique index', async () => {
    const sparseOrg = new mongoose.Types.ObjectId();
    await expect(
      Item.insertMany([
        { org: sparseOrg, name: 'no-seq-1' },
        { org: sparseOrg, name: 'no-seq-2' },
      ]),
    ).resolves.toHaveLength(2);
  });

  it('treats an identical createIndex as a no-op and fails to build a unique index over duplicates', async () => {
    const raw = conn.collection(`raw_${uniqueSuffix()}`);
    await raw.insertMany([{ v: 1 }, { v: 1 }, { v: 2 }]);
    await expect(raw.createIndex({ v: 1 })).resolves.toBe('v_1');
    await expect(raw.createIndex({ v: 1 })).resolves.toBe('v_1');
    await expect(raw.createIndex({ v: -1 }, { unique: true })).rejects.toMatchObject({
      code: 11000,
    });
    expect((await raw.indexes()).map((index) => index.name).sort()).toEqual(['_id_', 'v_1']);
  });
});

describe('reads and writes', () => {
  const org = new mongoose.Types.ObjectId();
  const total = 250;

  beforeAll(async () => {
    // Inserted out of order so that sorting has work to do.
    const order = Array.from({ length: total }, (_, i) => (i * 97) % total);
    await Item.insertMany(
      order.map((n) => ({
        org,
        name: `file-${String(n).padStart(3, '0')}`,
        size: n,
        kind: n % 3 === 0 ? 'pdf' : 'image',
      })),
    );
  });

  it('insertMany stored every document', async () => {
    expect(await Item.countDocuments({ org })).toBe(total);
    expect(await Item.countDocuments({ org, kind: 'pdf' })).toBe(84);
    expect(await Item.countDocuments({ org, size: { $gte: 200 } })).toBe(50);
    expect(await Item.estimatedDocumentCount()).toBeGreaterThanOrEqual(total);
  });

  it('sorts a result larger than one batch and returns every document in order (getMore)', async () => {
    const getMoresBefore = commands.filter((name) => name === 'getMore').length;
    const docs = await Item.find({ org }).sort({ size: 1 }).lean();
    expect(docs.map((d) => d.size)).toEqual(Array.from({ length: total }, (_, i) => i));
    expect(commands.filter((name) => name === 'getMore').length).toBeGreaterThan(getMoresBefore);

    const descending = await Item.find({ org })
      .sort({ name: -1 })
      .select({ name: 1, _id: 0 })
      .lean();
    expect(descending[0]).toEqual({ name: 'file-249' });
    expect(descending.at(-1)).toEqual({ name: 'file-000' });
  });

  it('paginates with skip and limit', async () => {
    const page = await Item.find({ org }).sort({ size: 1 }).skip(40).limit(20).lean();
    expect(page.map((d) => d.size)).toEqual(Array.from({ length: 20 }, (_, i) => 40 + i));
    const last = await Item.find({ org }).sort({ size: 1 }).skip(240).limit(20).lean();
    expect(last.map((d) => d.size)).toEqual(Array.from({ length: 10 }, (_, i) => 240 + i));
    const cursorDocs: number[] = [];
    for await (const doc of Item.find({ org, kind: 'image' })
      .sort({ size: -1 })
      .batchSize(7)
      .lean()) {
      cursorDocs.push(doc.size!);
    }
    expect(cursorDocs).toHaveLength(total - 84);
    expect(cursorDocs[0]).toBe(248);
  });

  it('aggregates with $match, $group and $sort', async () => {
    const groups = await Item.aggregate<{ _id: string; count: number; bytes: number }>([
      { $match: { org } },
      { $group: { _id: '$kind', count: { $sum: 1 }, bytes: { $sum: '$size' } } },
      { $sort: { _id: 1 } },
    ]);
    const pdfSizes = Array.from({ length: total }, (_, i) => i).filter((n) => n % 3 === 0);
    const pdfBytes = pdfSizes.reduce((a, b) => a + b, 0);
    expect(groups).toEqual([
      { _id: 'image', count: total - 84, bytes: (total * (total - 1)) / 2 - pdfBytes },
      { _id: 'pdf', count: 84, bytes: pdfBytes },
    ]);
  });

  it('answers distinct', async () => {
    expect((await Item.distinct('kind', { org })).sort()).toEqual(['image', 'pdf']);
  });

  it('updateOne reports matched and modified counts', async () => {
    const result = await Item.updateOne({ org, name: 'file-007' }, { $set: { kind: 'raw' } });
    expect(result).toMatchObject({ acknowledged: true, matchedCount: 1, modifiedCount: 1 });
    // Without the timestamp bump, setting the same value again modifies nothing.
    const unchanged = await Item.updateOne(
      { org, name: 'file-007' },
      { $set: { kind: 'raw' } },
      { timestamps: false },
    );
    expect(unchanged).toMatchObject({ matchedCount: 1, modifiedCount: 0 });
    const none = await Item.updateOne({ org, name: 'missing' }, { $set: { kind: 'raw' } });
    expect(none).toMatchObject({ matchedCount: 0, modifiedCount: 0, upsertedCount: 0 });
    expect((await Item.findOne({ org, name: 'file-007' }).lean())?.kind).toBe('raw');
  });

  it('updateMany with $inc and $unset', async () => {
    const result = await Item.updateMany(
      { org, size: { $lt: 10 } },
      { $inc: { size: 1000 }, $unset: { kind: 1 } },
    );
    expect(result).toMatchObject({ matchedCount: 10, modifiedCount: 10 });
    const bumped = await Item.find({ org, size: { $gte: 1000 } })
      .sort({ size: 1 })
      .lean();
    expect(bumped.map((d) => d.size)).toEqual(Array.from({ length: 10 }, (_, i) => 1000 + i));
    expect(bumped.every((d) => d.kind === undefined)).toBe(true);
  });

  it('deleteMany removes exactly the matching documents', async () => {
    const result = await Item.deleteMany({ org, size: { $gte: 200, $lt: 1000 } });
    expect(result).toMatchObject({ acknowledged: true, deletedCount: 50 });
    expect(await Item.countDocuments({ org })).toBe(total - 50);
    expect(await Item.deleteMany({ org, name: 'missing' })).toMatchObject({ deletedCount: 0 });
  });
});

describe('BSON round trips', () => {
  it('keeps ObjectId, Date, Buffer, nested documents and nested arrays (hydrated and lean)', async () => {
    const org = new mongoose.Types.ObjectId();
    const takenAt = new Date('2024-02-29T12:34:56.789Z');
    const data = Buffer.from([0, 1, 2, 250, 255]);
    const created = await Item.create({
      org,
      name: 'types.bin',
      takenAt,
      data,
      matrix: [[1, 2.5], [], [3]],
      meta: { width: 640, height: 480, tags: ['a', 'b'] },
    });

    const hydrated = await Item.findById(created._id);
    expect(hydrated?._id.equals(created._id)).toBe(true);
    expect(hydrated?.org.equals(org)).toBe(true);
    expect(hydrated?.takenAt?.toISOString()).toBe(takenAt.toISOString());
    expect(Buffer.from(hydrated!.data!).equals(data)).toBe(true);

    const lean = await Item.findById(created._id).lean();
    expect(lean?._id).toBeInstanceOf(mongoose.Types.ObjectId);
    expect(lean?.org).toBeInstanceOf(mongoose.Types.ObjectId);
    expect(lean?.takenAt).toBeInstanceOf(Date);
    expect(lean?.takenAt?.getTime()).toBe(takenAt.getTime());
    const leanData = lean?.data as unknown as InstanceType<typeof mongoose.mongo.Binary>;
    expect(Buffer.from(leanData.buffer).equals(data)).toBe(true);
    expect(lean?.matrix).toEqual([[1, 2.5], [], [3]]);
    expect(lean?.meta).toEqual({ width: 640, height: 480, tags: ['a', 'b'] });
    expect((lean as { createdAt?: unknown })?.createdAt).toBeInstanceOf(Date);

    // Queries match on ObjectId and Date values.
    expect(await Item.countDocuments({ org })).toBe(1);
    expect(await Item.countDocuments({ org: { $in: [org, new mongoose.Types.ObjectId()] } })).toBe(
      1,
    );
    expect(await Item.countDocuments({ org: { $ne: org }, _id: created._id })).toBe(0);
    expect(await Item.countDocuments({ _id: created._id, takenAt: { $gte: takenAt } })).toBe(1);
    expect(await Item.countDocuments({ _id: created._id, takenAt: { $gt: takenAt } })).toBe(0);
    expect(await Item.countDocuments({ _id: created._id, 'meta.tags': 'b' })).toBe(1);
  });

  it('orders and compares ObjectIds by their bytes', async () => {
    const org = new mongoose.Types.ObjectId();
    const ids = ['0a', '0b', 'f0'].map(
      (end) => new mongoose.Types.ObjectId(`65a00000000000000000${end}00`),
    );
    await Item.insertMany(
      [ids[1], ids[2], ids[0]].map((_id, i) => ({ _id, org, name: `oid-${i}` })),
    );
    const descending = await Item.find({ org }).sort({ _id: -1 }).lean();
    expect(descending.map((d) => d._id.toHexString())).toEqual(
      [ids[2], ids[1], ids[0]].map(String),
    );
    expect(await Item.countDocuments({ org, _id: { $gt: ids[0] } })).toBe(2);
    expect(await Item.countDocuments({ org, _id: { $in: [ids[0], ids[2]] } })).toBe(2);
    expect((await Item.findById(ids[1]).lean())?.name).toBe('oid-0');
  });

  it('keeps Int32, Long, Double and Decimal128 types exactly', async () => {
    const { Int32, Long, Double, Decimal128 } = mongoose.mongo;
    const raw = conn.db!.collection<{ _id: string } & Record<string, unknown>>(
      `types_${uniqueSuffix()}`,
    );
    const big = Long.fromString('9007199254740993');
    await raw.insertOne({
      _id: 'numbers',
      i: new Int32(7),
      l: Long.fromNumber(7),
      big,
      d: new Double(7),
      dec: Decimal128.fromString('1234567890.123456789'),
    });
    const typed = await raw.findOne(
      { _id: 'numbers' },
      { promoteValues: false, promoteLongs: false },
    );
    expect(typed?.i).toBeInstanceOf(Int32);
    expect(typed?.l).toBeInstanceOf(Long);
    expect(typed?.d).toBeInstanceOf(Double);
    expect((typed?.big as InstanceType<typeof Long>).toString()).toBe('9007199254740993');
    expect(typed?.dec).toBeInstanceOf(Decimal128);
    expect(String(typed?.dec)).toBe('1234567890.123456789');
    // A Long beyond 2^53 stays a Long even with the default promotion.
    const promoted = await raw.findOne({ _id: 'numbers' });
    expect(promoted).toMatchObject({ i: 7, l: 7, d: 7 });
    expect(promoted?.big).toBeInstanceOf(Long);
    // Numbers of different types compare equal in queries.
    expect(await raw.countDocuments({ i: 7, l: 7.0, d: new Int32(7) })).toBe(1);
  });
});

describe('concurrency', () => {
  it('200 concurrent inserts from 4 connections get unique counter values and none is lost', async () => {
    const connections = await Promise.all(
      Array.from({ length: 4 }, () => mongoose.createConnection(uri).asPromise()),
    );
    try {
      const perConnection = 50;
      const inserted = await Promise.all(
        connections.map((c, ci) => {
          const models = modelsOn(c);
          return Promise.all(
            Array.from({ length: perConnection }, async (_, i) => {
              const seq = await nextSeq(models.Counter, 'uploads');
              await models.Item.create({
                org: new mongoose.Types.ObjectId(),
                name: `c${ci}-${i}`,
                seq,
              });
              return seq;
            }),
          );
        }),
      );
      const seqs = inserted.flat().sort((a, b) => a - b);
      expect(seqs).toEqual(Array.from({ length: 200 }, (_, i) => i + 1));
      expect(await Item.countDocuments({ seq: { $gte: 1, $lte: 200 } })).toBe(200);
      expect((await Item.distinct('seq', { seq: { $lte: 200 } })).length).toBe(200);
      expect((await Counter.findById('uploads').lean())?.seq).toBe(200);
    } finally {
      await Promise.all(connections.map((c) => c.close()));
    }
  });
});
