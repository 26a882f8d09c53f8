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
 *
 * The address rules and the allowlist are in ./address.ts.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import http, { type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
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

/** One request through the guard (redirects followed by hand when asked). */
export async function egressRequest(
  text: string,
  request: EgressRequest,
  policy: EgressPolicy,
): Promise<EgressResponse> {
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

function once(
  target: CheckedTarget,
  request: EgressRequest & { method: string },
  deadline: number,
): Promise<EgressResponse> {
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

  return new Promise<EgressResponse>((resolve, reject) => {
    let settled = false;
    const timers: NodeJS.Timeout[] = [];
    const finish = (err: Error | null, value?: EgressResponse) => {
      if (settled) return;
      settled = true;
      for (const t of timers) clearTimeout(t);
      request.signal?.removeEventListener('abort', onAbort);
      if (err) {
        req.destroy();
        reject(err);
      } else resolve(value!);
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
      const chunks: Buffer[] = [];
      let bytes = 0;
      let truncated = false;
      const done = () =>
        finish(null, {
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: Buffer.concat(chunks),
          truncated,
          url: target.url.href,
        });
      res.on('data', (chunk: Buffer) => {
        if (settled) return;
        const room = maxBytes - bytes;
        bytes += chunk.length;
        if (chunk.length > room) {
          if (request.onLimit === 'fail') {
            return finish(
              new EgressFailed('too_large', `the answer is larger than ${maxBytes} bytes`),
            );
          }
          chunks.push(chunk.subarray(0, Math.max(0, room)));
          truncated = true;
          done();
          res.destroy();
          return;
        }
        chunks.push(chunk);
      });
      res.on('end', done);
      res.on('error', (err) => finish(new EgressFailed('protocol', err.message, { cause: err })));
      res.on('aborted', () => finish(new EgressFailed('protocol', 'the answer was cut short')));
    });
    req.end(request.body);
  });
}
