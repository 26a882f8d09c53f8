/**
 * Rejects after `ms` when `promise` has not settled by then (the promise itself runs on).
 *
 * The rejection waits one more turn of the event loop (`setImmediate`): when
 * the process itself was stalled past `ms` (a long synchronous task, a GC
 * pause, a starved CPU), the timer and the answer that arrived meanwhile are
 * both due, and Node runs expired timers before it reads sockets. Without
 * that turn, an answer already received would be reported as "did not
 * answer in time"; with it, the answer is read first and wins.
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let immediate: NodeJS.Immediate | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => {
      immediate = setImmediate(() => reject(new Error(`${what} did not answer within ${ms} ms`)));
    }, ms);
  });
  return Promise.race([promise, timeout]).finally(() => {
    clearTimeout(timer);
    if (immediate) clearImmediate(immediate);
  });
}
