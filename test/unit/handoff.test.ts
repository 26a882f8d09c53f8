/**
 * JobHandoff (shared/queue/handoff.ts) on its own, over a stand-in for its
 * Redis connection: what it hands over and for how long, and that anything
 * off (over the size bound, the wrong length, Redis failing) answers null so
 * the caller reads storage. The integration tier runs it against Redis
 * (test/integration/jobs/render.test.ts).
 */
import { createLogger } from '../../shared/logger';
import { HANDOFF_TTL_MS, JobHandoff, handoffKey } from '../../shared/queue/handoff';
import type { RedisConnection } from '../../shared/queue/redis';

function fakeRedis(fail = false) {
  const values = new Map<string, { value: Buffer; px: number }>();
  const redis = {
    // A connection that is up (a fresh one's first offer waits for this: the integration tier).
    status: 'ready',
    set: (key: string, value: Buffer, mode: string, px: number) => {
      if (fail) return Promise.reject(new Error('Redis is away'));
      expect(mode).toBe('PX');
      values.set(key, { value, px });
      return Promise.resolve('OK');
    },
    getBuffer: (key: string) =>
      fail
        ? Promise.reject(new Error('Redis is away'))
        : Promise.resolve(values.get(key)?.value ?? null),
  };
  return { values, redis: redis as unknown as RedisConnection };
}

const logger = createLogger({ level: 'silent' });
const handoffOver = (redis: RedisConnection, maxBytes = 100) =>
  new JobHandoff({ redis: () => redis, queuePrefix: 'p', maxBytes, logger });

describe('JobHandoff', () => {
  it('hands bytes over under the job’s key for HANDOFF_TTL_MS, and gives them back', async () => {
    const { values, redis } = fakeRedis();
    const handoff = handoffOver(redis);
    expect(await handoff.offer('image-1', Buffer.from('variant'))).toBe(true);
    expect(values.get(handoffKey('p', 'image-1'))).toEqual({
      value: Buffer.from('variant'),
      px: HANDOFF_TTL_MS,
    });
    expect(await handoff.take('image-1', 7)).toEqual(Buffer.from('variant'));
  });

  it('answers null for nothing handed over, a length that does not match, or over the bound', async () => {
    const { values, redis } = fakeRedis();
    const handoff = handoffOver(redis, 4);
    expect(await handoff.take('image-2', 3)).toBeNull();
    await handoff.offer('image-3', Buffer.from('abc'));
    expect(await handoff.take('image-3', 4)).toBeNull();
    expect(await handoff.offer('image-4', Buffer.from('too long'))).toBe(false);
    expect(values.has(handoffKey('p', 'image-4'))).toBe(false);
    expect(await handoff.take('image-4', 8)).toBeNull();
  });

  it('is off with a bound of 0', async () => {
    const { values, redis } = fakeRedis();
    const handoff = handoffOver(redis, 0);
    expect(await handoff.offer('image-5', Buffer.from('x'))).toBe(false);
    expect(values.size).toBe(0);
    expect(await handoff.take('image-5', 1)).toBeNull();
  });

  it('never fails: Redis errors leave the caller to storage', async () => {
    const { redis } = fakeRedis(true);
    const handoff = handoffOver(redis);
    // Not handed over: the caller writes before it answers.
    await expect(handoff.offer('image-6', Buffer.from('x'))).resolves.toBe(false);
    await expect(handoff.take('image-6', 1)).resolves.toBeNull();
  });
});
