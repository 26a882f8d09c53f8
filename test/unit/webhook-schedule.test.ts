/**
 * The webhook retry schedule (shared/webhooks/schedule.ts) under a fake
 * clock: the default schedule's attempts (immediately, 5 s, 5 min, 30 min,
 * 2 h, 5 h, 10 h, 10 h) and when each falls, jitter bounded to 10%,
 * `Retry-After` (seconds or an HTTP date) honoured when later and bounded.
 * The delivery that uses it is tested in test/integration/webhooks/.
 */
import { parseRetrySchedule } from '@shared/egress/parsers';
import { parseRetryAfter, retryDelay } from '@shared/webhooks/schedule';
import { loadConfig } from '@shared/config';

const S = 1_000;
const M = 60 * S;
const H = 60 * M;

describe('the webhook retry schedule', () => {
  const schedule = loadConfig({}).webhooks.retrySchedule;

  it('is the default: immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h', () => {
    expect(schedule).toEqual([0, 5 * S, 5 * M, 30 * M, 2 * H, 5 * H, 10 * H, 10 * H]);
  });

  it('places each attempt on a fake clock: eight attempts over about 27.6 hours, then none', () => {
    jest.useFakeTimers({ now: new Date('2026-01-01T00:00:00Z') });
    try {
      const attempts: string[] = [];
      let next: number | null = retryDelay(schedule, 1, { random: () => 0 });
      for (let attempt = 1; next !== null; attempt++) {
        jest.advanceTimersByTime(next);
        attempts.push(new Date(Date.now()).toISOString());
        next = retryDelay(schedule, attempt + 1, { random: () => 0 });
      }
      expect(attempts).toEqual([
        '2026-01-01T00:00:00.000Z',
        '2026-01-01T00:00:05.000Z',
        '2026-01-01T00:05:05.000Z',
        '2026-01-01T00:35:05.000Z',
        '2026-01-01T02:35:05.000Z',
        '2026-01-01T07:35:05.000Z',
        '2026-01-01T17:35:05.000Z',
        '2026-01-02T03:35:05.000Z',
      ]);
    } finally {
      jest.useRealTimers();
    }
  });

  it('adds at most 10% jitter', () => {
    expect(retryDelay(schedule, 3, { random: () => 0 })).toBe(5 * M);
    expect(retryDelay(schedule, 3, { random: () => 0.999999 })).toBe(5.5 * M);
    for (let i = 0; i < 100; i++) {
      const d = retryDelay(schedule, 5)!;
      expect(d).toBeGreaterThanOrEqual(2 * H);
      expect(d).toBeLessThanOrEqual(2.2 * H);
    }
  });

  it('honours a later Retry-After, bounded; an earlier one changes nothing', () => {
    const random = () => 0;
    expect(retryDelay(schedule, 2, { random, retryAfterMs: 120 * S })).toBe(120 * S);
    expect(retryDelay(schedule, 4, { random, retryAfterMs: 1 * S })).toBe(30 * M);
    expect(retryDelay(schedule, 2, { random, retryAfterMs: 1_000 * H })).toBe(10 * H);
    const short = parseRetrySchedule('0,300ms,300ms');
    expect(retryDelay(short, 2, { random, retryAfterMs: 2 * S })).toBe(2 * S);
    expect(retryDelay(short, 2, { random, retryAfterMs: 5 * H })).toBe(1 * H);
    expect(retryDelay(short, 4, { random })).toBeNull();
  });

  it('reads Retry-After in seconds or as an HTTP date', () => {
    const now = new Date('2026-01-01T00:00:00Z');
    expect(parseRetryAfter('120', now)).toBe(120 * S);
    expect(parseRetryAfter('Thu, 01 Jan 2026 00:01:00 GMT', now)).toBe(60 * S);
    expect(parseRetryAfter('Wed, 31 Dec 2025 00:00:00 GMT', now)).toBe(0);
    expect(parseRetryAfter('soon', now)).toBeNull();
    expect(parseRetryAfter(undefined, now)).toBeNull();
  });
});
