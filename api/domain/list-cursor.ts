/**
 * The opaque cursor of GET /media: where the next page starts (the last id
 * seen) and which listing it belongs to (the organization and filters),
 * with a check value, base64url. A cursor that was changed, or is used with
 * other filters, is refused with 400 rather than silently paging something
 * else. (It carries nothing secret: a forged cursor only pages the caller's
 * own records.)
 */
import { createHash } from 'node:crypto';
import { Errors } from '@shared/errors';

const check = (payload: string) =>
  createHash('sha256').update(`media-list-cursor:${payload}`).digest('base64url').slice(0, 16);

/** A stable key of what a listing is: the same organization and filters give the same key. */
export function listingKey(parts: Record<string, unknown>): string {
  const canonical = Object.keys(parts)
    .sort()
    .filter((k) => parts[k] !== undefined)
    .map((k) => [k, parts[k]]);
  return createHash('sha256').update(JSON.stringify(canonical)).digest('base64url').slice(0, 16);
}

export function encodeCursor(beforeId: number, listing: string): string {
  const payload = Buffer.from(JSON.stringify({ v: 1, b: beforeId, l: listing })).toString(
    'base64url',
  );
  return `${payload}.${check(payload)}`;
}

/** The id the next page starts below; 400 when the cursor is not one of this listing's. */
export function decodeCursor(cursor: string, listing: string): number {
  const refuse = () =>
    Errors.validation([
      {
        field: 'cursor',
        message: 'cursor is not valid: pass the nextCursor of the same listing, unchanged',
      },
    ]);
  const [payload, mac, extra] = cursor.split('.');
  if (!payload || !mac || extra !== undefined || check(payload) !== mac) throw refuse();
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
  } catch {
    throw refuse();
  }
  const { v, b, l } = (parsed ?? {}) as { v?: unknown; b?: unknown; l?: unknown };
  if (v !== 1 || l !== listing || typeof b !== 'number' || !Number.isSafeInteger(b) || b < 1) {
    throw refuse();
  }
  return b;
}
