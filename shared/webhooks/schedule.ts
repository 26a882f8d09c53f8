/**
 * When a webhook message's next attempt is due: the schedule's delay for
 * that attempt (WEBHOOK_RETRY_SCHEDULE: immediately, 5 s, 5 min, 30 min, 2 h,
 * 5 h, 10 h, 10 h by default) with up to 10% jitter, or what the endpoint
 * asked for with `Retry-After` on a 429 or 503 when that is later (bounded
 * by the schedule's longest delay, or an hour if that is longer). Pure, so a
 * fake clock tests it.
 */

/** The longest `Retry-After` honoured, unless the schedule has a longer delay. */
export const RETRY_AFTER_CAP_MS = 3_600_000;

/** The delay before attempt `next` (2 for the first retry), or null when the schedule is spent. */
export function retryDelay(
  schedule: readonly number[],
  next: number,
  options: { retryAfterMs?: number | null; random?: () => number } = {},
): number | null {
  if (next < 1 || next > schedule.length) return null;
  const base = schedule[next - 1]!;
  const jitter = Math.round(base * 0.1 * (options.random ?? Math.random)());
  const planned = base + jitter;
  const longest = Math.max(...schedule, RETRY_AFTER_CAP_MS);
  const asked = options.retryAfterMs ?? null;
  return asked !== null && asked > planned ? Math.min(asked, Math.max(longest, planned)) : planned;
}

/**
 * A `Retry-After` header in milliseconds from `now` (seconds, or an HTTP
 * date), or null when absent or unreadable.
 */
export function parseRetryAfter(value: string | string[] | undefined, now: Date): number | null {
  const text = Array.isArray(value) ? value[0] : value;
  if (!text) return null;
  if (/^\s*\d+\s*$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - now.getTime());
}
