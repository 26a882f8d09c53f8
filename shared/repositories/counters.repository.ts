import type { Models } from '../db/models';
import { db } from '../db/errors';

export type CounterName = 'organizations' | 'folders' | 'media' | 'webhooks';

/** Integer ids from atomic counters: one `findOneAndUpdate` + `$inc` + upsert per call. */
export class CountersRepository {
  constructor(private readonly models: Pick<Models, 'Counter'>) {}

  async next(name: CounterName): Promise<number> {
    const [id] = await this.take(name, 1);
    return id!;
  }

  /** `count` consecutive ids in one round trip (the counter moves by `count` at once). */
  async take(name: CounterName, count: number): Promise<number[]> {
    if (count < 1) return [];
    const doc = await db(() =>
      this.models.Counter.findOneAndUpdate(
        { _id: name },
        { $inc: { seq: count } },
        { upsert: true, returnDocument: 'after', lean: true },
      ).exec(),
    );
    if (!doc) throw new Error(`counter ${name} was not returned`);
    return Array.from({ length: count }, (_, i) => doc.seq - count + 1 + i);
  }
}
