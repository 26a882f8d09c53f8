/**
 * The file-system object store's names: which keys it accepts (none that
 * could leave its root or name its own files), how a key travels in a
 * temporary file's name, the errors that mean "missing" or "wrong shape",
 * and the ETag it derives from a file's stat.
 */
/** The temporary directory's name under the root (never a key's first segment). */
export const TEMP_DIR = '.tmp';
/** Suffix of the content-type sidecar beside each object (never a key's suffix). */
export const META_SUFFIX = '.meta.json';
const MAX_KEY_LENGTH = 1024;
/** Longest temporary file name that still carries its key (NAME_MAX is 255). */
export const MAX_TEMP_NAME = 255;
export const DEFAULT_CONTENT_TYPE = 'application/octet-stream';

/** Errors that mean the key names a "directory" or a "file" where the other is needed. */
export const SHAPE_CODES = new Set(['ENOTDIR', 'EISDIR', 'EEXIST']);
export const MISSING_CODES = new Set(['ENOENT', 'ENOTDIR', 'EISDIR']);

export function codeOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** Refuses keys that could name anything outside the root, or the store's own files. */
export function assertValidKey(key: string): void {
  const refuse = (why: string) => {
    throw new Error(`Invalid object key ${JSON.stringify(key)}: ${why}`);
  };
  if (typeof key !== 'string' || key.length === 0) refuse('empty');
  if (key.length > MAX_KEY_LENGTH) refuse(`longer than ${MAX_KEY_LENGTH} characters`);
  if (key.includes('\0')) refuse('contains NUL');
  if (key.includes('\\')) refuse('contains a backslash');
  if (key.startsWith('/')) refuse('absolute');
  for (const segment of key.split('/')) {
    if (segment === '' || segment === '.' || segment === '..') refuse(`has a "${segment}" segment`);
  }
  if (key === TEMP_DIR || key.startsWith(`${TEMP_DIR}/`)) refuse(`"${TEMP_DIR}" is reserved`);
  if (key.endsWith(META_SUFFIX)) refuse(`"${META_SUFFIX}" is reserved`);
}

export const encodeKey = (key: string) => Buffer.from(key, 'utf8').toString('base64url');
export const decodeKey = (encoded: string) => Buffer.from(encoded, 'base64url').toString('utf8');

export function isName(segment: string): boolean {
  return segment !== '' && segment !== '.' && segment !== '..';
}

/** `<size>-<mtime in µs>-<inode>`, hex: changes whenever a put or copy replaces the file. */
export function etagOf(st: { size: number; mtimeMs: number; ino: number }): string {
  return [st.size, Math.round(st.mtimeMs * 1000), st.ino].map((n) => n.toString(16)).join('-');
}
