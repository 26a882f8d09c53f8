/**
 * Names and keys (DESIGN.md section 3, "Keys"):
 * - the record's `name` is the uploaded file name made safe to store and show;
 * - the object key is `<org>/<folder>/<base>-<hash>.<ext>` or
 *   `<org>/<base>-<hash>.<ext>`, built only from `[A-Za-z0-9._-]` and `/`.
 */
import { randomBytes } from 'node:crypto';

export const MAX_NAME_LENGTH = 255;
export const MAX_KEY_BASE_LENGTH = 80;
export const FALLBACK_NAME = 'file';

// C0/C1 control characters, and the Unicode bidirectional embedding/override/
// isolate controls, which can disguise an extension ("gpj.exe" shown as "exe.jpg").
// eslint-disable-next-line no-control-regex
const UNSAFE_CHARS = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069\ufeff]/g;

/** Cuts a string to at most `max` UTF-16 units without splitting a surrogate pair. */
function truncate(s: string, max: number): string {
  if (s.length <= max) return s;
  let cut = s.slice(0, max);
  if (/[\ud800-\udbff]$/.test(cut)) cut = cut.slice(0, -1);
  return cut;
}

/**
 * The record's `name`: the uploaded name without any directory part, control
 * or bidi-override characters, trimmed, at most 255 characters (the extension
 * kept when it must be shortened), and `file` when nothing is left.
 */
export function safeDisplayName(original: string | undefined | null): string {
  let name = (original ?? '').normalize('NFC');
  name = name.split(/[/\\]/).pop() ?? '';
  name = name.replace(UNSAFE_CHARS, '').trim();
  if (name === '' || name === '.' || name === '..') return FALLBACK_NAME;
  if (name.length > MAX_NAME_LENGTH) {
    const dot = name.lastIndexOf('.');
    const ext = dot > 0 && name.length - dot <= 16 ? name.slice(dot) : '';
    name = truncate(name.slice(0, name.length - ext.length), MAX_NAME_LENGTH - ext.length) + ext;
  }
  return name;
}

/** Reduces a string to `[A-Za-z0-9._-]`: anything else becomes `-`, runs of `-` collapse, no leading dots. */
function reduce(s: string, max: number): string {
  const reduced = s
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '') // é → e after NFKD
    .replace(/[^A-Za-z0-9._-]+/g, '-')
    .replace(/-{2,}/g, '-')
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

/** A folder's slug in keys: its name lower-cased and reduced. */
export function folderSlug(name: string): string {
  return reduce(name.toLowerCase(), MAX_KEY_BASE_LENGTH) || 'folder';
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

export function buildKey(parts: KeyParts, token = randomToken()): string {
  const file = `${parts.baseName}-${token}.${parts.ext}`;
  return parts.folderSlug
    ? `${parts.orgSlug}/${parts.folderSlug}/${file}`
    : `${parts.orgSlug}/${file}`;
}

/** Organization slugs: lower-case letters, digits and dashes, 2–63 characters. */
export const ORG_SLUG_PATTERN = /^[a-z0-9][a-z0-9-]{0,61}[a-z0-9]$/;
