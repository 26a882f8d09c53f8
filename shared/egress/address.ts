/**
 * Which network addresses an outbound request may reach: the address rules of
 * the one guarded way out (./egress.ts). Public unicast only: loopback,
 * private, link-local, CGNAT, unspecified, broadcast, multicast, reserved and
 * documentation ranges are refused, and so is IPv4 inside IPv6 in every form
 * (mapped, translated, compatible, NAT64, 6to4, Teredo, ISATAP), whatever the
 * IPv4 address inside; cloud metadata addresses are named on their own.
 *
 * The ranges come from ipaddr.js (its `range()`); what it calls "unicast" and
 * is not, it is added here: ISATAP interface identifiers, IPv4-compatible
 * addresses (`::a.b.c.d`), 168.63.129.16 (Azure's wire server), and IPv6
 * outside global unicast (2000::/3).
 *
 * The operator's allowlist (EGRESS_ALLOWLIST: host names and CIDRs) opens
 * internal targets on purpose; nothing else does.
 */
import ipaddr from 'ipaddr.js';

/** Cloud metadata services (AWS/GCP/OpenStack, Azure's wire server, AWS over IPv6). */
const METADATA = new Set(['169.254.169.254', '168.63.129.16', 'fd00:ec2::254']);

/** Why an address is refused, or null when it is public unicast. */
export function refusedAddress(address: string): string | null {
  if (!ipaddr.isValid(address)) return `"${address}" is not an IP address`;
  const parsed = ipaddr.parse(address);
  const canonical = parsed.toNormalizedString();
  if (METADATA.has(address) || METADATA.has(canonical) || METADATA.has(parsed.toString())) {
    return `${address} is a cloud metadata address`;
  }
  if (parsed.kind() === 'ipv4') return refusedV4(parsed as ipaddr.IPv4, address);
  return refusedV6(parsed as ipaddr.IPv6, address);
}

function refusedV4(ip: ipaddr.IPv4, shown: string): string | null {
  const range = ip.range();
  if (range !== 'unicast') return `${shown} is in a ${describe(range)} range`;
  return null;
}

function refusedV6(ip: ipaddr.IPv6, shown: string): string | null {
  const parts = ip.parts;
  // IPv4-compatible (::a.b.c.d, deprecated), whatever ipaddr.js calls it.
  if (parts.slice(0, 6).every((p) => p === 0) && (parts[6] !== 0 || parts[7]! > 1)) {
    return `${shown} carries an IPv4 address inside IPv6 (compatible)`;
  }
  const range = ip.range();
  if (range === 'ipv4Mapped' || range === 'rfc6145' || range === 'rfc6052') {
    return `${shown} carries an IPv4 address inside IPv6 (${describe(range)})`;
  }
  if (range === '6to4' || range === 'teredo') {
    return `${shown} is a ${range} address (IPv4 tunnelled in IPv6)`;
  }
  if (range !== 'unicast') return `${shown} is in a ${describe(range)} range`;
  // ISATAP: an interface identifier of 0000:5efe or 0200:5efe and an IPv4 address.
  if ((parts[4] === 0 || parts[4] === 0x0200) && parts[5] === 0x5efe) {
    return `${shown} is an ISATAP address (IPv4 tunnelled in IPv6)`;
  }
  // Only global unicast (2000::/3) is public.
  if ((parts[0]! & 0xe000) !== 0x2000) return `${shown} is not a global unicast address`;
  return null;
}

function describe(range: string): string {
  const names: Record<string, string> = {
    unspecified: 'unspecified',
    broadcast: 'broadcast',
    multicast: 'multicast',
    linkLocal: 'link-local',
    loopback: 'loopback',
    carrierGradeNat: 'carrier-grade NAT',
    private: 'private',
    uniqueLocal: 'unique-local (private)',
    reserved: 'reserved',
    ipv4Mapped: 'IPv4-mapped',
    rfc6145: 'IPv4-translated',
    rfc6052: 'NAT64',
    deprecatedSiteLocal: 'site-local',
  };
  return names[range] ?? `special-purpose (${range})`;
}

/** The operator's allowlist: exact host names (no trailing dot, lower case) and CIDRs. */
export interface Allowlist {
  hosts: ReadonlySet<string>;
  cidrs: readonly [ipaddr.IPv4 | ipaddr.IPv6, number][];
}

export const EMPTY_ALLOWLIST: Allowlist = { hosts: new Set(), cidrs: [] };

/** Parses `EGRESS_ALLOWLIST` (comma-separated host names and CIDRs; a bare IP is its /32 or /128). */
export function parseAllowlist(text: string): Allowlist {
  const hosts = new Set<string>();
  const cidrs: [ipaddr.IPv4 | ipaddr.IPv6, number][] = [];
  for (const raw of text.split(',')) {
    const entry = raw.trim().toLowerCase();
    if (!entry) continue;
    if (entry.includes('/')) {
      try {
        cidrs.push(ipaddr.parseCIDR(entry));
      } catch {
        throw new Error(`"${entry}" is not a CIDR`);
      }
    } else if (ipaddr.isValid(entry)) {
      const ip = ipaddr.parse(entry);
      cidrs.push([ip, ip.kind() === 'ipv4' ? 32 : 128]);
    } else if (/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?$/.test(entry)) {
      hosts.add(entry.replace(/\.$/, ''));
    } else {
      throw new Error(`"${entry}" is neither a host name nor a CIDR`);
    }
  }
  return { hosts, cidrs };
}

/** The allowlist opens this address (one of its CIDRs holds it; an IPv4-mapped address as its IPv4). */
export function allowedAddress(list: Allowlist, address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  const ip = ipaddr.process(address);
  return list.cidrs.some(([net, bits]) => net.kind() === ip.kind() && ip.match(net, bits));
}

/** The allowlist names this host (exactly, case and trailing dot aside). */
export function allowedHost(list: Allowlist, host: string): boolean {
  return list.hosts.has(host.toLowerCase().replace(/\.$/, ''));
}
