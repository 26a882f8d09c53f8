/** Conditional and partial answers for stored bytes: If-None-Match and a single `Range` (RFC 9110). */
import type { Request } from 'express';
import type { ByteRange } from '@shared/storage/object-store';

/** RFC 9110 weak comparison of If-None-Match against our ETag. */
export function noneMatch(header: string | undefined, etag: string): boolean {
  if (!header) return false;
  if (header.trim() === '*') return true;
  return header
    .split(',')
    .map((t) => t.trim().replace(/^W\//, ''))
    .includes(etag);
}

/** The single byte range asked for, null for "the whole object", or 'unsatisfiable'. */
export function requestedRange(
  req: Request,
  total: number,
  etag: string,
): ByteRange | null | 'unsatisfiable' {
  if (!req.headers.range) return null;
  const ifRange = req.headers['if-range'];
  if (typeof ifRange === 'string' && ifRange.trim() !== etag) return null; // validator changed: send everything
  const ranges = req.range(total, { combine: true });
  if (ranges === -1) return 'unsatisfiable';
  if (ranges === -2 || ranges === undefined) return null; // malformed: ignore, as RFC 9110 allows
  if (ranges.type !== 'bytes' || ranges.length !== 1) return null; // several ranges: send everything
  const [range] = ranges;
  return range ? { start: range.start, end: range.end } : null;
}
