/** Polls `check` until it passes (resolves) or `timeoutMs` has gone by, then rethrows its last failure. */
import { setTimeout as sleep } from 'node:timers/promises';

export async function eventually<T>(
  check: () => Promise<T>,
  timeoutMs = 15_000,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(intervalMs);
    }
  }
}
