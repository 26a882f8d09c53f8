/**
 * The one answer of stored bytes, for downloads and renders: validators and
 * caching headers first (a 304 carries them), `If-None-Match` (RFC 9110 weak
 * comparison) gives 304, a single `Range` gives 206 (416 when unsatisfiable;
 * several ranges, a malformed one or an `If-Range` that no longer matches
 * give everything), then the content headers and the bytes: streamed from
 * storage, or sent from memory when they are in hand. The bytes sent are
 * counted (media_bytes_served_total); a client that goes away mid-stream is
 * logged and its connection cut (the headers are gone by then).
 */
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Request, Response } from 'express';
import { Errors } from '@shared/errors';
import { streamed } from '@shared/gc-pacer';
import type { ApiMetrics } from '@shared/metrics';
import type { ByteRange } from '@shared/storage/object-store';
import { logOf } from './request-context';

export interface StoredBytes {
  /** The strong validator, quoted. */
  etag: string;
  /** The whole content's length, bytes. */
  length: number;
  /** Headers every answer carries, a 304 too (`Last-Modified`, `Cache-Control`), in this order after `ETag`. */
  validators: Record<string, string>;
  /** The answer varies by `Accept` (a format negotiated from it): appended to `Vary`. */
  varyAccept?: boolean;
  contentType: string;
  /** The `Content-Disposition` header. */
  disposition: string;
  /** Other headers of a 200 or 206 (a `Content-Security-Policy`). */
  headers?: Record<string, string>;
  /** The bytes, when already in memory: no read from storage then. */
  data?: Buffer | undefined;
  /** Opens the bytes in storage (a range of them). */
  open(range: ByteRange | undefined): Promise<Readable>;
  /** What the log says when the client goes away mid-stream, and of which key. */
  interrupted: { message: string; key: string };
}

export async function sendStoredBytes(
  req: Request,
  res: Response,
  answer: StoredBytes,
  metrics?: Pick<ApiMetrics, 'bytesServed'>,
): Promise<void> {
  const { etag, length, data } = answer;
  setValidators(res, answer);
  if (noneMatch(req.headers['if-none-match'], etag)) {
    res.status(304).end();
    return;
  }
  const range = requestedRange(req, length, etag);
  if (range === 'unsatisfiable') throw Errors.rangeNotSatisfiable(length);
  const body = req.method === 'HEAD' || data ? undefined : await answer.open(range ?? undefined);
  res.setHeader('Content-Type', answer.contentType);
  res.setHeader('Content-Disposition', answer.disposition);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  for (const [name, value] of Object.entries(answer.headers ?? {})) res.setHeader(name, value);
  if (range) {
    res.status(206);
    res.setHeader('Content-Range', `bytes ${range.start}-${range.end}/${length}`);
    res.setHeader('Content-Length', String(range.end - range.start + 1));
  } else {
    res.status(200);
    res.setHeader('Content-Length', String(length));
  }
  if (data && req.method !== 'HEAD') {
    const sent = range ? data.subarray(range.start, range.end + 1) : data;
    res.end(sent);
    metrics?.bytesServed(sent.length);
    return;
  }
  if (!body) {
    res.end();
    return;
  }
  let sent = 0;
  body.on('data', (chunk: Buffer) => {
    sent += chunk.length;
    streamed(chunk.length);
  });
  try {
    await pipeline(body, res);
  } catch (err) {
    // Headers are gone; the error handler can only cut the connection.
    logOf(req)?.warn({ err, key: answer.interrupted.key }, answer.interrupted.message);
    res.destroy();
  } finally {
    metrics?.bytesServed(sent);
  }
}

/** What a 304 carries: the validators, and `Vary: Accept` when the format was negotiated. */
export type Validators = Pick<StoredBytes, 'etag' | 'validators' | 'varyAccept'>;

/**
 * Answers 304 from validators known without reading the record (kept from an
 * earlier answer: api/domain/revalidation-cache.ts) when `If-None-Match`
 * matches them, with the headers `sendStoredBytes` gives a 304; false (and
 * nothing sent) otherwise.
 */
export function sendNotModified(req: Request, res: Response, known: Validators): boolean {
  if (!noneMatch(req.headers['if-none-match'], known.etag)) return false;
  setValidators(res, known);
  res.status(304).end();
  return true;
}

function setValidators(res: Response, answer: Validators): void {
  res.setHeader('ETag', answer.etag);
  for (const [name, value] of Object.entries(answer.validators)) res.setHeader(name, value);
  // Appended: the CORS layer may have set `Vary: Origin` already, and a shared cache needs both.
  if (answer.varyAccept) res.vary('Accept');
  res.setHeader('Accept-Ranges', 'bytes');
}

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
