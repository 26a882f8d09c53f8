/**
 * Parsers of the variables whose value is a list or a small language of its
 * own (queues, concurrency, trust proxy, origins, signing keys, OTLP headers,
 * accepted types). Each takes the variable's text and returns its value, or
 * throws an Error whose message becomes the variable's issue; none echoes a
 * value that may be a secret.
 */
import { QUEUE_NAMES, type QueueName } from '../jobs';
import { KNOWN_MIME_TYPES } from '../media/formats';

/** Every type the service can store (the formats table's); ACCEPTED_TYPES may narrow it. SVG never. */
export const ACCEPTABLE_TYPES = KNOWN_MIME_TYPES;

/** Queue names an operator may list in WORKER_QUEUES: the job map's (shared/jobs). */
export { QUEUE_NAMES, type QueueName };

/** OTEL_TRACES_SAMPLER values (the OpenTelemetry specification's, minus jaeger_remote and xray). */
export const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;
export type SamplerName = (typeof SAMPLERS)[number];

function isQueueName(v: string | undefined): v is QueueName {
  return (QUEUE_NAMES as readonly string[]).includes(v ?? '');
}

/** A comma-separated list, entries trimmed, empty ones dropped. */
const list = (raw: string) =>
  raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

/** WORKER_QUEUES: a comma-separated list of queue names, at least one. */
export function parseQueues(raw: string): QueueName[] {
  const names = list(raw);
  for (const n of names) {
    if (!isQueueName(n)) throw new Error(`unknown queue "${n}" (known: ${QUEUE_NAMES.join(', ')})`);
  }
  if (names.length === 0) throw new Error('must name at least one queue');
  return [...new Set(names)] as QueueName[];
}

/** WORKER_CONCURRENCY: `2` (every queue) or `image=1,pdf=4` (per queue; unnamed queues get 1). */
export function parseConcurrency(raw: string): Record<QueueName, number> {
  const result = Object.fromEntries(QUEUE_NAMES.map((q) => [q, 1])) as Record<QueueName, number>;
  if (/^\d+$/.test(raw.trim())) {
    const n = Number(raw);
    if (n < 1 || n > 64) throw new Error('must be between 1 and 64');
    for (const q of QUEUE_NAMES) result[q] = n;
    return result;
  }
  for (const entry of raw.split(',')) {
    const [name, value] = entry.split('=').map((s) => s.trim());
    if (!isQueueName(name))
      throw new Error(`unknown queue "${name ?? ''}" (known: ${QUEUE_NAMES.join(', ')})`);
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1 || n > 64)
      throw new Error(`concurrency for "${name}" must be an integer between 1 and 64`);
    result[name] = n;
  }
  return result;
}

/**
 * Express's `trust proxy` setting: `false` (default: the socket's address
 * counts), `true`, a hop count, or a comma-separated list of addresses,
 * subnets and the names `loopback`, `linklocal`, `uniquelocal`.
 */
export type TrustProxy = boolean | number | string[];

/** TRUST_PROXY, as Express's `trust proxy` takes it. */
export function parseTrustProxy(raw: string): TrustProxy {
  const v = raw.trim().toLowerCase();
  if (v === 'false' || v === '0') return false;
  if (v === 'true') return true;
  if (/^\d+$/.test(v)) return Number(v);
  const entries = list(raw);
  const named = new Set(['loopback', 'linklocal', 'uniquelocal']);
  const bad = entries.filter((e) => !named.has(e) && !/^[0-9A-Fa-f:.]+(\/\d{1,3})?$/.test(e));
  if (bad.length > 0) {
    throw new Error(
      `must be true, false, a hop count or a list of addresses/subnets/loopback/linklocal/uniquelocal (not: ${bad.join(', ')})`,
    );
  }
  return entries;
}

/** OTEL_EXPORTER_OTLP_HEADERS: `key=value,key2=value2`, values percent-decoded (the specification's format). */
export function parseOtlpHeaders(raw: string): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const entry of raw.split(',')) {
    if (entry.trim() === '') continue;
    const eq = entry.indexOf('=');
    const key = eq === -1 ? '' : entry.slice(0, eq).trim();
    // The value may be a credential: never echo it.
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(key))
      throw new Error('must be a list of key=value pairs');
    try {
      headers[key] = decodeURIComponent(entry.slice(eq + 1).trim());
    } catch {
      throw new Error(`has a badly percent-encoded value for ${key}`);
    }
  }
  return headers;
}

/** URL_SIGNING_KEYS: comma-separated secrets, the first signs, all verify; each 32+ characters. */
export function parseSigningKeys(raw: string): string[] {
  const keys = list(raw);
  // The values are secrets: never echo them, say which position is wrong.
  const short = keys.flatMap((k, i) => (k.length < 32 ? [i + 1] : []));
  if (short.length > 0) {
    throw new Error(
      `every key must have at least 32 characters (key ${short.join(', ')} is shorter; make one with: openssl rand -base64 32)`,
    );
  }
  return keys;
}

/** CORS_ORIGINS: `*`, or comma-separated origins (`https://app.example.com`, no path). */
export function parseOrigins(raw: string): string[] {
  const origins = list(raw.toLowerCase());
  const bad = origins.filter((o) => o !== '*' && !/^https?:\/\/[^/\s?#]+$/.test(o));
  if (bad.length > 0) {
    throw new Error(
      `must be * or a list of origins such as https://app.example.com (scheme and host, no path; not: ${bad.join(', ')})`,
    );
  }
  return [...new Set(origins)];
}

/** ACCEPTED_TYPES: comma-separated MIME types, each one of ACCEPTABLE_TYPES, at least one. */
export function parseAcceptedTypes(raw: string): string[] {
  const types = [...new Set(list(raw.toLowerCase()))];
  const unknown = types.filter((t) => !ACCEPTABLE_TYPES.includes(t));
  if (unknown.length || types.length === 0) {
    throw new Error(
      `must list types from: ${ACCEPTABLE_TYPES.join(', ')}${unknown.length ? ` (unknown: ${unknown.join(', ')})` : ''}`,
    );
  }
  return types;
}
