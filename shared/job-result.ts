/**
 * Job results too large for Redis. Redis runs with
 * `noeviction`: a full Redis stops every queue and the rate limiter, and a
 * job's return value is kept twice there (in the job and in the events
 * stream's `completed` entry). A result whose JSON is over
 * RESULT_INLINE_MAX_BYTES (a metadata answer carrying a large XMP, EXIF or
 * ICC block) is written by the worker to the object store under the
 * organization's `<org>/.results/` prefix, and the job returns a small
 * pointer instead. The API reads the object, removes it, then answers
 * exactly as it would have with the value inline. How a stored result is
 * bounded and when one never read is removed: shared/stored-results.ts.
 *
 * Stored form: JSON whose Buffers are `{ type: 'Buffer', base64 }` (a third
 * larger than the bytes, where the inline form's arrays of numbers are about
 * four times larger); decoded back to Buffers, which the API's JSON answer
 * writes in the documented `{ type: 'Buffer', data: [...] }` form.
 */

/** Largest inline result (its JSON): a job then keeps at most twice this in Redis. */
export const RESULT_INLINE_MAX_BYTES = 16 * 1024;

/** Where a job's large result waits for the API: `<org>/.results/<jobId>.json`. */
export function resultKey(orgSlug: string, jobId: string): string {
  return `${orgSlug}/.results/${jobId}.json`;
}

/** The segment, under an organization's prefix, of results waiting for the API. */
export const RESULTS_SEGMENT = '/.results/';

/** What a job returns in place of a large result. */
export interface ResultRef {
  resultRef: { key: string; bytes: number };
}

export function isResultRef(value: unknown): value is ResultRef {
  const ref = (value as Partial<ResultRef> | null)?.resultRef;
  return typeof ref?.key === 'string' && typeof ref.bytes === 'number';
}

/** Bytes of every Buffer in a value (plain objects and arrays walked). */
function bufferBytes(value: unknown): number {
  if (Buffer.isBuffer(value)) return value.length;
  if (value && typeof value === 'object') {
    let n = 0;
    for (const v of Object.values(value)) n += bufferBytes(v);
    return n;
  }
  return 0;
}

/** A copy with every Buffer replaced by `{ type: 'Buffer', base64 }`. */
function packBuffers(value: unknown): unknown {
  if (Buffer.isBuffer(value)) return { type: 'Buffer', base64: value.toString('base64') };
  if (Array.isArray(value)) return value.map(packBuffers);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, packBuffers(v)]));
  }
  return value;
}

/**
 * How a result travels: inline (its JSON form, Buffers as arrays, as before)
 * when that is at most RESULT_INLINE_MAX_BYTES, else the stored form's bytes.
 */
export function planResult<T>(result: T): { inline: T } | { stored: Buffer } {
  if (bufferBytes(result) <= RESULT_INLINE_MAX_BYTES) {
    const json = JSON.stringify(result);
    if (Buffer.byteLength(json) <= RESULT_INLINE_MAX_BYTES)
      return { inline: JSON.parse(json) as T };
  }
  return { stored: Buffer.from(JSON.stringify(packBuffers(result))) };
}

/** The stored form read back, Buffers restored. */
export function decodeStoredResult(bytes: Buffer): unknown {
  return JSON.parse(bytes.toString('utf8'), (_key, value: unknown) => {
    const v = value as { type?: unknown; base64?: unknown } | null;
    if (v && v.type === 'Buffer' && typeof v.base64 === 'string' && Object.keys(v).length === 2) {
      return Buffer.from(v.base64, 'base64');
    }
    return value;
  });
}
