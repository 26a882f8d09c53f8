/**
 * Query, projection and command semantics where a lenient stand-in would hide
 * product bugs, asserted as real MongoDB (7.0) behaves, for whatever MongoDB
 * the suite runs against (a fresh stand-in, or the real server MONGODB_URI
 * names; see README.md): positional and $elemMatch projections, collations,
 * $type, $all, filters validated on a missing collection, the order of an
 * inclusion projection, and the server commands mongoose and its tests use
 * (serverStatus, collMod, setParameter, create). Updates are
 * mongoose-compat-updates.test.ts; the service's own usage is
 * mongoose-compat.test.ts.
 */
import mongoose, { Schema, type Connection } from 'mongoose';

import { mongoTarget, uniqueSuffix, type MongoTarget } from './support';

const { Binary, Double, Int32, Long, ObjectId } = mongoose.mongo;

let target: MongoTarget;
let conn: Connection;

beforeAll(async () => {
  target = await mongoTarget();
  conn = await mongoose
    .createConnection(target.uri(`compat_queries_${uniqueSuffix()}`))
    .asPromise();
});

afterAll(async () => {
  await conn?.dropDatabase();
  await conn?.close();
  await target?.close();
});

function raw(prefix: string) {
  return conn.db!.collection<Record<string, unknown>>(`${prefix}_${uniqueSuffix()}`);
}

async function serverError(promise: Promise<unknown>): Promise<{ code?: number; message: string }> {
  const outcome = await promise.then(
    () => undefined,
    (error: unknown) => error as { code?: number; message: string },
  );
  if (!outcome) throw new Error('expected the server to refuse the operation');
  return outcome;
}

describe('projections (items 4, 5, 11)', () => {
  let c: ReturnType<typeof raw>;

  beforeAll(async () => {
    c = raw('projection');
    await c.insertOne({
      _id: 'p',
      name: 'n',
      arr: [{ a: 1 }, { a: 2, b: 'x' }, { a: 2 }],
      tags: ['a', 'b', 'c'],
    } as never);
  });

  it('arr.$ returns the first element the query matched', async () => {
    const doc = await c.findOne({ 'arr.a': 2 }, { projection: { 'arr.$': 1 } });
    expect(doc).toEqual({ _id: 'p', arr: [{ a: 2, b: 'x' }] });
  });

  it('mongoose: select("arr.$")', async () => {
    const Model = conn.model(
      'PositionalSelect',
      new Schema({ arr: [{ a: Number, b: String }] }),
      c.collectionName,
    );
    const doc = await Model.findOne({ 'arr.a': 2 }).select('arr.$').lean();
    expect(doc?.arr).toEqual([{ a: 2, b: 'x' }]);
  });

  it('$elemMatch with operators on an array of plain values', async () => {
    const doc = await c.findOne({}, { projection: { tags: { $elemMatch: { $in: ['b', 'c'] } } } });
    expect(doc).toEqual({ _id: 'p', tags: ['b'] });
    const none = await c.findOne({}, { projection: { tags: { $elemMatch: { $gt: 'z' } } } });
    expect(none).toEqual({ _id: 'p' });
  });

  it('an inclusion projection puts _id first, then the fields in document order', async () => {
    const doc = await c.findOne({ _id: 'p' } as never, { projection: { tags: 1, name: 1 } });
    expect(Object.keys(doc!)).toEqual(['_id', 'name', 'tags']);
  });
});

describe('collation (item 6)', () => {
  let c: ReturnType<typeof raw>;

  beforeAll(async () => {
    c = raw('collation');
    await c.insertMany([{ name: 'alpha' }, { name: 'ALPHA' }, { name: 'Álpha' }, { name: 'Zeta' }]);
  });

  it('accepts ICU locales such as en_US and sorts with them', async () => {
    const names = await c
      .find({}, { collation: { locale: 'en_US' }, sort: { name: 1 }, projection: { _id: 0 } })
      .toArray();
    expect(names.map((d) => d.name)).toEqual(['alpha', 'ALPHA', 'Álpha', 'Zeta']);
  });

  it('strength 1 ignores case and accents; strength 2 ignores case only', async () => {
    expect(
      await c.countDocuments({ name: 'alpha' }, { collation: { locale: 'en', strength: 1 } }),
    ).toBe(3);
    expect(
      await c.countDocuments({ name: 'alpha' }, { collation: { locale: 'en', strength: 2 } }),
    ).toBe(2);
    expect(
      await c.countDocuments(
        { name: { $in: ['zeta'] } },
        { collation: { locale: 'en', strength: 2 } },
      ),
    ).toBe(1);
    expect(await c.countDocuments({ name: 'alpha' })).toBe(1);
    const distinct = await c.distinct('name', {}, { collation: { locale: 'en', strength: 2 } });
    expect(distinct).toHaveLength(3);
  });

  it('a unique index with a collation refuses keys the collation calls equal', async () => {
    const unique = raw('collated_unique');
    await unique.createIndex(
      { name: 1 },
      { unique: true, collation: { locale: 'en', strength: 2 } },
    );
    await unique.insertOne({ name: 'Alpha' });
    expect((await serverError(unique.insertOne({ name: 'alpha' }))).code).toBe(11000);
    await expect(unique.insertOne({ name: 'Álpha' })).resolves.toBeDefined();
  });

  it("a collection's default collation applies when the operation names none", async () => {
    const name = `collated_${uniqueSuffix()}`;
    const collated = await conn.db!.createCollection(name, {
      collation: { locale: 'en', strength: 2 },
    });
    await collated.insertMany([{ name: 'alpha' }, { name: 'Zeta' }]);
    expect(await collated.countDocuments({ name: 'ALPHA' })).toBe(1);
    const sorted = await collated.find({}, { sort: { name: 1 } }).toArray();
    expect(sorted.map((d) => d.name as string)).toEqual(['alpha', 'Zeta']);
    expect(await collated.deleteMany({ name: 'ZETA' })).toMatchObject({ deletedCount: 1 });
  });
});

describe('$type (item 7)', () => {
  it('tells int, double, long, objectId, binData and date apart', async () => {
    const c = raw('types');
    await c.insertOne({
      _id: 't',
      i: new Int32(1),
      d: new Double(1),
      l: Long.fromNumber(1),
      o: new ObjectId(),
      b: new Binary(Buffer.from([1])),
      dt: new Date(),
      arr: [new Int32(1), 'x'],
    } as never);
    const count = (filter: Record<string, unknown>) => c.countDocuments(filter);
    expect(await count({ i: { $type: 'int' } })).toBe(1);
    expect(await count({ i: { $type: 'double' } })).toBe(0);
    expect(await count({ d: { $type: 'double' } })).toBe(1);
    expect(await count({ d: { $type: 'int' } })).toBe(0);
    expect(await count({ l: { $type: 'long' } })).toBe(1);
    expect(await count({ l: { $type: 18 } })).toBe(1);
    expect(await count({ o: { $type: 'objectId' } })).toBe(1);
    expect(await count({ b: { $type: 'binData' } })).toBe(1);
    expect(await count({ dt: { $type: 'date' } })).toBe(1);
    expect(await count({ i: { $type: 'number' }, l: { $type: 'number' } })).toBe(1);
    expect(await count({ arr: { $type: 'string' } })).toBe(1);
    expect(await count({ arr: { $type: 'array' } })).toBe(1);
    expect((await serverError(count({ i: { $type: 'notAType' } }))).code).toBe(2);
  });
});

describe('$all (item 9)', () => {
  it('matches a field that is not an array when it equals every value', async () => {
    const c = raw('all');
    await c.insertMany([{ tag: 'x' }, { tag: ['x', 'y'] }, { tag: 'y' }]);
    expect(await c.countDocuments({ tag: { $all: ['x'] } })).toBe(2);
    expect(await c.countDocuments({ tag: { $all: ['x', 'y'] } })).toBe(1);
    expect(await c.countDocuments({ tag: { $all: [] } })).toBe(0);
  });
});

describe('order of an unsorted query on _id', () => {
  it('follows the _id index (mongoose populate with a limit relies on it)', async () => {
    const c = raw('id_order');
    await c.insertMany([{ _id: 2 }, { _id: 1 }, { _id: 4 }, { _id: 3 }] as never[]);
    const docs = await c.find({ _id: { $in: [4, 3, 2, 1] } } as never, { limit: 2 }).toArray();
    expect(docs.map((d) => d._id as unknown as number)).toEqual([1, 2]);
  });
});

describe('a filter is validated on a missing collection too (item 10)', () => {
  const bad = { $notAnOperator: 1 };

  it('find, count, distinct, update and delete answer BadValue (2)', async () => {
    const missing = conn.db!.collection(`missing_${uniqueSuffix()}`);
    expect((await serverError(missing.find(bad).toArray())).code).toBe(2);
    expect((await serverError(missing.countDocuments(bad))).code).toBe(2);
    expect((await serverError(missing.distinct('a', bad))).code).toBe(2);
    expect((await serverError(missing.updateOne(bad, { $set: { a: 1 } }))).code).toBe(2);
    expect((await serverError(missing.deleteMany(bad))).code).toBe(2);
    expect((await serverError(missing.find({ a: { $notAnOperator: 1 } }).toArray())).code).toBe(2);
  });
});

describe('commands (item 11)', () => {
  it('serverStatus reports the version', async () => {
    const status = await conn.db!.admin().serverStatus();
    expect(status.ok).toBe(1);
    expect(status.version).toMatch(/^\d+\.\d+\.\d+/);
    expect(typeof status.uptime).toBe('number');
  });

  it('collMod hides an index (mongoose syncIndexes({ hideIndexes: true }))', async () => {
    const c = raw('collmod');
    await c.createIndex({ a: 1 });
    const reply = await conn.db!.command({
      collMod: c.collectionName,
      index: { name: 'a_1', hidden: true },
    });
    expect(reply).toMatchObject({ ok: 1, hidden_old: false, hidden_new: true });
    const index = (await c.indexes()).find((spec) => spec.name === 'a_1');
    expect(index?.hidden).toBe(true);
    const missing = await serverError(
      conn.db!.command({ collMod: c.collectionName, index: { name: 'nope', hidden: true } }),
    );
    expect(missing.code).toBe(27);
  });

  it('setParameter answers the previous value and refuses unknown parameters', async () => {
    const admin = conn.db!.admin();
    const reply = await admin.command({ setParameter: 1, ttlMonitorSleepSecs: 1 });
    expect(reply.ok).toBe(1);
    expect(reply).toHaveProperty('was');
    expect((await serverError(admin.command({ setParameter: 1, notAParameter: 1 }))).code).toBe(72);
  });

  it('a capped collection needs a size (InvalidOptions, 72)', async () => {
    const error = await serverError(
      conn.db!.createCollection(`capped_${uniqueSuffix()}`, { capped: true }),
    );
    expect(error.code).toBe(72);
    expect(error.message).toMatch(/the 'size' field is required when 'capped' is true/);
  });

  it('a capped collection keeps its newest documents up to max', async () => {
    const capped = await conn.db!.createCollection(`capped_${uniqueSuffix()}`, {
      capped: true,
      size: 4096,
      max: 3,
    });
    await capped.insertMany([1, 2, 3, 4, 5].map((n) => ({ n })));
    const kept = await capped.find({}, { projection: { _id: 0 } }).toArray();
    expect(kept.map((d) => d.n as number)).toEqual([3, 4, 5]);
  });

  it('a collection validator ($jsonSchema) refuses invalid documents (121) unless bypassed', async () => {
    const name = `validated_${uniqueSuffix()}`;
    const validated = await conn.db!.createCollection(name, {
      validator: {
        $jsonSchema: {
          bsonType: 'object',
          required: ['name'],
          properties: { name: { bsonType: 'string' }, age: { bsonType: ['int', 'null'] } },
        },
      },
    });
    await validated.insertOne({ name: 'ok', age: 3 });
    expect((await serverError(validated.insertOne({ age: 3 }))).code).toBe(121);
    expect(
      (await serverError(validated.updateOne({ name: 'ok' }, { $set: { age: 'three' } }))).code,
    ).toBe(121);
    await validated.insertOne({ age: 4 }, { bypassDocumentValidation: true });
    expect(await validated.countDocuments()).toBe(2);
  });

  it("an unknown aggregation stage is MongoDB's 40324", async () => {
    const error = await serverError(
      raw('agg')
        .aggregate([{ $fakeStage: {} }])
        .toArray(),
    );
    expect(error.code).toBe(40324);
    expect(error.message).toMatch(/Unrecognized pipeline stage name: '\$fakeStage'/);
  });
});
