import { Schema, type Connection } from 'mongoose';
import { connectMongo } from '../../../shared/db/connection';
import { POOL_CHECK_MS, poolCheckIntervals } from '../../../shared/db/pool-checks';
import { createLogger } from '../../../shared/logger';
import { isolatedEnv } from '../../support/context';

interface Thing {
  org: number;
  name: string;
  createdAt: Date;
}

describe('MongoDB through mongoose (smoke)', () => {
  const { config } = isolatedEnv('mongosmoke');
  let connection: Connection;

  beforeAll(async () => {
    connection = await connectMongo(config.mongodbUri!, createLogger({ level: 'silent' }));
  });

  afterAll(async () => {
    await connection.dropDatabase();
    await connection.close();
  });

  it('saves a document, finds it, and enforces a unique index', async () => {
    const schema = new Schema<Thing>({
      org: { type: Number, required: true },
      name: { type: String, required: true },
      createdAt: { type: Date, required: true },
    });
    schema.index({ org: 1, name: 1 }, { unique: true });
    const Things = connection.model<Thing>('Thing', schema);
    await Things.init();

    const createdAt = new Date('2026-01-02T03:04:05.678Z');
    const saved = await new Things({ org: 1, name: 'a', createdAt }).save();
    const found = await Things.findById(saved._id).lean();
    expect(found).toMatchObject({ org: 1, name: 'a', createdAt });

    await Things.create({ org: 2, name: 'a', createdAt });
    await expect(Things.create({ org: 1, name: 'a', createdAt })).rejects.toMatchObject({
      code: 11000,
    });
    expect(await Things.countDocuments()).toBe(2);
  });

  // shared/db/pool-checks.ts reaches into the driver's pools: a driver upgrade that moves them
  // fails here rather than bringing back the 100 ms wake-ups unseen.
  it('runs each connection pool’s upkeep every 10 s, not every 100 ms', async () => {
    const intervals = poolCheckIntervals(connection.getClient());
    expect(intervals.length).toBeGreaterThan(0);
    expect(intervals.every((ms) => ms === POOL_CHECK_MS)).toBe(true);
    // The pool still serves.
    expect(await connection.db!.command({ ping: 1 })).toMatchObject({ ok: 1 });
  });
});
