/** The configuration's parsers for outbound requests and webhooks (shared/config/variables.ts). */
import { parseAllowlist as allowlist, type Allowlist } from './address';

/** EGRESS_ALLOWED_PORTS: comma-separated ports. */
export function parsePorts(raw: string): number[] {
  const ports = raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const bad = ports.filter((p) => !/^\d+$/.test(p) || Number(p) < 1 || Number(p) > 65_535);
  if (bad.length) throw new Error(`must be ports 1 to 65535 (not: ${bad.join(', ')})`);
  return [...new Set(ports.map(Number))];
}

/** EGRESS_ALLOWLIST: comma-separated host names and CIDRs. */
export function parseAllowlist(raw: string): Allowlist {
  try {
    return allowlist(raw);
  } catch (err) {
    throw new Error(`must be host names and CIDRs: ${(err as Error).message}`, { cause: err });
  }
}

const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };

/** WEBHOOK_RETRY_SCHEDULE: comma-separated delays (`0`, `500ms`, `5s`, `5m`, `2h`), 1 to 20 of them. */
export function parseRetrySchedule(raw: string): number[] {
  const delays = raw.split(',').map((entry) => {
    const m = /^\s*(\d+)\s*(ms|s|m|h)?\s*$/.exec(entry);
    if (!m) throw new Error(`"${entry.trim()}" is not a delay such as 0, 500ms, 5s, 5m or 2h`);
    return Number(m[1]) * UNITS[m[2] ?? 'ms']!;
  });
  if (delays.length < 1 || delays.length > 20) throw new Error('must list 1 to 20 delays');
  return delays;
}
