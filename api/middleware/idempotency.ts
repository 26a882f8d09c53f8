/**
 * `Idempotency-Key` on POSTs (the IETF httpapi draft's header): the first
 * request with a key runs; a repeat with the same key and the same request
 * within 24 h gets the first answer again (status, body, `Location`, with
 * `Idempotent-Replayed: true`) and nothing runs twice; the same key with a
 * different request is 422; a repeat while the first still runs is 409.
 * Keys are per organization. Entries live in Redis; without Redis a request
 * carrying the header is refused (503) rather than run unprotected.
 *
 * The request's fingerprint (method, path, query, media type, body) is
 * computed as its bytes arrive, whoever reads them (`tapRequestBody`, which
 * must run before anything reads the body); a multipart body is taken without
 * its boundary, which clients choose anew on every try. Only successful
 * answers (2xx) are kept: after a refusal or a failure the key is free again.
 */
import { createHash, type Hash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Request, RequestHandler, Response } from 'express';
import type { RedisConnection } from '@shared/queue/redis';
import { Errors } from '@shared/errors';
import { withTimeout } from '@shared/with-timeout';
import type { Logger } from '@shared/logger';
import { closeAfterAnswer } from '../forms/multipart-form';
import { principalOf } from './auth';

const HEADER = 'idempotency-key';
const VALID_KEY = /^[\x21-\x7e]{1,255}$/;

interface Tap {
  hash: Hash;
  ended: Promise<void>;
  /** The boundary remover of a multipart body (it holds back a partial match between chunks). */
  flush(): void;
}

declare module 'node:http' {
  interface IncomingMessage {
    idempotencyTap?: Tap;
  }
}

/** What a finished request left for its repeats. */
interface Entry {
  state: 'running' | 'done';
  fingerprint?: string;
  status?: number;
  location?: string;
  body?: unknown;
}

/**
 * Hashes the body of a POST that carries `Idempotency-Key` as the HTTP
 * parser delivers it. Must be the first middleware: Express runs it within
 * the request event, before any byte of the body is pushed.
 */
export const tapRequestBody: RequestHandler = (req, _res, next) => {
  if (req.method === 'POST' && req.headers[HEADER] !== undefined) tap(req);
  next();
};

function tap(req: IncomingMessage): void {
  const hash = createHash('sha256');
  const boundary = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(req.headers['content-type'] ?? '');
  const remove = boundary ? Buffer.from(`--${boundary[1] ?? boundary[2]}`) : undefined;
  let held = Buffer.alloc(0);
  const write = (chunk: Buffer) => {
    if (!remove) return void hash.update(chunk);
    // Every occurrence of the boundary delimiter is left out; a partial match at the end waits.
    let data = held.length ? Buffer.concat([held, chunk]) : chunk;
    for (let at = data.indexOf(remove); at >= 0; at = data.indexOf(remove)) {
      hash.update(data.subarray(0, at));
      data = data.subarray(at + remove.length);
    }
    const keep = Math.min(data.length, remove.length - 1);
    hash.update(data.subarray(0, data.length - keep));
    held = Buffer.from(data.subarray(data.length - keep));
  };
  let resolveEnded!: () => void;
  const ended = new Promise<void>((resolve) => (resolveEnded = resolve));
  const push = req.push.bind(req);
  req.push = (chunk: unknown, encoding?: BufferEncoding) => {
    if (chunk === null) resolveEnded();
    else if (Buffer.isBuffer(chunk)) write(chunk);
    return push(chunk, encoding);
  };
  req.idempotencyTap = { hash, ended, flush: () => void hash.update(held) };
}

/** The request as a fingerprint: what must match for a repeat to be "the same request". */
function fingerprintOf(req: Request, tap: Tap): string {
  tap.flush();
  const url = new URL(req.originalUrl, 'http://x');
  const query = url.searchParams;
  query.sort();
  const mediaType = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  return createHash('sha256')
    .update(JSON.stringify([req.method, url.pathname, query.toString(), mediaType]))
    .update(tap.hash.digest())
    .digest('hex');
}

export function idempotency(deps: {
  /** The fail-fast command connection; without it, keyed requests are refused. */
  redis: RedisConnection | undefined;
  /** Prefix of the entries' keys (includes QUEUE_PREFIX). */
  keyPrefix: string;
  logger: Logger;
  /** How long an answer is kept for repeats (default 24 h). */
  ttlMs?: number;
  /** How long a request that never finishes (a crashed process) holds its key (default 15 min). */
  runningTtlMs?: number;
}): RequestHandler {
  const ttl = deps.ttlMs ?? 24 * 3_600_000;
  const runningTtl = deps.runningTtlMs ?? 15 * 60_000;

  return (req, res, next) => {
    const key = req.headers[HEADER];
    if (req.method !== 'POST' || key === undefined) return next();
    const run = async () => {
      if (typeof key !== 'string' || !VALID_KEY.test(key)) {
        throw Errors.validation([
          {
            field: 'Idempotency-Key',
            message: 'Idempotency-Key must be 1 to 255 printable ASCII characters',
          },
        ]);
      }
      const tap = req.idempotencyTap;
      const redis = deps.redis;
      if (!tap) throw new Error('idempotency: the request body was not tapped (tapRequestBody)');
      if (!redis) throw Errors.unavailable('Redis');
      const org = principalOf(req).organization.id;
      const entryKey = `${deps.keyPrefix}${org}:${createHash('sha256').update(key).digest('hex')}`;
      const claimed = await redisCall(() =>
        redis.set(
          entryKey,
          JSON.stringify({ state: 'running' } satisfies Entry),
          'PX',
          runningTtl,
          'NX',
        ),
      );
      if (claimed === 'OK') return keep(req, res, redis, entryKey, tap, ttl, deps.logger);
      const entry = parseEntry(await redisCall(() => redis.get(entryKey)));
      if (!entry || entry.state === 'running') {
        closeAfterAnswer(req);
        throw Errors.idempotencyKeyInUse();
      }
      // The first answer, for the same request only: read this one to the end to know.
      req.resume();
      await tap.ended;
      if (fingerprintOf(req, tap) !== entry.fingerprint) throw Errors.idempotencyKeyReused();
      res.setHeader('Idempotent-Replayed', 'true');
      if (entry.location) res.setHeader('Location', entry.location);
      res.status(entry.status ?? 200).json(entry.body);
      return false;
    };
    run().then(
      (goOn) => (goOn ? next() : undefined),
      (err: unknown) => next(err),
    );
  };
}

/** Lets the request run, and keeps its answer for repeats once it is sent (a success only). */
function keep(
  req: Request,
  res: Response,
  redis: RedisConnection,
  entryKey: string,
  tap: Tap,
  ttl: number,
  logger: Logger,
): true {
  let body: unknown;
  const json = res.json.bind(res);
  res.json = (value: unknown) => {
    body = value;
    return json(value);
  };
  res.once('finish', () => {
    const success = res.statusCode >= 200 && res.statusCode < 300;
    const save = async () => {
      if (!success) return void (await redis.del(entryKey));
      await tap.ended;
      const entry: Entry = {
        state: 'done',
        fingerprint: fingerprintOf(req, tap),
        status: res.statusCode,
        location: res.getHeader('location')?.toString(),
        body,
      };
      await redis.set(entryKey, JSON.stringify(entry), 'PX', ttl);
    };
    save().catch((err: unknown) => logger.warn({ err }, 'could not keep an idempotent answer'));
  });
  return true;
}

function parseEntry(raw: string | null): Entry | null {
  if (!raw) return null;
  try {
    return JSON.parse(raw) as Entry;
  } catch {
    return null;
  }
}

/** A Redis command whose failure means "Redis is unavailable" (503), bounded in time. */
async function redisCall<T>(command: () => Promise<T>): Promise<T> {
  try {
    return await withTimeout(command(), 1_000, 'Redis');
  } catch (err) {
    throw Errors.unavailable('Redis', err);
  }
}
