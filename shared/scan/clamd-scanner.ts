/**
 * A client of clamd's INSTREAM command (`zINSTREAM`): the bytes sent in
 * chunks, each prefixed by its length (4 bytes, big-endian), a zero length
 * ending the stream; clamd answers one line: `stream: OK`,
 * `stream: <signature> FOUND`, or `INSTREAM size limit exceeded. ERROR`
 * (past its `StreamMaxLength`). A connection per scan, over TCP or a Unix
 * socket. Written here rather than taken from npm: the clients there wrap
 * the clamscan binaries (clamscan) or have neither types nor a way to stop a
 * scan (clamdjs), and the protocol is these few lines.
 */
import { connect, type Socket } from 'node:net';
import type { Readable } from 'node:stream';

/** What clamd said of a file. */
export type ClamdVerdict =
  | { result: 'clean' }
  | { result: 'infected'; signature: string }
  /** Past one of clamd's limits: `StreamMaxLength`, or (`AlertExceedsMax yes`) `MaxScanSize`, `MaxFileSize`… */
  | { result: 'over-limit'; reason: string };

/** clamd could not be reached, or answered something else than a verdict: the scan is retried. */
export class ClamdError extends Error {
  override readonly name = 'ClamdError';
  /** The connection broke while bytes were being sent, without an answer. */
  midStream = false;
}

/** Signatures clamd reports for a file it did not scan whole (`AlertExceedsMax yes`). */
const EXCEEDS_MAX = /^Heuristics\.Limits\.Exceeded\b/;

/** `tcp://host:port` or `unix:/path`, as CLAMD_URL takes them. */
export function clamdAddress(url: string): { host: string; port: number } | { path: string } {
  if (url.startsWith('unix:'))
    return { path: url.slice('unix:'.length).replace(/^\/\/(?=\/)/, '') };
  const u = new URL(url);
  return { host: u.hostname.replace(/^\[|\]$/g, ''), port: Number(u.port) };
}

export class ClamdScanner {
  constructor(
    private readonly options: {
      url: string;
      /** Longest one command may take, end to end. */
      timeoutMs: number;
      /** Bytes per chunk sent (default 64 KiB). */
      chunkBytes?: number;
    },
  ) {}

  /** Scans a stream's bytes. Rejects with ClamdError when clamd cannot answer. */
  async scan(body: Readable, signal?: AbortSignal): Promise<ClamdVerdict> {
    let sent = 0;
    let reply: string;
    try {
      reply = await this.command('zINSTREAM\0', signal, async (socket) => {
        const chunkBytes = this.options.chunkBytes ?? 64 * 1024;
        for await (const data of body as AsyncIterable<Buffer>) {
          for (let at = 0; at < data.length; at += chunkBytes) {
            const chunk = data.subarray(at, at + chunkBytes);
            const length = Buffer.alloc(4);
            length.writeUInt32BE(chunk.length);
            // clamd closes the connection once past StreamMaxLength: its reply is read below.
            if (!(await write(socket, Buffer.concat([length, chunk])))) return;
            sent += chunk.length;
          }
        }
        await write(socket, Buffer.alloc(4));
      });
    } catch (err) {
      // Past StreamMaxLength clamd replies and closes with bytes still unread: the reset
      // can drop its reply. A clamd that cut a stream and still answers PING cut it there.
      if (!(err instanceof ClamdError) || !err.midStream || sent === 0) throw err;
      await this.ping(signal);
      return { result: 'over-limit', reason: `clamd closed the stream after ${sent} bytes` };
    } finally {
      // What was not sent is not read (a storage stream let go).
      body.destroy();
    }
    const line = reply.replace(/\0+$/, '').trim();
    const found = /^stream: (.+) FOUND$/.exec(line);
    if (line === 'stream: OK') return { result: 'clean' };
    if (found) {
      const signature = found[1]!;
      return EXCEEDS_MAX.test(signature)
        ? { result: 'over-limit', reason: signature }
        : { result: 'infected', signature };
    }
    if (/size limit exceeded/i.test(line)) return { result: 'over-limit', reason: line };
    throw new ClamdError(`clamd answered "${line.slice(0, 200)}"`);
  }

  /** Resolves when clamd answers PING with PONG. */
  async ping(signal?: AbortSignal): Promise<void> {
    const reply = await this.command('zPING\0', signal);
    if (reply.replace(/\0+$/, '').trim() !== 'PONG') {
      throw new ClamdError(`clamd answered PING with "${reply.slice(0, 100)}"`);
    }
  }

  /** clamd's version line (`ClamAV 1.4.6/…`). */
  async version(signal?: AbortSignal): Promise<string> {
    return (await this.command('zVERSION\0', signal)).replace(/\0+$/, '').trim();
  }

  private command(
    command: string,
    signal: AbortSignal | undefined,
    send?: (socket: Socket) => Promise<void>,
  ): Promise<string> {
    return new Promise<string>((resolve, reject) => {
      signal?.throwIfAborted();
      const socket = connect(clamdAddress(this.options.url));
      const chunks: Buffer[] = [];
      let settled = false;
      const finish = (err: Error | null) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        socket.destroy();
        if (err) reject(err);
        else resolve(Buffer.concat(chunks).toString('utf8'));
      };
      const onAbort = () =>
        finish(signal!.reason instanceof Error ? signal!.reason : new ClamdError('aborted'));
      const timer = setTimeout(
        () => finish(new ClamdError(`clamd did not answer within ${this.options.timeoutMs} ms`)),
        this.options.timeoutMs,
      );
      signal?.addEventListener('abort', onAbort, { once: true });
      socket.on('data', (d: Buffer) => {
        chunks.push(d);
        // A reply is one line ended by NUL (the z-commands).
        if (d.includes(0)) finish(null);
      });
      // Past StreamMaxLength clamd replies and closes while bytes are still sent: a write
      // fails (EPIPE, a reset) before its reply is read, so the outcome waits for the close.
      let failure: Error | undefined;
      socket.on('error', (err: Error) => {
        failure ??= err;
      });
      socket.on('close', () => {
        if (chunks.length) finish(null);
        else {
          const err = new ClamdError(
            failure
              ? `clamd is unreachable: ${failure.message}`
              : 'clamd closed the connection without an answer',
          );
          err.midStream = connected;
          finish(err);
        }
      });
      let connected = false;
      socket.once('connect', () => {
        connected = true;
        socket.write(command);
        send?.(socket).catch((err: unknown) =>
          finish(err instanceof Error ? err : new ClamdError(String(err))),
        );
      });
    });
  }
}

/** Writes, waiting for the socket to drain; false once the socket is closed. */
function write(socket: Socket, data: Buffer): Promise<boolean> {
  if (socket.destroyed || socket.writableEnded) return Promise.resolve(false);
  return new Promise<boolean>((resolve) => {
    const ok = socket.write(data, (err) => {
      if (err) resolve(false);
      else if (ok) resolve(true);
    });
    if (!ok) {
      const drained = () => {
        socket.off('close', closed);
        resolve(!socket.destroyed);
      };
      const closed = () => {
        socket.off('drain', drained);
        resolve(false);
      };
      socket.once('drain', drained);
      socket.once('close', closed);
    }
  });
}
