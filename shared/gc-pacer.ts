/**
 * Young-generation collections paced by the bytes a process streams.
 *
 * Each chunk Node reads from a socket is a new `Buffer` (up to 64 KiB) whose
 * memory lives outside V8's heap and goes back only when a collection finds
 * the `Buffer` dead. A process that mostly streams bodies (the API: uploads
 * in, downloads and renders out) allocates little else, so its young
 * generation fills slowly while the chunks' memory piles up, and V8 ends up
 * marking the whole heap (a full mark-compact, with concurrent marking on
 * the other core) every few MiB to give it back: measured, about a third of
 * the API's CPU on a download (docs/performance.md, "API: streamed bytes and
 * the garbage collector"). A young-generation collection (a scavenge of a
 * 2 MB semi-space, 0.5-1 ms in --trace-gc) every `STEP` bytes frees the
 * chunks while they are still young, at a fraction of that cost, and keeps
 * the process's memory lower too.
 *
 * On when the process starts with `--expose-gc` (`npm run start:api` and
 * Dockerfile.api do); otherwise `streamed` does nothing.
 */

/** Bytes streamed between two young-generation collections. */
export const STEP = 4 * 1024 * 1024;

type Collect = () => void;

function fromFlag(): Collect | undefined {
  const gc = globalThis.gc;
  return typeof gc === 'function' ? () => gc({ type: 'minor', execution: 'sync' }) : undefined;
}

let collect = fromFlag();
let pending = 0;

/** Counts bytes that went through the process in socket-sized chunks (read, or written on). */
export function streamed(bytes: number): void {
  if (!collect) return;
  pending += bytes;
  if (pending < STEP) return;
  pending = 0;
  collect();
}

/** Whether pacing is on (the process has a collector to call). */
export function pacing(): boolean {
  return collect !== undefined;
}

/** Tests: replace the collector (undefined turns pacing off); returns the one before. */
export function setCollector(next: Collect | undefined): Collect | undefined {
  const before = collect;
  collect = next;
  pending = 0;
  return before;
}
