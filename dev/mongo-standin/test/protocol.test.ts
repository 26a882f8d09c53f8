/**
 * The MongoDB wire stand-in at the protocol level: its own instance on an
 * ephemeral port, raw sockets for the handshake, OP_MSG details and malformed
 * input, the driver for command behaviour, and the `mongo-standin` command
 * (this package's `npm start`) as a separate process.
 */
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';

import { BSON, Double, Int32, Long } from 'bson';
import mongoose from 'mongoose';

import { startMongoStandin, type MongoStandin } from '../src';
import { eventually } from './support';

type Doc = Record<string, unknown>;

interface CursorReply {
  cursor: { id: Long; ns: string; firstBatch?: Doc[]; nextBatch?: Doc[] };
}

interface KillCursorsReply {
  cursorsKilled: Long[];
  cursorsNotFound: Long[];
}

interface FindAndModifyReply {
  ok: number;
  value: Doc | null;
  lastErrorObject: { n: number; updatedExisting?: boolean; upserted?: unknown };
}
const { MongoClient, MongoServerError } = mongoose.mongo;
type Client = InstanceType<typeof MongoClient>;

const OP_REPLY = 1;
const OP_QUERY = 2004;
const OP_MSG = 2013;
/** The package's directory, where `npm start` runs the `mongo-standin` command. */
const packageDir = path.resolve(__dirname, '..');

// --- raw wire messages ---------------------------------------------------------

function header(length: number, requestId: number, opCode: number): Buffer {
  const buffer = Buffer.alloc(16);
  buffer.writeInt32LE(length, 0);
  buffer.writeInt32LE(requestId, 4);
  buffer.writeInt32LE(0, 8);
  buffer.writeInt32LE(opCode, 12);
  return buffer;
}

function withLength(parts: Buffer[], requestId: number, opCode: number): Buffer {
  const body = Buffer.concat(parts);
  return Buffer.concat([header(16 + body.length, requestId, opCode), body]);
}

interface OpMsgOptions {
  flags?: number;
  sequences?: Array<{ identifier: string; documents: Doc[] }>;
  checksum?: boolean;
}

function opMsg(requestId: number, body: Doc, options: OpMsgOptions = {}): Buffer {
  const flags = Buffer.alloc(4);
  flags.writeUInt32LE((options.flags ?? 0) | (options.checksum ? 1 : 0));
  const parts = [flags, Buffer.from([0]), Buffer.from(BSON.serialize(body))];
  for (const { identifier, documents } of options.sequences ?? []) {
    const docs = Buffer.concat(documents.map((doc) => Buffer.from(BSON.serialize(doc))));
    const name = Buffer.from(`${identifier}\0`);
    const size = Buffer.alloc(4);
    size.writeInt32LE(4 + name.length + docs.length);
    parts.push(Buffer.from([1]), size, name, docs);
  }
  if (options.checksum) parts.push(Buffer.from([0xde, 0xad, 0xbe, 0xef]));
  return withLength(parts, requestId, OP_MSG);
}

function opQuery(requestId: number, ns: string, query: Doc): Buffer {
  const flags = Buffer.alloc(4);
  const skipAndReturn = Buffer.alloc(8);
  skipAndReturn.writeInt32LE(-1, 4);
  return withLength(
    [flags, Buffer.from(`${ns}\0`), skipAndReturn, Buffer.from(BSON.serialize(query))],
    requestId,
    OP_QUERY,
  );
}

interface Reply {
  opCode: number;
  responseTo: number;
  doc: Doc;
  numberReturned?: number;
}

function parseReply(message: Buffer): Reply {
  const opCode = message.readInt32LE(12);
  const responseTo = message.readInt32LE(8);
  if (opCode === OP_REPLY) {
    return {
      opCode,
      responseTo,
      numberReturned: message.readInt32LE(32),
      doc: BSON.deserialize(message.subarray(36)),
    };
  }
  expect(opCode).toBe(OP_MSG);
  expect(message.readUInt32LE(16)).toBe(0);
  expect(message[20]).toBe(0);
  return { opCode, responseTo, doc: BSON.deserialize(message.subarray(21)) };
}

/** A raw TCP connection that collects whole reply messages. */
class RawConnection {
  readonly closed: Promise<void>;
  private buffered = Buffer.alloc(0);
  private readonly replies: Buffer[] = [];
  private waiter: (() => void) | undefined;
  private isClosed = false;

  private constructor(readonly socket: net.Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffered = Buffer.concat([this.buffered, chunk]);
      while (this.buffered.length >= 4 && this.buffered.length >= this.buffered.readInt32LE(0)) {
        const length = this.buffered.readInt32LE(0);
        this.replies.push(this.buffered.subarray(0, length));
        this.buffered = this.buffered.subarray(length);
      }
      this.waiter?.();
    });
    socket.on('error', () => undefined);
    this.closed = new Promise((resolve) =>
      socket.on('close', () => {
        this.isClosed = true;
        this.waiter?.();
        resolve();
      }),
    );
  }

  static open(port: number): Promise<RawConnection> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1', () => resolve(new RawConnection(socket)));
      socket.once('error', reject);
    });
  }

  send(bytes: Buffer): void {
    this.socket.write(bytes);
  }

  async reply(timeoutMs = 5000): Promise<Reply> {
    const deadline = Date.now() + timeoutMs;
    while (this.replies.length === 0) {
      if (this.isClosed) throw new Error('connection closed before a reply');
      if (Date.now() > deadline) throw new Error('no reply in time');
      await new Promise<void>((resolve) => {
        this.waiter = resolve;
        setTimeout(resolve, 50);
      });
    }
    return parseReply(this.replies.shift()!);
  }

  async request(bytes: Buffer): Promise<Doc> {
    this.send(bytes);
    return (await this.reply()).doc;
  }

  /** Resolves true when the server closes the connection within the time. */
  async closesWithin(ms: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    });
    const result = await Promise.race([this.closed.then(() => true), timeout]);
    clearTimeout(timer);
    return result;
  }

  destroy(): void {
    this.socket.destroy();
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

// --- the suite -------------------------------------------------------------

let standin: MongoStandin;
let client: Client;
const dbName = 'standin_protocol';

beforeAll(async () => {
  standin = await startMongoStandin();
  client = await new MongoClient(`${standin.uri}/${dbName}`, {
    serverSelectionTimeoutMS: 5000,
  }).connect();
});

afterAll(async () => {
  await client?.close();
  await standin?.close();
});

describe('startMongoStandin', () => {
  it('listens on 127.0.0.1 on an ephemeral port and answers a URI without a database', () => {
    expect(standin.host).toBe('127.0.0.1');
    expect(standin.port).toBeGreaterThan(0);
    expect(standin.uri).toBe(`mongodb://127.0.0.1:${standin.port}`);
  });

  it('refuses to start when NODE_ENV is production', async () => {
    const previous = process.env.NODE_ENV;
    process.env.NODE_ENV = 'production';
    try {
      await expect(startMongoStandin()).rejects.toThrow(/production/);
    } finally {
      process.env.NODE_ENV = previous;
    }
  });

  it('close() ends open connections and stops listening', async () => {
    const other = await startMongoStandin();
    const raw = await RawConnection.open(other.port);
    await other.close();
    expect(await raw.closesWithin(2000)).toBe(true);
    await expect(RawConnection.open(other.port)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  });
});

describe('handshake', () => {
  it('answers the legacy OP_QUERY isMaster with an OP_REPLY describing a standalone', async () => {
    const raw = await RawConnection.open(standin.port);
    try {
      raw.send(
        opQuery(7, 'admin.$cmd', {
          isMaster: 1,
          helloOk: true,
          client: { driver: { name: 'raw' } },
        }),
      );
      const reply = await raw.reply();
      expect(reply).toMatchObject({ opCode: OP_REPLY, responseTo: 7, numberReturned: 1 });
      expect(reply.doc).toMatchObject({
        ok: 1,
        ismaster: true,
        helloOk: true,
        minWireVersion: 0,
        maxWireVersion: 21,
        maxBsonObjectSize: 16 * 1024 * 1024,
        maxMessageSizeBytes: 48_000_000,
        maxWriteBatchSize: 100_000,
        logicalSessionTimeoutMinutes: 30,
        readOnly: false,
      });
      expect(typeof reply.doc.connectionId).toBe('number');
      expect(reply.doc.localTime).toBeInstanceOf(Date);
      for (const absent of ['setName', 'compression', 'topologyVersion', 'msg']) {
        expect(reply.doc).not.toHaveProperty(absent);
      }
    } finally {
      raw.destroy();
    }
  });

  it('accepts the $query-wrapped form and refuses other commands over OP_QUERY', async () => {
    const raw = await RawConnection.open(standin.port);
    try {
      expect(
        await raw.request(opQuery(1, 'admin.$cmd', { $query: { ismaster: 1 } })),
      ).toMatchObject({
        ok: 1,
        ismaster: true,
      });
      expect(await raw.request(opQuery(2, 'admin.$cmd', { ping: 1 }))).toMatchObject({
        ok: 0,
        code: 352,
        codeName: 'UnsupportedOpQueryCommand',
      });
    } finally {
      raw.destroy();
    }
  });

  it('answers hello over OP_MSG with isWritablePrimary', async () => {
    const raw = await RawConnection.open(standin.port);
    try {
      raw.send(opMsg(11, { hello: 1, $db: 'admin' }));
      const reply = await raw.reply();
      expect(reply.responseTo).toBe(11);
      expect(reply.doc).toMatchObject({ ok: 1, isWritablePrimary: true, maxWireVersion: 21 });
    } finally {
      raw.destroy();
    }
  });
});

describe('OP_MSG', () => {
  it('merges document sequences (kind 1 sections) into the command', async () => {
    const raw = await RawConnection.open(standin.port);
    try {
      const inserted = await raw.request(
        opMsg(
          1,
          { insert: 'sequences', $db: dbName, ordered: true },
          {
            sequences: [
              { identifier: 'documents', documents: [{ _id: 1 }, { _id: 2 }, { _id: 3 }] },
            ],
          },
        ),
      );
      expect(inserted).toEqual({ n: 3, ok: 1 });
      const updated = await raw.request(
        opMsg(
          2,
          { update: 'sequences', $db: dbName },
          {
            sequences: [
              {
                identifier: 'updates',
                documents: [
                  { q: { _id: 1 }, u: { $set: { a: 1 } } },
                  { q: { _id: { $gte: 2 } }, u: { $set: { b: 1 } }, multi: true },
                ],
              },
            ],
          },
        ),
      );
      expect(updated).toEqual({ n: 3, nModified: 3, ok: 1 });
      const deleted = await raw.request(
        opMsg(
          3,
          { delete: 'sequences', $db: dbName },
          {
            sequences: [{ identifier: 'deletes', documents: [{ q: { b: 1 }, limit: 0 }] }],
          },
        ),
      );
      expect(deleted).toEqual({ n: 2, ok: 1 });
      expect(await client.db(dbName).collection('sequences').find().toArray()).toEqual([
        { _id: 1, a: 1 },
      ]);
    } finally {
      raw.destroy();
    }
  });

  it('ignores a trailing checksum when checksumPresent is set', async () => {
    const raw = await RawConnection.open(standin.port);
    try {
      expect(await raw.request(opMsg(5, { ping: 1, $db: 'admin' }, { checksum: true }))).toEqual({
        ok: 1,
      });
    } finally {
      raw.destroy();
    }
  });

  it('sends no reply when moreToCome is set, and still runs the command', async () => {
    const raw = await RawConnection.open(standin.port);
    try {
      raw.send(
        opMsg(
          20,
          {
            insert: 'fire_and_forget',
            $db: dbName,
            documents: [{ _id: 'x' }],
            writeConcern: { w: 0 },
          },
          { flags: 2 },
        ),
      );
      raw.send(opMsg(21, { ping: 1, $db: 'admin' }));
      const reply = await raw.reply();
      expect(reply.responseTo).toBe(21);
      expect(await client.db(dbName).collection('fire_and_forget').countDocuments()).toBe(1);
    } finally {
      raw.destroy();
    }
  });

  it('answers an OP_MSG without $db with an error and keeps the connection', async () => {
    const raw = await RawConnection.open(standin.port);
    try {
      expect(await raw.request(opMsg(1, { ping: 1 }))).toMatchObject({ ok: 0, code: 40571 });
      expect(await raw.request(opMsg(2, { ping: 1, $db: 'admin' }))).toEqual({ ok: 1 });
    } finally {
      raw.destroy();
    }
  });

  it('answers several pipelined messages in order, also when split across packets', async () => {
    const raw = await RawConnection.open(standin.port);
    try {
      const bytes = Buffer.concat([1, 2, 3].map((id) => opMsg(id, { ping: 1, $db: 'admin' })));
      for (let i = 0; i < bytes.length; i += 7) {
        raw.send(bytes.subarray(i, i + 7));
        await new Promise((resolve) => setImmediate(resolve));
      }
      const ids = [
        (await raw.reply()).responseTo,
        (await raw.reply()).responseTo,
        (await raw.reply()).responseTo,
      ];
      expect(ids).toEqual([1, 2, 3]);
    } finally {
      raw.destroy();
    }
  });
});

describe('malformed messages close only that connection', () => {
  const validBody = Buffer.from(BSON.serialize({ ping: 1, $db: 'admin' }));
  const flags = Buffer.alloc(4);
  const cases: Array<[string, () => Buffer]> = [
    ['a length below the header size', () => Buffer.concat([header(8, 1, OP_MSG).subarray(0, 8)])],
    ['a negative length', () => header(-5, 1, OP_MSG)],
    ['an absurd length (2 GB)', () => header(0x7fffffff, 1, OP_MSG)],
    ['a length above the 48 MB cap', () => header(64 * 1024 * 1024, 1, OP_MSG)],
    ['an unknown opcode', () => withLength([flags, Buffer.from([0]), validBody], 1, 9999)],
    ['a legacy OP_INSERT', () => withLength([flags, Buffer.from('db.c\0'), validBody], 1, 2002)],
    [
      'a BSON document claiming more bytes than the message holds',
      () => {
        const truncated = Buffer.from(validBody);
        truncated.writeInt32LE(validBody.length + 40, 0);
        return withLength([flags, Buffer.from([0]), truncated], 1, OP_MSG);
      },
    ],
    [
      'a BSON document cut short',
      () =>
        withLength(
          [flags, Buffer.from([0]), validBody.subarray(0, validBody.length - 6)],
          1,
          OP_MSG,
        ),
    ],
    [
      'corrupt BSON (unknown element type)',
      () => {
        const corrupt = Buffer.from(validBody);
        corrupt[4] = 0x77;
        return withLength([flags, Buffer.from([0]), corrupt], 1, OP_MSG);
      },
    ],
    ['an unknown section kind', () => withLength([flags, Buffer.from([7]), validBody], 1, OP_MSG)],
    ['an OP_MSG without a body section', () => withLength([flags], 1, OP_MSG)],
    [
      'an unknown required flag bit',
      () => withLength([Buffer.from([4, 0, 0, 0]), Buffer.from([0]), validBody], 1, OP_MSG),
    ],
  ];

  it.each(cases)('%s', async (_name, build) => {
    const collection = client.db(dbName).collection('survivors');
    await collection.insertOne({ before: true });
    const bystander = await RawConnection.open(standin.port);
    const raw = await RawConnection.open(standin.port);
    try {
      raw.send(build());
      expect(await raw.closesWithin(3000)).toBe(true);
      // Other connections keep being served.
      await expect(client.db('admin').command({ ping: 1 })).resolves.toMatchObject({ ok: 1 });
      expect(await bystander.request(opMsg(9, { ping: 1, $db: 'admin' }))).toEqual({ ok: 1 });
      expect(await collection.countDocuments({ before: true })).toBeGreaterThan(0);
    } finally {
      raw.destroy();
      bystander.destroy();
    }
  });
});

describe('commands', () => {
  it("answers an unknown command with MongoDB's CommandNotFound error", async () => {
    const error = await client
      .db(dbName)
      .command({ noSuchThing: 1 })
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    expect(error).toBeInstanceOf(MongoServerError);
    expect(error).toMatchObject({
      code: 59,
      codeName: 'CommandNotFound',
      message: "no such command: 'noSuchThing'",
      errorResponse: {
        ok: 0,
        errmsg: "no such command: 'noSuchThing'",
        code: 59,
        codeName: 'CommandNotFound',
      },
    });
  });

  it('turns a failing handler into an error reply and keeps serving', async () => {
    const collection = client.db(dbName).collection('bad_queries');
    await collection.insertOne({ a: 1 });
    await expect(collection.find({ a: { $noSuchOperator: 1 } }).toArray()).rejects.toMatchObject({
      code: 2,
      codeName: 'BadValue',
    });
    await expect(collection.updateOne({ a: 1 }, { $set: { _id: 5 } })).rejects.toMatchObject({
      code: 66,
    });
    await expect(
      client
        .db(dbName)
        .command({ aggregate: 'bad_queries', pipeline: [{ $out: 'elsewhere' }], cursor: {} }),
    ).rejects.toMatchObject({ code: 238 });
    await expect(collection.countDocuments()).resolves.toBe(1);
  });

  it('batches find results with real cursors: firstBatch, getMore, exhaustion, killCursors', async () => {
    const db = client.db(dbName);
    await db
      .collection<{ _id: number }>('batched')
      .insertMany(Array.from({ length: 25 }, (_, i) => ({ _id: i })));
    const command = async (cmd: Doc): Promise<CursorReply> =>
      (await db.command(cmd, { promoteLongs: false })) as CursorReply;
    const ids = (batch: Doc[] | undefined) => (batch ?? []).map((d) => d._id);

    const first = await command({ find: 'batched', sort: { _id: 1 }, batchSize: 10 });
    const id = first.cursor.id;
    expect(id).toBeInstanceOf(Long);
    expect(id.isZero()).toBe(false);
    expect(first.cursor.ns).toBe(`${dbName}.batched`);
    expect(ids(first.cursor.firstBatch)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);

    const second = await command({ getMore: id, collection: 'batched', batchSize: 10 });
    expect(ids(second.cursor.nextBatch)).toEqual([10, 11, 12, 13, 14, 15, 16, 17, 18, 19]);
    expect(second.cursor.id.equals(id)).toBe(true);

    const last = await command({ getMore: id, collection: 'batched', batchSize: 10 });
    expect(ids(last.cursor.nextBatch)).toEqual([20, 21, 22, 23, 24]);
    expect(last.cursor.id).toBeInstanceOf(Long);
    expect(last.cursor.id.isZero()).toBe(true);

    await expect(command({ getMore: id, collection: 'batched' })).rejects.toMatchObject({
      code: 43,
      codeName: 'CursorNotFound',
    });

    const open = await command({ find: 'batched', batchSize: 2 });
    const killed = (await db.command(
      { killCursors: 'batched', cursors: [open.cursor.id, Long.fromNumber(12345)] },
      { promoteLongs: false },
    )) as KillCursorsReply;
    expect(killed.cursorsKilled.map(String)).toEqual([String(open.cursor.id)]);
    expect(killed.cursorsNotFound.map(String)).toEqual(['12345']);

    const single = await command({ find: 'batched', batchSize: 3, singleBatch: true });
    expect(single.cursor.firstBatch).toHaveLength(3);
    expect(single.cursor.id.isZero()).toBe(true);

    await db.collection('big').insertMany(Array.from({ length: 150 }, (_, i) => ({ i })));
    const defaults = await command({ find: 'big' });
    expect(defaults.cursor.firstBatch).toHaveLength(101);
    const rest = await command({ getMore: defaults.cursor.id, collection: 'big' });
    expect(rest.cursor.nextBatch).toHaveLength(49);
    expect(rest.cursor.id.isZero()).toBe(true);
    const limited = await command({ find: 'big', limit: 5, skip: 10, projection: { _id: 0 } });
    expect(limited.cursor.firstBatch).toEqual([10, 11, 12, 13, 14].map((i) => ({ i })));
    expect(limited.cursor.id.isZero()).toBe(true);
  });

  it('keeps numeric BSON types through updates the way MongoDB does', async () => {
    const collection = client.db(dbName).collection('numeric_updates');
    const { insertedId: _id } = await collection.insertOne({
      i: new Int32(2_147_483_647),
      d: new Double(1.5),
      j: new Int32(1),
      k: new Int32(3),
    });
    await collection.updateOne(
      { _id },
      {
        $inc: { i: new Int32(1), d: new Int32(1), j: new Double(0.5) },
        $set: { l: Long.fromNumber(5), dd: new Double(2) },
      },
    );
    const doc = await collection.findOne({ _id }, { promoteValues: false, promoteLongs: false });
    expect(doc?.i).toBeInstanceOf(Long); // int32 overflow widens to long
    expect(String(doc?.i)).toBe('2147483648');
    expect(doc?.d).toEqual(new Double(2.5));
    expect(doc?.j).toEqual(new Double(1.5));
    expect(doc?.k).toEqual(new Int32(3));
    expect(doc?.l).toBeInstanceOf(Long);
    expect(doc?.dd).toBeInstanceOf(Double);
  });

  it('matches _id across numeric types and applies the whole filter to an _id match', async () => {
    const collection = client
      .db(dbName)
      .collection<{ _id: string | number | Double | Int32 | Long; tag?: string }>('ids');
    await collection.insertMany([{ _id: new Double(5), tag: 'five' }, { _id: 'text' }]);
    expect(await collection.findOne({ _id: 5 })).toEqual({ _id: 5, tag: 'five' });
    expect(await collection.findOne({ _id: new Int32(5), tag: 'five' })).not.toBeNull();
    expect(await collection.findOne({ _id: 5, tag: 'other' })).toBeNull();
    expect(await collection.findOne({ _id: { $eq: 'text' } })).toEqual({ _id: 'text' });
    await expect(collection.insertOne({ _id: Long.fromNumber(5) })).rejects.toMatchObject({
      code: 11000,
      message: expect.stringContaining('index: _id_ dup key: { _id: 5 }') as unknown,
    });
  });

  it('sorts array fields by their smallest (ascending) or largest (descending) element', async () => {
    const collection = client.db(dbName).collection('array_sort');
    await collection.insertMany([
      { n: 'a', x: [1, 5] },
      { n: 'b', x: [2] },
      { n: 'c', x: 3 },
      { n: 'd' },
    ]);
    const order = async (direction: 1 | -1) =>
      (await collection.find().sort({ x: direction }).toArray()).map((d) => d.n as string);
    expect(await order(1)).toEqual(['d', 'a', 'b', 'c']);
    expect(await order(-1)).toEqual(['a', 'c', 'b', 'd']);
  });

  it('applies update operators and aggregation-pipeline updates', async () => {
    const collection = client.db(dbName).collection<{
      n?: number;
      m?: number;
      arr: number[];
      items: Array<{ k: string; v: number }>;
      tags: string[];
      total?: number;
    }>('operators');
    const { insertedId: _id } = await collection.insertOne({
      n: 1,
      arr: [1, 2, 3],
      items: [
        { k: 'x', v: 1 },
        { k: 'y', v: 2 },
      ],
      tags: ['a'],
    });
    await collection.updateOne(
      { _id },
      { $rename: { n: 'm' }, $push: { arr: { $each: [4, 5], $slice: -3 } } },
    );
    await collection.updateOne(
      { _id },
      { $addToSet: { tags: { $each: ['a', 'b'] } }, $pull: { arr: 5 } },
    );
    await collection.updateOne(
      { _id },
      { $inc: { 'items.$[e].v': 10 } },
      { arrayFilters: [{ 'e.k': 'y' }] },
    );
    await collection.updateOne({ _id, 'items.k': 'x' }, { $set: { 'items.$.v': 100 } });
    await collection.updateOne({ _id }, [
      { $set: { m: { $add: ['$m', 1] }, total: { $sum: '$arr' } } },
    ]);
    expect(await collection.findOne({ _id }, { projection: { _id: 0 } })).toEqual({
      m: 2,
      arr: [3, 4],
      items: [
        { k: 'x', v: 100 },
        { k: 'y', v: 12 },
      ],
      tags: ['a', 'b'],
      total: 7,
    });
    await expect(
      collection.updateOne({ _id }, { $set: { m: 1 }, $inc: { m: 1 } }),
    ).rejects.toMatchObject({ code: 40 });
  });

  it('projects without changing the stored document', async () => {
    const collection = client.db(dbName).collection('projected');
    await collection.insertOne({ name: 'n', meta: { secret: 's', size: 1 }, list: [1, 2, 3] });
    expect(
      await collection.findOne({}, { projection: { _id: 0, 'meta.secret': 0, list: 0 } }),
    ).toEqual({ name: 'n', meta: { size: 1 } });
    expect(await collection.findOne({}, { projection: { _id: 0, list: { $slice: 1 } } })).toEqual({
      name: 'n',
      meta: { secret: 's', size: 1 },
      list: [1],
    });
    expect(await collection.findOne({}, { projection: { _id: 0 } })).toEqual({
      name: 'n',
      meta: { secret: 's', size: 1 },
      list: [1, 2, 3],
    });
  });

  it('joins collections with $lookup without changing the joined documents', async () => {
    const db = client.db(dbName);
    await db
      .collection<{ _id: string; name: string }>('owners')
      .insertOne({ _id: 'o1', name: 'Ann' });
    await db.collection('pets').insertMany([
      { pet: 'cat', owner: 'o1' },
      { pet: 'dog', owner: 'o1' },
    ]);
    const joined = await db
      .collection('pets')
      .aggregate([
        { $lookup: { from: 'owners', localField: 'owner', foreignField: '_id', as: 'owner' } },
        { $unwind: '$owner' },
        { $set: { 'owner.name': { $toUpper: '$owner.name' } } },
        { $project: { _id: 0, pet: 1, owner: '$owner.name' } },
        { $sort: { pet: 1 } },
      ])
      .toArray();
    expect(joined).toEqual([
      { pet: 'cat', owner: 'ANN' },
      { pet: 'dog', owner: 'ANN' },
    ]);
    expect(await db.collection('owners').findOne({})).toEqual({ _id: 'o1', name: 'Ann' });
  });

  it('answers findAndModify with lastErrorObject, sort, fields and remove', async () => {
    const db = client.db(dbName);
    await db.collection('fam').insertMany([
      { k: 'a', n: 2 },
      { k: 'a', n: 1 },
      { k: 'b', n: 5 },
    ]);
    const updated = (await db.command({
      findAndModify: 'fam',
      query: { k: 'a' },
      sort: { n: 1 },
      update: { $inc: { n: 10 } },
      new: true,
      fields: { _id: 0, n: 1 },
    })) as FindAndModifyReply;
    expect(updated).toMatchObject({
      ok: 1,
      value: { n: 11 },
      lastErrorObject: { n: 1, updatedExisting: true },
    });
    const upserted = (await db.command({
      findAndModify: 'fam',
      query: { k: 'c', tag: { $eq: 't' }, n: { $gt: 0 } },
      update: { $setOnInsert: { created: true }, $inc: { hits: 1 } },
      upsert: true,
      new: true,
    })) as FindAndModifyReply;
    expect(upserted.lastErrorObject).toMatchObject({ n: 1, updatedExisting: false });
    expect(upserted.value).toMatchObject({ k: 'c', tag: 't', created: true, hits: 1 });
    expect(upserted.value).not.toHaveProperty('n');
    expect(String(upserted.lastErrorObject.upserted)).toBe(String(upserted.value?._id));
    const removed = await db.command({ findAndModify: 'fam', query: { k: 'b' }, remove: true });
    expect(removed).toMatchObject({ lastErrorObject: { n: 1 }, value: { k: 'b', n: 5 } });
    expect(await db.collection('fam').countDocuments({ k: 'b' })).toBe(0);
  });

  it('manages collections, indexes and databases', async () => {
    const db = client.db('standin_admin');
    await db.createCollection('alpha');
    await expect(db.command({ create: 'alpha' })).rejects.toMatchObject({
      code: 48,
      codeName: 'NamespaceExists',
    });
    await db.collection('beta').insertOne({ x: 1 });
    const names = (await db.listCollections({}, { nameOnly: true }).toArray())
      .map((c) => c.name)
      .sort();
    expect(names).toEqual(['alpha', 'beta']);
    expect((await db.listCollections({ name: 'beta' }).toArray()).map((c) => c.name)).toEqual([
      'beta',
    ]);

    await db.collection('beta').createIndex({ x: 1 }, { unique: true, name: 'x_unique' });
    await expect(db.collection('beta').insertOne({ x: 1 })).rejects.toMatchObject({
      code: 11000,
      keyPattern: { x: 1 },
      keyValue: { x: 1 },
    });
    const unordered = await db
      .collection('beta')
      .insertMany([{ x: 1 }, { x: 2 }, { x: 1 }, { x: 3 }], { ordered: false })
      .then(
        () => undefined,
        (err: { code?: number; insertedCount?: number; writeErrors?: unknown[] }) => err,
      );
    expect(unordered?.code).toBe(11000);
    expect(await db.collection('beta').countDocuments()).toBe(3);
    expect(await db.collection('beta').distinct('x')).toEqual([1, 2, 3]);
    expect(await db.collection('beta').estimatedDocumentCount()).toBe(3);
    await expect(db.collection('missing').indexes()).rejects.toMatchObject({ code: 26 });
    await db.collection('beta').dropIndex('x_unique');
    await expect(db.collection('beta').dropIndex('x_unique')).rejects.toMatchObject({ code: 27 });
    await expect(db.collection('beta').insertOne({ x: 1 })).resolves.toBeDefined();

    const users = db.collection('users');
    await users.createIndex(
      { email: 1 },
      { unique: true, partialFilterExpression: { deleted: false } },
    );
    await users.insertMany([
      { email: 'a@x', deleted: true },
      { email: 'a@x', deleted: true },
      { email: 'a@x', deleted: false },
    ]);
    await expect(users.insertOne({ email: 'a@x', deleted: false })).rejects.toMatchObject({
      code: 11000,
    });
    // Several indexes in one command are all or nothing.
    await expect(
      db.command({
        createIndexes: 'users',
        indexes: [
          { key: { deleted: 1 }, name: 'deleted_1' },
          { key: { email: 1, deleted: 1 }, name: 'email_deleted', unique: true },
        ],
      }),
    ).rejects.toMatchObject({ code: 11000 });
    expect((await users.indexes()).map((index) => index.name)).toEqual(['_id_', 'email_1']);

    const dbs = await client.db('admin').admin().listDatabases();
    expect(dbs.databases.map((d) => d.name)).toEqual(
      expect.arrayContaining(['standin_admin', dbName]),
    );
    expect(await db.collection('alpha').drop()).toBe(true);
    await db.dropDatabase();
    expect(await db.listCollections().toArray()).toEqual([]);
  });
});

describe('what the stand-in does not emulate is refused, never ignored', () => {
  it('answers NotImplemented (238) for $text, geo queries and $where', async () => {
    const collection = client.db(dbName).collection('not_emulated');
    await collection.insertOne({ a: 1 });
    for (const filter of [
      { $text: { $search: 'x' } },
      { loc: { $near: [0, 0] } },
      { loc: { $geoWithin: { $center: [[0, 0], 1] } } },
      { $where: 'true' },
    ]) {
      await expect(collection.find(filter).toArray()).rejects.toMatchObject({ code: 238 });
    }
  });

  it('refuses explain', async () => {
    const collection = client.db(dbName).collection('not_emulated');
    await expect(collection.find({}).explain()).rejects.toMatchObject({ code: 238 });
  });
});

describe('TTL monitor', () => {
  it('deletes documents whose TTL index date is older than expireAfterSeconds', async () => {
    const { removeExpired } = await import('../src/ttl-monitor');
    const { StorageEngine } = await import('../src/storage-engine');
    const engine = new StorageEngine();
    const store = engine.createCollection('ttl', 'sessions');
    store.createIndex({ key: { at: 1 }, name: 'at_1', expireAfterSeconds: 60 });
    const now = Date.now();
    store.insert({ _id: 'old', at: new Date(now - 61_000) });
    store.insert({ _id: 'new', at: new Date(now - 10_000) });
    store.insert({ _id: 'no-date', at: 'yesterday' });
    store.insert({ _id: 'array', at: [new Date(now), new Date(now - 120_000)] });
    expect(removeExpired(engine, now)).toBe(2);
    expect(store.allEntries().map((entry) => entry.doc._id)).toEqual(['new', 'no-date']);
  });
});

describe('the mongo-standin command (npm start)', () => {
  it('prints its URI as the first line, serves a client, and stops on SIGTERM', async () => {
    const port = await freePort();
    const child = spawn('npm', ['start', '--silent', '--', '--port', String(port)], {
      cwd: packageDir,
      detached: true, // its own process group: npm, sh and node get the signal together
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<number | null>((resolve) =>
      child.on('exit', (code) => resolve(code)),
    );
    let stdout = '';
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const firstLine = new Promise<string>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
        const newline = stdout.indexOf('\n');
        if (newline >= 0) resolve(stdout.slice(0, newline));
      });
      child.on('exit', (code) =>
        reject(new Error(`exited with ${code} before printing a URI: ${stderr}`)),
      );
    });
    let cliClient: Client | undefined;
    try {
      const uri = await firstLine;
      expect(uri).toBe(`mongodb://127.0.0.1:${port}`);

      cliClient = await new MongoClient(`${uri}/cli_check`, {
        serverSelectionTimeoutMS: 5000,
      }).connect();
      await expect(cliClient.db('admin').command({ ping: 1 })).resolves.toEqual({ ok: 1 });
      await cliClient.db('cli_check').collection('things').insertOne({ hello: 'world' });
      expect(await cliClient.db('cli_check').collection('things').countDocuments()).toBe(1);
      await cliClient.close();
      cliClient = undefined;
      expect(stderr).toMatch(/STAND-IN/); // the warning goes to stderr, never before the URI on stdout

      process.kill(-child.pid!, 'SIGTERM');
      await exited;
      // The port is released: nothing listens there any more.
      await eventually(async () => {
        const refused = await RawConnection.open(port).then(
          (raw) => {
            raw.destroy();
            return false;
          },
          () => true,
        );
        expect(refused).toBe(true);
      }, 10_000);
    } finally {
      await cliClient?.close();
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }, 60_000);
});
