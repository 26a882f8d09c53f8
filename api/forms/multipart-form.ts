/**
 * The one multipart form reader: parses a multipart/form-data request with
 * busboy and hands each file part, as a stream, to a handler, in form order.
 * Routes declare their forms (api/forms/form-spec.ts, which reads them with
 * this); `readFields` reads the text fields of a request that takes no file.
 *
 * Limits (files, parts, fields, field size, part headers) come from the
 * caller. The first failure of any kind (a limit, a malformed body, a handler
 * that rejects, the client going away, the body idle for too long) stops the
 * parse: every file stream still open is destroyed with that error (so
 * storage aborts its partial upload), the rest of the body is discarded, and
 * the read rejects with the error once every handler has settled, so the
 * caller can clean up what was stored. This module is also the one place
 * that answers such a failure: the connection is closed after the answer
 * (`closeAfterAnswer`).
 */
import type { Request } from 'express';
import busboy, { type Busboy } from 'busboy';
import type { Readable } from 'node:stream';
import { Errors, isAppError, type AppError } from '@shared/errors';

export interface FormLimits {
  /** Largest file, bytes. */
  maxFileSize: number;
  maxFiles: number;
  /** What the files are, in the 413 message when there are too many ("merge inputs"); default "files". */
  filesNoun?: string | undefined;
  maxFields?: number;
  maxFieldSize?: number;
  /** Parts of any kind (files, fields, parts the parser skips); default maxFiles + maxFields. */
  maxParts?: number;
  maxHeaderPairs?: number;
  /** Cuts a body that sends nothing for this long with 408 (UPLOAD_IDLE_TIMEOUT_MS); none when absent. */
  idleTimeoutMs?: number | undefined;
}

/** A file part as the parser gives it: its field name, and its bytes as a stream. */
export interface FilePart {
  field: string;
  /** The client's filename, decoded as UTF-8; empty when the part had none. */
  filename: string;
  declaredType: string;
  stream: Readable;
}

/** Field name → every value sent under it, in order. */
export type FormFields = Map<string, string[]>;

export interface PartHandlers<T> {
  /** Called for each file part, with the fields seen so far. Must consume the stream or reject. */
  onFile(part: FilePart, fieldsSoFar: FormFields): Promise<T>;
  /**
   * Called with the name of each field before its value is looked at (so an
   * unknown or misplaced field is refused as such even when its value is over
   * the size limit); throw an AppError to refuse the request.
   */
  acceptField?(name: string): void;
  /** Called for each field within the size limit; throw an AppError to refuse the request. */
  onField?(name: string, value: string): void;
}

/** The last value of a field (fields are taken as sent). */
export function lastField(fields: FormFields, name: string): string | undefined {
  const values = fields.get(name);
  return values?.[values.length - 1];
}

export function isMultipart(req: Request): boolean {
  return /^multipart\/form-data\b/i.test(req.headers['content-type'] ?? '');
}

/**
 * Reads the form of `req`, calling the handlers in form order: 400 when the
 * request is not multipart/form-data; after any failure the connection is
 * closed once the answer is sent.
 */
export async function readMultipart<T>(
  req: Request,
  limits: FormLimits,
  handlers: PartHandlers<T>,
): Promise<{ fields: FormFields; files: T[] }> {
  if (!isMultipart(req)) throw Errors.badRequest('The request must be multipart/form-data');
  try {
    return await parseMultipart(req, limits, handlers);
  } catch (err) {
    // The rest of the body is being discarded: close the connection after answering.
    closeAfterAnswer(req);
    throw err;
  }
}

function parseMultipart<T>(
  req: Request,
  limits: FormLimits,
  handlers: PartHandlers<T>,
): Promise<{ fields: FormFields; files: T[] }> {
  const maxFields = limits.maxFields ?? 100;
  const maxParts = limits.maxParts ?? limits.maxFiles + maxFields;
  const idleMs = limits.idleTimeoutMs;
  return new Promise((resolve, reject) => {
    let bb: Busboy;
    try {
      bb = busboy({
        headers: req.headers,
        defParamCharset: 'utf8',
        limits: {
          fileSize: limits.maxFileSize + 1,
          files: limits.maxFiles,
          fields: maxFields,
          fieldSize: limits.maxFieldSize ?? 64 * 1024,
          // busboy emits 'partsLimit' once `parts` parts have been read, not when
          // one more arrives (unlike its files and fields limits): a form of
          // exactly maxParts parts is within the limit.
          parts: maxParts + 1,
          headerPairs: limits.maxHeaderPairs ?? 100,
        },
      });
    } catch (err) {
      // busboy throws synchronously on a missing or malformed Content-Type / boundary.
      const message = err instanceof Error ? err.message : String(err);
      reject(
        Errors.badRequest(`The request must be multipart/form-data with a boundary (${message})`),
      );
      return;
    }

    const fields: FormFields = new Map();
    const pending: Promise<void>[] = [];
    const results: (T | undefined)[] = [];
    const openStreams = new Set<Readable>();
    let failure: AppError | undefined;
    let finished = false;

    const settle = () => {
      void Promise.allSettled(pending).then(() => {
        const done = results.filter((r): r is T => r !== undefined);
        if (failure) reject(failure);
        else resolve({ fields, files: done });
      });
    };

    const fail = (err: unknown) => {
      if (failure) return;
      failure = isAppError(err)
        ? err
        : Errors.badRequest(`The multipart body is malformed: ${String(err)}`);
      for (const stream of openStreams) stream.destroy(failure);
      openStreams.clear();
      req.unpipe(bb);
      bb.removeAllListeners('file');
      bb.removeAllListeners('field');
      bb.on('error', () => undefined);
      // Discard the rest of the body so the client can read our answer.
      req.resume();
      if (!finished) {
        finished = true;
        settle();
      }
    };

    bb.on('file', (field, stream, info) => {
      if (failure) return void stream.resume();
      openStreams.add(stream);
      // Streams are destroyed with the failure when the parse stops; whoever reads
      // the stream sees that error, and an unread stream must not crash the process.
      stream.on('error', () => undefined);
      stream.on('limit', () => fail(Errors.fileTooLarge(limits.maxFileSize, info.filename)));
      stream.once('close', () => openStreams.delete(stream));
      stream.once('end', () => openStreams.delete(stream));
      const index = results.length;
      results.push(undefined);
      const part: FilePart = {
        field,
        filename: info.filename ?? '',
        declaredType: info.mimeType,
        stream,
      };
      // Called synchronously, so the handler sees parts in form order (fields and
      // files interleaved as the client sent them).
      let started: Promise<T>;
      try {
        started = handlers.onFile(part, fields);
      } catch (err) {
        started = Promise.reject(err instanceof Error ? err : new Error(String(err)));
      }
      const handled = started.then(
        (value) => {
          results[index] = value;
          // A handler that stopped reading early must not stall the parser.
          if (!stream.readableEnded) stream.resume();
        },
        (err: unknown) => {
          stream.resume();
          fail(err);
        },
      );
      pending.push(handled);
    });

    bb.on('field', (name, value, info) => {
      if (failure) return;
      try {
        handlers.acceptField?.(name);
      } catch (err) {
        return fail(err);
      }
      if (info.nameTruncated || info.valueTruncated) {
        return fail(
          Errors.payloadTooLarge(
            `The field "${name}" is longer than ${limits.maxFieldSize ?? 65536} bytes`,
          ),
        );
      }
      try {
        handlers.onField?.(name, value);
      } catch (err) {
        return fail(err);
      }
      const list = fields.get(name) ?? [];
      list.push(value);
      fields.set(name, list);
    });

    bb.on('filesLimit', () => fail(Errors.tooManyFiles(limits.maxFiles, limits.filesNoun)));
    bb.on('fieldsLimit', () =>
      fail(Errors.tooManyParts(`At most ${maxFields} fields are accepted per request`)),
    );
    bb.on('partsLimit', () =>
      fail(Errors.tooManyParts(`At most ${maxParts} parts are accepted per request`)),
    );
    bb.on('error', (err: unknown) => {
      const message = err instanceof Error ? err.message : String(err);
      fail(
        Errors.badRequest(
          message === 'Malformed part header'
            ? // busboy's word for a part header that does not parse or is over 16 KB
              'The multipart body is malformed: a part header is malformed or larger than 16 KB'
            : `The multipart body is malformed: ${message}`,
        ),
      );
    });
    bb.on('close', () => {
      if (finished) return;
      finished = true;
      settle();
    });

    req.on('close', () => {
      idle.stop();
      if (!req.complete)
        fail(Errors.badRequest('The client closed the connection before the body was complete'));
    });
    const idle = idleTimer(req, () => fail(Errors.uploadIdle(idleMs!)), idleMs);
    bb.once('close', () => idle.stop());
    req.pipe(bb);
  });
}

/**
 * Calls `onIdle` when `req` has received nothing for `ms` while the server was
 * ready to read (time paused by backpressure, storage being slow, does not
 * count); no timer without `ms`.
 */
function idleTimer(req: Request, onIdle: () => void, ms: number | undefined) {
  let timer: NodeJS.Timeout | undefined;
  const stop = () => {
    if (timer) clearTimeout(timer);
    timer = undefined;
  };
  const arm = () => {
    stop();
    if (ms !== undefined && !req.complete) timer = setTimeout(onIdle, ms);
  };
  if (ms === undefined) return { stop };
  req.on('data', arm);
  req.on('pause', stop);
  req.on('resume', arm);
  req.once('end', stop);
  arm();
  return { stop };
}

/**
 * The fields of a request, wherever the client put them: a multipart or
 * urlencoded form, a JSON object (already parsed by express.json), or the
 * query string. File parts are refused. Values are strings (JSON numbers and
 * arrays are kept as JSON values). A request without a body is read from its
 * query whatever its Content-Type says (a browser's GET cannot carry the
 * multipart body the content type announces).
 */
export async function readFields(
  req: Request,
  allowed: readonly string[],
): Promise<Record<string, unknown>> {
  const fields: Record<string, unknown> = {};
  const take = (name: string, value: unknown) => {
    if (!allowed.includes(name)) {
      throw Errors.validation([
        { field: name, message: `unknown field "${name}" (accepted: ${allowed.join(', ')})` },
      ]);
    }
    fields[name] = value;
  };
  if (isMultipart(req) && hasBody(req)) {
    const { fields: form } = await readMultipart<never>(
      req,
      // (a generous size limit: a file part is refused as such, not as too large)
      { maxFileSize: 1024 * 1024, maxFiles: 1, maxFields: 20 },
      {
        onFile: (part) =>
          Promise.reject(
            Errors.validation([
              {
                field: part.field,
                message: `file parts are not accepted here ("${part.field}")`,
              },
            ]),
          ),
        acceptField: (name) => {
          if (!allowed.includes(name)) take(name, undefined);
        },
      },
    );
    for (const [name, values] of form) take(name, values[values.length - 1]);
  } else if (req.body && typeof req.body === 'object' && !Buffer.isBuffer(req.body)) {
    for (const [name, value] of Object.entries(req.body as Record<string, unknown>))
      take(name, value);
  }
  for (const [name, value] of Object.entries(req.query)) {
    if (fields[name] === undefined) take(name, value);
  }
  return fields;
}

/** Whether the request carries a body: chunked, or a Content-Length above 0. */
function hasBody(req: Request): boolean {
  if (req.headers['transfer-encoding'] !== undefined) return true;
  const length = Number(req.headers['content-length'] ?? 0);
  return !Number.isFinite(length) || length > 0;
}

/** How long a connection closed after an early answer keeps reading what the client still sends. */
export const LINGER_MS = 5_000;

/**
 * Closes the connection after the answer to a request whose body was refused
 * part-way (413, a malformed part), the way RFC 9112 section 9.6 asks: send the
 * answer, half-close, and keep reading (and discarding) what the client still
 * sends until it closes its side or LINGER_MS pass. Closing at once, as Node
 * does after `Connection: close`, makes the kernel answer the client's
 * in-flight bytes with a reset, which can destroy the answer before the client
 * reads it (the client then sees ECONNRESET instead of the 413).
 */
export function closeAfterAnswer(req: Request): void {
  req.res?.setHeader('Connection', 'close');
  const socket = req.socket;
  // Node ends a `Connection: close` response with socket.destroySoon().
  socket.destroySoon = function lingeringClose(this: typeof socket) {
    this.end();
    this.resume();
    const timer = setTimeout(() => this.destroy(), LINGER_MS);
    timer.unref();
    this.once('close', () => clearTimeout(timer));
    this.once('end', () => this.destroy());
  };
}
