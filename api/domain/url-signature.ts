/**
 * The signature of a signed URL, pure functions (no I/O, no clock): the
 * canonical text a signature covers, HMAC-SHA256 over it, and the check of a
 * presented signature against every configured key in constant time.
 *
 * The canonical text is `v1`, the path, and every query parameter but
 * `signature` (the media key, render options, `disposition`, `org` and
 * `expires` among them) sorted by name and written percent-encoded, one line
 * each: changing, adding or removing any parameter changes it. A parameter
 * given twice is refused before any signature is compared, so the route can
 * never read another value than the one that was signed.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** The query parameter carrying the signature (never part of what is signed). */
export const SIGNATURE_PARAM = 'signature';
/** Expiry: whole seconds since the Unix epoch. */
export const EXPIRES_PARAM = 'expires';
/** The organization that signed (its id): the only one whose records the URL reaches. */
export const ORG_PARAM = 'org';

const SIGNATURE = /^[A-Za-z0-9_-]{43}$/;

/** Percent-encoding that keeps `/` (keys read as they do in records' `url`). */
export const encodeParam = (v: string): string => encodeURIComponent(v).replace(/%2F/gi, '/');

/** The text the signature covers: the path, then every parameter but the signature, sorted. */
export function canonicalText(
  path: string,
  params: ReadonlyArray<readonly [string, string]>,
): string {
  const lines = params
    .filter(([name]) => name !== SIGNATURE_PARAM)
    .map(([name, value]) => `${encodeURIComponent(name)}=${encodeURIComponent(value)}`)
    .sort();
  return ['v1', path, ...lines].join('\n');
}

export function signText(key: string, text: string): string {
  return createHmac('sha256', key).update(text).digest('base64url');
}

/** The query string of a signed URL: `params` in their order, then `signature`, signed with `key`. */
export function signedQuery(
  key: string,
  path: string,
  params: ReadonlyArray<readonly [string, string]>,
): string {
  const signature = signText(key, canonicalText(path, params));
  return [...params, [SIGNATURE_PARAM, signature] as const]
    .map(([name, value]) => `${encodeURIComponent(name)}=${encodeParam(value)}`)
    .join('&');
}

export type SignatureCheck =
  | { ok: true; params: Map<string, string> }
  | { ok: false; reason: 'malformed' | 'repeated' | 'mismatch' };

/**
 * Whether the raw query string `query` (without `?`) carries a signature for
 * `path` that one of `keys` made. Every key is tried (constant time each), so
 * the time taken says nothing about which one matched.
 */
export function checkSignature(
  keys: readonly string[],
  path: string,
  query: string,
): SignatureCheck {
  const pairs = [...new URLSearchParams(query)];
  const params = new Map<string, string>();
  for (const [name, value] of pairs) {
    if (params.has(name)) return { ok: false, reason: 'repeated' };
    params.set(name, value);
  }
  const presented = params.get(SIGNATURE_PARAM) ?? '';
  if (!SIGNATURE.test(presented)) return { ok: false, reason: 'malformed' };
  // Compared as text: another spelling of the same bytes (base64url's last character) does not pass.
  const given = Buffer.from(presented);
  const text = canonicalText(path, pairs);
  let matched = false;
  for (const key of keys) {
    if (timingSafeEqual(Buffer.from(signText(key, text)), given)) matched = true;
  }
  return matched ? { ok: true, params } : { ok: false, reason: 'mismatch' };
}
