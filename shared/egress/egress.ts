/**
 * The one guarded way out: every outbound HTTP request the service makes
 * (webhook deliveries, and any later fetch of a URL) goes through
 * `egressRequest`, and every URL a client gives for later use is checked by
 * `checkTarget` first.
 *
 * - http and https only; ports 80 and 443 unless EGRESS_ALLOWED_PORTS adds
 *   others; no userinfo.
 * - The host is resolved here, every address checked (all of them, not the
 *   first: one private address among public ones refuses the name), and the
 *   connection is pinned to the checked address through the socket's
 *   `lookup` (no second resolution, so no rebinding window). An IP literal
 *   (the URL parser has already turned decimal, octal and hex spellings of
 *   IPv4 into dotted quads) is checked before connecting, since Node calls no
 *   `lookup` for it. `localhost` and names under `.localhost` are refused
 *   without asking DNS.
 * - Redirects are followed by hand when asked (at most 3), each hop checked
 *   again; never from https to http; credentials (Authorization, Cookie)
 *   dropped when the origin changes.
 * - Connect, headers and total timeouts; `Accept-Encoding: identity` (a
 *   compressed body is never inflated); the answer's bytes counted as they
 *   arrive and cut at the limit whatever `Content-Length` says.
 * - Two ways to read an answer: `egressRequest` keeps it (at most 4 KiB by
 *   default: webhook deliveries), `egressStream` hands it over as a stream,
 *   failing on byte `maxBytes + 1` and at the total timeout (URL imports,
 *   straight to storage).
 *
 * The address rules and the allowlist are in ./address.ts.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import http, { type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import { PassThrough, type Readable } from 'node:stream';
import ipaddr from 'ipaddr.js';
import {
  allowedAddress,
  allowedHost,
  EMPTY_ALLOWLIST,
  refusedAddress,
  type Allowlist,
} from './address';

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** Resolves a host name to every address it has (tests inject their own: DNS rebinding). */
export type Resolver = (host: string) => Promise<ResolvedAddress[]>;

export const systemResolver: Resolver = async (host) =>
  (await dnsLookup(host, { all: true, verbatim: true })).map((a) => ({
    address: a.address,
    family: a.family === 6 ? 6 : 4,
  }));

export interface EgressPolicy {
  /** Ports allowed besides 80 and 443 (EGRESS_ALLOWED_PORTS). */
  allowedPorts: readonly number[];
  /** What the operator opened on purpose (EGRESS_ALLOWLIST). */
  allowlist: Allowlist;
  resolver?: Resolver;
}

export const DEFAULT_POLICY: EgressPolicy = { allowedPorts: [], allowlist: EMPTY_ALLOWLIST };

/** The target is not one the service may reach: the reason says why (a client's mistake). */
export class EgressRefused extends Error {
  override readonly name = 'EgressRefused';
  constructor(readonly reason: string) {
    super(reason);
  }
}

/** What went wrong reaching an allowed target (the delivery log's error class). */
export type EgressFailureKind =
  'dns' | 'connect' | 'tls' | 'timeout' | 'too_large' | 'too_many_redirects' | 'protocol';

export class EgressFailed extends Error {
  override readonly name = 'EgressFailed';
  constructor(
    readonly kind: EgressFailureKind,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** A URL checked against the policy, with the one address to connect to. */
export interface CheckedTarget {
  url: URL;
  /** The host as the URL names it (brackets removed from an IPv6 literal). */
  host: string;
  port: number;
  address: ResolvedAddress;
}

/** Checks the URL's form only (scheme, userinfo, port): no resolution. */
export function checkUrlForm(text: string, policy: EgressPolicy): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new EgressRefused('not an absolute URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new EgressRefused(`the scheme "${url.protocol.replace(/:$/, '')}" is not http or https`);
  }
  if (url.username || url.password) throw new EgressRefused('a URL with credentials is refused');
  const port = portOf(url);
  if (port !== 80 && port !== 443 && !policy.allowedPorts.includes(port)) {
    throw new EgressRefused(`port ${port} is not allowed (80 and 443, and EGRESS_ALLOWED_PORTS)`);
  }
  return url;
}

function portOf(url: URL): number {
  return url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : 80;
}

/**
 * Checks a URL and resolves its host: every address must be allowed. Answers
 * the address to connect to (the first checked one).
 */
export async function checkTarget(text: string, policy: EgressPolicy): Promise<CheckedTarget> {
  const url = checkUrlForm(text, policy);
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = portOf(url);
  const named = allowedHost(policy.allowlist, host);
  let addresses: ResolvedAddress[];
  if (ipaddr.isValid(host)) {
    addresses = [{ address: host, family: host.includes(':') ? 6 : 4 }];
  } else {
    const bare = host.toLowerCase().replace(/\.$/, '');
    if (!named && (bare === 'localhost' || bare.endsWith('.localhost'))) {
      throw new EgressRefused(`"${host}" is a loopback name`);
    }
    if (!bare.includes('.') && !named) {
      throw new EgressRefused(`"${host}" is not a fully qualified host name`);
    }
    try {
      addresses = await (policy.resolver ?? systemResolver)(bare);
    } catch (err) {
      throw new EgressFailed('dns', `"${host}" does not resolve`, { cause: err });
    }
    if (addresses.length === 0) throw new EgressFailed('dns', `"${host}" has no address`);
  }
  if (!named) {
    for (const { address } of addresses) {
      if (allowedAddress(policy.allowlist, address)) continue;
      const refused = refusedAddress(address);
      if (refused) {
        throw new EgressRefused(
          addresses.length > 1 || address !== host ? `"${host}" resolves to ${refused}` : refused,
        );
      }
    }
  }
  return { url, host, port, address: addresses[0]! };
}

export interface EgressRequest {
  method?: 'GET' | 'POST' | 'HEAD';
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Until the connection (and TLS) is up (default 5 s). */
  connectMs?: number;
  /** Until the answer's status and headers are in (default 10 s). */
  headersMs?: number;
  /** The whole exchange, body included (default 15 s). */
  totalMs?: number;
  /** Bytes of the answer read at most (default 4 KiB). */
  maxBytes?: number;
  /** Past `maxBytes`: stop and keep what came (`truncate`, default) or fail (`fail`). */
  onLimit?: 'truncate' | 'fail';
  /** Redirects followed (default 0: a 3xx is answered as it is; at most 3). */
  maxRedirects?: number;
  signal?: AbortSignal;
}

export interface EgressResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** At most `maxBytes` of the answer. */
  body: Buffer;
  /** More came than `maxBytes` (`onLimit: 'truncate'`). */
  truncated: boolean;
  /** The URL that answered (after redirects). */
  url: string;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const CREDENTIAL_HEADERS = ['authorization', 'cookie', 'proxy-authorization'];

/** One request through the guard (redirects followed by hand when asked), its answer read whole. */
export async function egressRequest(
  text: string,
  request: EgressRequest,
  policy: EgressPolicy,
): Promise<EgressResponse> {
  const opened = await open(text, request, policy);
  const chunks: Buffer[] = [];
  try {
    for await (const chunk of opened.body) chunks.push(chunk as Buffer);
  } catch (err) {
    opened.close();
    throw err;
  }
  return {
    status: opened.status,
    headers: opened.headers,
    body: Buffer.concat(chunks),
    truncated: opened.truncated(),
    url: opened.url,
  };
}

/** An answer whose body is still coming (`egressStream`). */
export interface EgressStream {
  status: number;
  headers: IncomingHttpHeaders;
  /** The URL that answered (after redirects). */
  url: string;
  /**
   * The answer's bytes as they arrive (never inflated), counted: it fails
   * with `EgressFailed('too_large')` on byte `maxBytes + 1` whatever
   * `Content-Length` said, and with `EgressFailed('timeout')` once the total
   * time is up (a slow sender is cut there).
   */
  body: Readable;
  /** Ends the exchange (the connection closed, the timers cleared); safe to call twice. */
  close(): void;
}

/**
 * One request through the guard whose answer is streamed rather than kept
 * (imports: a file straight to storage). The same checks, pinning, redirects
 * and timeouts as `egressRequest`; past `maxBytes` the body always fails
 * (`onLimit` is ignored). The caller reads or closes the body.
 */
export function egressStream(
  text: string,
  request: Omit<EgressRequest, 'onLimit' | 'body'>,
  policy: EgressPolicy,
): Promise<EgressStream> {
  return open(text, { ...request, onLimit: 'fail' }, policy);
}

interface Opened extends EgressStream {
  truncated(): boolean;
}

/** Follows redirects by hand (each hop checked again) and answers the last answer, its body unread. */
async function open(text: string, request: EgressRequest, policy: EgressPolicy): Promise<Opened> {
  const maxRedirects = Math.min(request.maxRedirects ?? 0, 3);
  const deadline = Date.now() + (request.totalMs ?? 15_000);
  let current = text;
  let method = request.method ?? 'GET';
  let body = request.body;
  let headers = { ...(request.headers ?? {}) };
  for (let hop = 0; ; hop++) {
    const target = await checkTarget(current, policy);
    const answer = await once(target, { ...request, method, body, headers }, deadline);
    const location = answer.headers.location;
    if (maxRedirects === 0 || !REDIRECTS.has(answer.status) || !location) return answer;
    answer.close();
    if (hop >= maxRedirects) {
      throw new EgressFailed('too_many_redirects', `more than ${maxRedirects} redirects`);
    }
    let next: URL;
    try {
      next = new URL(location, target.url);
    } catch {
      throw new EgressFailed('protocol', 'a redirect to something that is not a URL');
    }
    if (target.url.protocol === 'https:' && next.protocol === 'http:') {
      throw new EgressRefused('a redirect from https to http is refused');
    }
    if (next.origin !== target.url.origin) {
      headers = Object.fromEntries(
        Object.entries(headers).filter(([k]) => !CREDENTIAL_HEADERS.includes(k.toLowerCase())),
      );
    }
    if (
      answer.status === 303 ||
      ((answer.status === 301 || answer.status === 302) && method === 'POST')
    ) {
      method = 'GET';
      body = undefined;
    }
    current = next.href;
  }
}

/**
 * One exchange with a checked target: resolves once the status and headers
 * are in, with the body as a counted stream; the total timer keeps running
 * until the body ends or is closed.
 */
function once(
  target: CheckedTarget,
  request: EgressRequest & { method: string },
  deadline: number,
): Promise<Opened> {
  const maxBytes = request.maxBytes ?? 4096;
  const { address } = target;
  // The connection goes to the checked address, whatever DNS says now.
  const lookup: LookupFunction = (_host, options, callback) => {
    if ((options as { all?: boolean }).all) {
      (callback as unknown as (e: null, a: ResolvedAddress[]) => void)(null, [address]);
    } else callback(null, address.address, address.family);
  };
  const client = target.url.protocol === 'https:' ? https : http;
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(request.headers ?? {})) {
    if (k.toLowerCase() !== 'accept-encoding') headers[k] = v;
  }
  headers['accept-encoding'] = 'identity';
  if (request.body !== undefined)
    headers['content-length'] = String(Buffer.byteLength(request.body));

  return new Promise<Opened>((resolve, reject) => {
    let answered = false;
    let ended = false;
    const timers: NodeJS.Timeout[] = [];
    const body = new PassThrough();
    // Its reader sees the failure; unread, a failed body must not crash the process.
    body.on('error', () => undefined);
    let truncated = false;
    /** Ends everything: before the answer, rejects; after it, fails the body (or just closes). */
    const finish = (err: Error | null) => {
      if (ended) return;
      ended = true;
      for (const t of timers) clearTimeout(t);
      request.signal?.removeEventListener('abort', onAbort);
      if (err || !answered) req.destroy();
      if (!answered) {
        if (err) reject(err);
      } else if (err) body.destroy(err);
    };
    const onAbort = () =>
      finish(new EgressFailed('timeout', 'aborted', { cause: request.signal?.reason }));
    const req = client.request({
      protocol: target.url.protocol,
      hostname: target.host,
      port: target.port,
      path: `${target.url.pathname}${target.url.search}`,
      method: request.method,
      headers,
      lookup,
      agent: false,
      ...(target.url.protocol === 'https:' && !ipaddr.isValid(target.host)
        ? { servername: target.host }
        : {}),
    });
    const after = (ms: number, what: string) => {
      const timer = setTimeout(
        () => finish(new EgressFailed('timeout', `${what} took longer than ${ms} ms`)),
        Math.max(0, ms),
      );
      timer.unref();
      timers.push(timer);
      return timer;
    };
    after(deadline - Date.now(), 'the request');
    const connectTimer = after(request.connectMs ?? 5_000, 'connecting');
    const headersTimer = after(request.headersMs ?? 10_000, 'the answer’s headers');
    if (request.signal?.aborted) return onAbort();
    request.signal?.addEventListener('abort', onAbort, { once: true });
    req.on('socket', (socket) => {
      const connected = () => clearTimeout(connectTimer);
      socket.once(target.url.protocol === 'https:' ? 'secureConnect' : 'connect', connected);
    });
    req.on('error', (err: NodeJS.ErrnoException) => {
      const code = err.code ?? '';
      const tls = /CERT|SSL|TLS/i.test(code) || /certificate|tls/i.test(err.message);
      const kind = tls ? 'tls' : code.startsWith('HPE_') ? 'protocol' : 'connect';
      finish(new EgressFailed(kind, `${target.host}: ${code || err.message}`, { cause: err }));
    });
    req.on('response', (res: IncomingMessage) => {
      clearTimeout(headersTimer);
      let bytes = 0;
      // The reader closed the body (or it failed): the exchange ends with it.
      body.on('close', () => {
        finish(null);
        res.destroy();
      });
      res.on('data', (chunk: Buffer) => {
        if (ended) return;
        const room = maxBytes - bytes;
        bytes += chunk.length;
        if (chunk.length > room) {
          if (request.onLimit === 'fail') {
            finish(new EgressFailed('too_large', `the answer is larger than ${maxBytes} bytes`));
            res.destroy();
            return;
          }
          if (room > 0) body.write(chunk.subarray(0, room));
          truncated = true;
          body.end();
          finish(null);
          res.destroy();
          return;
        }
        if (!body.write(chunk)) {
          res.pause();
          body.once('drain', () => res.resume());
        }
      });
      res.on('end', () => {
        if (ended) return;
        body.end();
        finish(null);
      });
      res.on('error', (err) => finish(new EgressFailed('protocol', err.message, { cause: err })));
      res.on('aborted', () => finish(new EgressFailed('protocol', 'the answer was cut short')));
      answered = true;
      resolve({
        status: res.statusCode ?? 0,
        headers: res.headers,
        url: target.url.href,
        body,
        truncated: () => truncated,
        close: () => {
          finish(null);
          res.destroy();
          if (!body.destroyed) body.destroy();
        },
      });
    });
    req.end(request.body);
  });
}
