/**
 * Names and keys (docs/api.md, "Keys"):
 * - the record's `name` is the uploaded file name made safe to store and show;
 * - the object key is `<org>/<folder>/<base>-<hash>.<ext>` or
 *   `<org>/<base>-<hash>.<ext>`, built only from `[A-Za-z0-9._-]` and `/`
 *   (a `/` only between those parts, never `..`); `buildKey` refuses parts
 *   that would break that shape.
 *
 * test/unit/naming.property.test.ts checks these properties on arbitrary input.
 */
import { randomBytes } from 'node:crypto';

export const MAX_NAME_LENGTH = 255;
export const MAX_KEY_BASE_LENGTH = 80;
export const FALLBACK_NAME = 'file';

// C0/C1 control characters; the Unicode line and paragraph separators (line
// breaks in logs and headers); the bidirectional marks and embedding/override/
// isolate controls, which can disguise an extension ("gpj.exe" shown as
// "exe.jpg"); and the byte-order mark. Right-to-left letters themselves stay.
const UNSAFE_CHARS =
  // eslint-disable-next-line no-control-regex
  /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g;
/** A UTF-16 surrogate without its pair (JSON can carry one; UTF-8, MongoDB and headers cannot). */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** Cuts a string to at most `max` UTF-16 units without splitting a surrogate pair. */
function truncate(s: string, max: number): string {
  if (s.length <= max) return s;
  let cut = s.slice(0, max);
  if (/[\ud800-\udbff]$/.test(cut)) cut = cut.slice(0, -1);
  return cut;
}

/**
 * The record's `name`: the uploaded name without any directory part, control,
 * line-separator or bidi characters, lone surrogates replaced by U+FFFD,
 * trimmed, at most 255 characters (the extension kept when it must be
 * shortened), and `file` when nothing is left. Idempotent.
 */
export function safeDisplayName(original: string | undefined | null): string {
  let name = (original ?? '').replace(LONE_SURROGATE, '\ufffd').normalize('NFC');
  name = name.split(/[/\\]/).pop() ?? '';
  name = name.replace(UNSAFE_CHARS, '').trim();
  if (name.length > MAX_NAME_LENGTH) {
    const dot = name.lastIndexOf('.');
    const ext = dot > 0 && name.length - dot <= 16 ? name.slice(dot) : '';
    const base = truncate(name.slice(0, name.length - ext.length), MAX_NAME_LENGTH - ext.length);
    // (the cut may leave a space at the end of a name without extension)
    name = (ext ? base + ext : base).trim();
  }
  if (name === '' || name === '.' || name === '..') return FALLBACK_NAME;
  return name;
}

/**
 * Reduces a string to `[A-Za-z0-9._-]`: anything else becomes `-`, runs of `-`
 * and of `.` collapse (so no `..`), no leading or trailing dot or dash.
 */
function reduce(s: string, max: number): string {
  const reduced = s
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '') // é → e after NFKD
    .replace(/[^A-Za-z0-9._-]+/g, '-')
    .replace(/-{2,}/g, '-')
    .replace(/\.{2,}/g, '.')
    .replace(/^[.-]+/, '')
    .replace(/[.-]+$/, '');
  return truncate(reduced, max).replace(/[.-]+$/, '');
}

/** The `<name>` part of a key: the file's base name without its extension, reduced. */
export function keyBaseName(original: string | undefined | null): string {
  const name = safeDisplayName(original);
  const dot = name.lastIndexOf('.');
  const base = dot > 0 ? name.slice(0, dot) : name;
  return reduce(base, MAX_KEY_BASE_LENGTH) || FALLBACK_NAME;
}

/**
 * A folder's slug in keys: its name reduced and lower-cased (after the
 * reduction too: compatibility decomposition can make capitals, "ℌ" → "H").
 */
export function folderSlug(name: string): string {
  return reduce(name.toLowerCase(), MAX_KEY_BASE_LENGTH).toLowerCase() || 'folder';
}

/** A short unguessable token (72 random bits, URL- and key-safe). */
export function randomToken(bytes = 9): string {
  return randomBytes(bytes).toString('base64url');
}

export interface KeyParts {
  orgSlug: string;
  folderSlug?: string | null;
  baseName: string;
  ext: string;
}

/** Organization slugs: lower-case letters, digits and dashes, 2–63 characters. */
export const ORG_SLUG_PATTERN = /^[a-z0-9][a-z0-9-]{0,61}[a-z0-9]$/;

/** What `keyBaseName` and `folderSlug` produce: `[A-Za-z0-9._-]`, no dot or dash at either end. */
const KEY_SEGMENT = /^[A-Za-z0-9_](?:[A-Za-z0-9._-]*[A-Za-z0-9_])?$/;
const KEY_TOKEN = /^[A-Za-z0-9_-]{1,64}$/;
const KEY_EXT = /^[a-z0-9]{1,10}$/;

/**
 * `<org>/[<folder>/]<base>-<token>.<ext>`. The parts must already be safe (an
 * organization slug, `folderSlug`, `keyBaseName`, a base64url token, a
 * lower-case extension); anything else is a programming error and throws a
 * TypeError rather than build a key outside that shape.
 */
export function buildKey(parts: KeyParts, token = randomToken()): string {
  const segment = (what: string, value: string) => {
    if (!KEY_SEGMENT.test(value) || value.includes('..') || value.length > MAX_KEY_BASE_LENGTH) {
      throw new TypeError(`unsafe ${what} for a key: ${JSON.stringify(value)}`);
    }
  };
  if (!ORG_SLUG_PATTERN.test(parts.orgSlug)) {
    throw new TypeError(`unsafe organization slug for a key: ${JSON.stringify(parts.orgSlug)}`);
  }
  if (parts.folderSlug) segment('folder slug', parts.folderSlug);
  segment('base name', parts.baseName);
  if (!KEY_TOKEN.test(token)) throw new TypeError(`unsafe key token: ${JSON.stringify(token)}`);
  if (!KEY_EXT.test(parts.ext)) {
    throw new TypeError(`unsafe key extension: ${JSON.stringify(parts.ext)}`);
  }
  const file = `${parts.baseName}-${token}.${parts.ext}`;
  return parts.folderSlug
    ? `${parts.orgSlug}/${parts.folderSlug}/${file}`
    : `${parts.orgSlug}/${file}`;
}

/** Where a job's temporary inputs live (a merge's uploaded PDFs): `<org>/.tmp/`. */
export function temporaryPrefix(orgSlug: string): string {
  return `${orgSlug}/.tmp/`;
}

/**
 * True when `key` is one of the organization's temporary keys: directly under
 * its `.tmp/` prefix, one segment of key-safe characters, no `..` (a job
 * written into Redis by hand must not reach another organization's objects).
 */
export function isTemporaryKeyOf(orgSlug: string, key: string): boolean {
  const prefix = temporaryPrefix(orgSlug);
  if (!key.startsWith(prefix)) return false;
  const rest = key.slice(prefix.length);
  return /^[A-Za-z0-9_][A-Za-z0-9._-]*$/.test(rest) && !rest.includes('..');
}

/**
 * Merged PDFs are the only objects at the bucket's root: `merged_<ms>.pdf`
 * (the interface's form), attributed to an organization through their record
 * (or the key's claim), never through the key.
 */
export const ROOT_KEY_PREFIX = 'merged_';

/** The key of a merged PDF made at `ms` (milliseconds since the epoch). */
export function mergedKey(ms: number): string {
  return `${ROOT_KEY_PREFIX}${ms}.pdf`;
}
