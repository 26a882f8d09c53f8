/**
 * The client address that limits and lockouts count by (failed token lookups,
 * dashboard logins, signed-URL requests), written so that a client cannot
 * pick it:
 *
 * - `TRUST_PROXY=true` makes Express's `req.ip` the left-most
 *   `X-Forwarded-For` entry, which the client writes itself. Here it is the
 *   right-most entry instead: the address the proxy in front of the API saw
 *   and appended. (A hop count or a list of proxies' addresses already makes
 *   `req.ip` the right-most untrusted hop; it is used as it is.)
 * - An IPv4-mapped IPv6 address counts as its IPv4 address, and an IPv6
 *   address by its /64 prefix: one host commonly holds a whole /64, so
 *   counting single IPv6 addresses would let it rotate past any limit.
 */
import { isIP } from 'node:net';
import type { IncomingHttpHeaders } from 'node:http';

/** The address one client is counted by: IPv4 as it is, IPv6 as its /64 (`2001:db8:0:1::/64`). */
export function addressKey(address: string): string {
  const bare = address.split('%')[0]!; // an IPv6 zone id says nothing about the client
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(bare);
  if (mapped) return mapped[1]!;
  if (isIP(bare) !== 6) return bare;
  const [head, tail] = bare.split('::') as [string, string | undefined];
  const groups = (part: string | undefined) =>
    part ? part.split(':').flatMap((g) => (g.includes('.') ? ['0', '0'] : [g])) : [];
  const before = groups(head);
  const after = groups(tail);
  const all =
    tail === undefined
      ? before
      : [...before, ...Array<string>(8 - before.length - after.length).fill('0'), ...after];
  return `${all
    .slice(0, 4)
    .map((g) => parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}

/** The right-most entry of `X-Forwarded-For`: the address the proxy nearest the API saw. */
function nearestForwarded(header: string | string[] | undefined): string | undefined {
  const joined = Array.isArray(header) ? header.join(',') : header;
  const last = joined?.split(',').pop()?.trim();
  return last && isIP(last) ? last : undefined;
}

/** The address `req` is counted by (see the file's header). */
export function clientAddress(req: {
  ip?: string | undefined;
  headers: IncomingHttpHeaders;
  socket: { remoteAddress?: string | undefined };
  app: { get(name: string): unknown };
}): string {
  const socket = req.socket.remoteAddress ?? 'unknown';
  const address =
    req.app.get('trust proxy') === true
      ? (nearestForwarded(req.headers['x-forwarded-for']) ?? socket)
      : (req.ip ?? socket);
  return addressKey(address);
}
