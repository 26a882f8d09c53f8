/**
 * The one polling helper of the tests: calls `check` until it returns (or its
 * promise resolves) without throwing, at most every `intervalMs`, and once
 * `timeoutMs` has gone by rethrows its last failure. A check that knows
 * waiting longer cannot help (the process it watches has exited, say) throws
 * `new GiveUp(reason)`, which is rethrown at once.
 */
import { setTimeout as sleep } from 'node:timers/promises';

/** Thrown by a check to stop polling at once (the error is rethrown as it is). */
export class GiveUp extends Error {
  override name = 'GiveUp';
}

export async function eventually<T>(
  check: () => T | Promise<T>,
  timeoutMs = 15_000,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (err instanceof GiveUp || Date.now() > deadline) throw err;
      await sleep(intervalMs);
    }
  }
}
