/**
 * Update semantics where a lenient stand-in would hide product bugs, asserted
 * as real MongoDB (7.0) behaves, for whatever MongoDB the suite runs against (a
 * fresh stand-in, or the real server MONGODB_URI names; see README.md): several
 * fields of one array element in one update (what mongoose sends for every
 * positional update of a subdocument with timestamps), $pull with $or, the
 * updates MongoDB refuses (with its error codes), a Binary's subtype, and
 * `$`-prefixed field names. The rest of the mongoose suite is
 * mongoose-compat.test.ts and mongoose-compat-queries.test.ts.
 */
import mongoose, { Schema, type Connection } from 'mongoose';

import { mongoTarget, uniqueSuffix, type MongoTarget } from './support';

const { Binary, Int32, ObjectId } = mongoose.mongo;

let target: MongoTarget;
let conn: Connection;

beforeAll(async () => {
  target = await mongoTarget();
  conn = await mongoose
    .createConnection(target.uri(`compat_updates_${uniqueSuffix()}`))
    .asPromise();
});

afterAll(async () => {
  await conn?.dropDatabase();
  await conn?.close();
  await target?.close();
});

/** A fresh raw collection (no mongoose casting between the test and the server). */
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

describe('several fields of one array element in one update (item 1)', () => {
  const childSchema = new Schema({ name: String, count: Number }, { timestamps: true });
  const parentSchema = new Schema({ title: String, children: [childSchema] });

  it('mongoose: a positional update of a subdocument with timestamps sets the field and children.$.updatedAt', async () => {
    const Parent = conn.model('PositionalParent', parentSchema);
    const parent = await Parent.create({
      title: 'p',
      children: [{ name: 'a' }, { name: 'b' }],
    });
    const childId = parent.children[1]!._id;
    const before: unknown = parent.children[1]!.get('updatedAt');
    await new Promise((resolve) => setTimeout(resolve, 5));
    const result = await Parent.updateOne(
      { _id: parent._id, 'children._id': childId },
      { $set: { 'children.$.name': 'renamed' } },
    );
    expect(result.modifiedCount).toBe(1);
    const stored = await Parent.findById(parent._id).lean();
    const child = stored!.children[1] as unknown as { name: string; updatedAt: Date };
    expect(child.name).toBe('renamed');
    expect(child.updatedAt.getTime()).toBeGreaterThan((before as Date).getTime());
    expect((stored!.children[0] as unknown as { name: string }).name).toBe('a');
  });

  it('$, $[] and $[id] paths to two fields of the same element', async () => {
    const c = raw('multi_field');
    await c.insertOne({ _id: 'doc', arr: [{ k: 1 }, { k: 2 }, { k: 3 }] } as never);
    await c.updateOne({ _id: 'doc', 'arr.k': 2 } as never, {
      $set: { 'arr.$.a': 'x', 'arr.$.b': 'y' },
    });
    await c.updateOne({ _id: 'doc' } as never, { $set: { 'arr.$[].seen': true, 'arr.$[].n': 0 } });
    await c.updateOne(
      { _id: 'doc' } as never,
      { $set: { 'arr.$[e].big': true }, $inc: { 'arr.$[e].n': 5 } } as never,
      { arrayFilters: [{ 'e.k': { $gte: 3 } }] },
    );
    expect((await c.findOne({ _id: 'doc' } as never))?.arr).toEqual([
      { k: 1, seen: true, n: 0 },
      { k: 2, a: 'x', b: 'y', seen: true, n: 0 },
      { k: 3, seen: true, n: 5, big: true },
    ]);
  });

  it('still refuses two updates of one path, or of a path and its prefix (code 40)', async () => {
    const c = raw('conflict');
    await c.insertOne({ _id: 'doc', arr: [{ k: 1 }] } as never);
    const prefix = await serverError(
      c.updateOne({ _id: 'doc', 'arr.k': 1 } as never, {
        $set: { 'arr.$': { k: 9 }, 'arr.$.k': 2 },
      }),
    );
    expect(prefix.code).toBe(40);
    const same = await serverError(
      c.updateOne(
        { _id: 'doc' } as never,
        { $set: { 'arr.0.k': 1 }, $inc: { 'arr.0.k': 1 } } as never,
      ),
    );
    expect(same.code).toBe(40);
  });
});

describe('$pull (item 2)', () => {
  it('removes the elements an $or condition matches', async () => {
    const c = raw('pull_or');
    await c.insertOne({
      _id: 'doc',
      arr: [{ a: 1 }, { b: 2 }, { a: 3 }, { c: 4 }],
    } as never);
    const result = await c.updateOne(
      { _id: 'doc' } as never,
      {
        $pull: { arr: { $or: [{ a: 1 }, { b: 2 }] } },
      } as never,
    );
    expect(result.modifiedCount).toBe(1);
    expect((await c.findOne({ _id: 'doc' } as never))?.arr).toEqual([{ a: 3 }, { c: 4 }]);
  });

  it('matches documents by their fields, values by operators, and leaves other elements', async () => {
    const c = raw('pull_forms');
    await c.insertOne({
      _id: 'doc',
      docs: [{ a: 1, b: 1 }, { a: 1 }, 5],
      nums: [1, 5, 10],
    } as never);
    await c.updateOne(
      { _id: 'doc' } as never,
      {
        $pull: { docs: { a: 1 }, nums: { $gte: 5 } },
      } as never,
    );
    expect(await c.findOne({ _id: 'doc' } as never)).toEqual({ _id: 'doc', docs: [5], nums: [1] });
  });
});

describe('updates MongoDB refuses (item 3)', () => {
  let c: ReturnType<typeof raw>;

  beforeAll(async () => {
    c = raw('refused');
    await c.insertOne({ _id: 'doc', arr: [1, 2], docs: [{ a: 1 }], n: 5, s: 'text' } as never);
  });

  it('$set through an array element path that is not viable: PathNotViable (28)', async () => {
    expect(
      (await serverError(c.updateOne({ _id: 'doc' } as never, { $set: { 'arr.name': 'x' } }))).code,
    ).toBe(28);
    expect(
      (await serverError(c.updateOne({ _id: 'doc' } as never, { $set: { 'docs.a': 2 } }))).code,
    ).toBe(28);
    expect(
      (await serverError(c.updateOne({ _id: 'doc' } as never, { $set: { 'n.sub': 1 } }))).code,
    ).toBe(28);
  });

  it('$push onto a number: BadValue (2)', async () => {
    const error = await serverError(
      c.updateOne({ _id: 'doc' } as never, { $push: { n: 1 } } as never),
    );
    expect(error.code).toBe(2);
    expect(error.message).toMatch(/must be an array but is of type int/);
  });

  it('$inc on an array or a string: TypeMismatch (14)', async () => {
    const onArray = await serverError(
      c.updateOne({ _id: 'doc' } as never, { $inc: { arr: 1 } } as never),
    );
    expect(onArray.code).toBe(14);
    expect(onArray.message).toMatch(/Cannot apply \$inc to a value of non-numeric type/);
    expect(
      (await serverError(c.updateOne({ _id: 'doc' } as never, { $inc: { s: 1 } } as never))).code,
    ).toBe(14);
  });

  it('leaves the document as it was', async () => {
    expect(await c.findOne({ _id: 'doc' } as never)).toEqual({
      _id: 'doc',
      arr: [1, 2],
      docs: [{ a: 1 }],
      n: 5,
      s: 'text',
    });
  });

  it('an $inc of an int past 2^31 gives a long, as MongoDB does', async () => {
    const counters = raw('overflow');
    await counters.insertOne({ _id: 'c', v: new Int32(2_147_483_647) } as never);
    await counters.updateOne({ _id: 'c' } as never, { $inc: { v: new Int32(1) } } as never);
    const typed = await counters.findOne({ _id: 'c' } as never, { promoteLongs: false });
    expect((typed?.v as { _bsontype?: string })._bsontype).toBe('Long');
    expect(String(typed?.v)).toBe('2147483648');
  });
});

describe("a Binary's subtype (item 8)", () => {
  it('changing only the subtype is a change, written and matched exactly', async () => {
    const c = raw('subtype');
    const bytes = Buffer.from([1, 2, 3, 4]);
    await c.insertOne({ _id: 'b', data: new Binary(bytes, 0) } as never);
    const result = await c.updateOne({ _id: 'b' } as never, {
      $set: { data: new Binary(bytes, 128) },
    });
    expect(result.modifiedCount).toBe(1);
    const stored = await c.findOne({ _id: 'b' } as never);
    expect((stored?.data as InstanceType<typeof Binary>).sub_type).toBe(128);
    expect(await c.countDocuments({ data: new Binary(bytes, 0) })).toBe(0);
    expect(await c.countDocuments({ data: new Binary(bytes, 128) })).toBe(1);
    expect(await c.countDocuments({ data: { $in: [new Binary(bytes, 0)] } })).toBe(0);
  });
});

describe('$-prefixed field names (item 11)', () => {
  it('a nested $-prefixed field may be set on an existing document (MongoDB 5+)', async () => {
    const c = raw('dollar');
    await c.insertOne({ _id: 'd', meta: {} } as never);
    await c.updateOne({ _id: 'd' } as never, { $set: { 'meta.$price': 5, nested: { $inner: 1 } } });
    expect(await c.findOne({ _id: 'd' } as never)).toEqual({
      _id: 'd',
      meta: { $price: 5 },
      nested: { $inner: 1 },
    });
  });

  it('a top-level $-prefixed field only when an upsert inserts', async () => {
    const c = raw('dollar_top');
    await c.updateOne(
      { date: '2021-07-07' },
      { $set: { phone: 25, $hotel: 320 } },
      { upsert: true },
    );
    expect(await c.findOne({ date: '2021-07-07' }, { projection: { _id: 0 } })).toEqual({
      date: '2021-07-07',
      phone: 25,
      $hotel: 320,
    });
    await expect(
      c.updateOne({ date: '2021-07-07' }, { $set: { $hotel: 1 } }, { upsert: true }),
    ).rejects.toBeInstanceOf(mongoose.mongo.MongoServerError);
  });

  it('ObjectIds round-trip through $setOnInsert and $addToSet', async () => {
    const c = raw('oid');
    const id = new ObjectId();
    await c.updateOne(
      { _id: 'o' } as never,
      { $setOnInsert: { owner: id }, $addToSet: { ids: id } } as never,
      {
        upsert: true,
      },
    );
    await c.updateOne({ _id: 'o' } as never, { $addToSet: { ids: id } } as never);
    const stored = await c.findOne({ _id: 'o' } as never);
    expect(String(stored?.owner)).toBe(id.toHexString());
    expect((stored?.ids as unknown[]).length).toBe(1);
  });
});
