import type { Models } from '../db/models';
import { db } from '../db/errors';

export type CounterName = 'organizations' | 'folders' | 'media';

/** Integer ids from atomic counters: one `findOneAndUpdate` + `$inc` + upsert per id. */
export class CountersRepository {
  constructor(private readonly models: Pick<Models, 'Counter'>) {}

  async next(name: CounterName): Promise<number> {
    const doc = await db(() =>
      this.models.Counter.findOneAndUpdate(
        { _id: name },
        { $inc: { seq: 1 } },
        { upsert: true, returnDocument: 'after', lean: true },
      ).exec(),
    );
    if (!doc) throw new Error(`counter ${name} was not returned`);
    return doc.seq;
  }
}
