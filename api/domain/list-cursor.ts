/**
 * The opaque cursor of GET /media: where the next page starts (the last id
 * seen, and under a `sort` by name or size the last record's name or size
 * too) and which listing it belongs to (the organization, filters and sort),
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

/** Where a page ends: the last record's id, and its sort value when the order is not by id. */
export interface CursorPosition {
  id: number;
  value?: string | number | undefined;
}

export function encodeCursor(last: CursorPosition, listing: string): string {
  const body = {
    v: 1,
    b: last.id,
    l: listing,
    ...(last.value === undefined ? {} : { k: last.value }),
  };
  const payload = Buffer.from(JSON.stringify(body)).toString('base64url');
  return `${payload}.${check(payload)}`;
}

/** Where the next page starts; 400 when the cursor is not one of this listing's. */
export function decodeCursor(cursor: string, listing: string): CursorPosition {
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
  const { v, b, l, k } = (parsed ?? {}) as { v?: unknown; b?: unknown; l?: unknown; k?: unknown };
  if (v !== 1 || l !== listing || typeof b !== 'number' || !Number.isSafeInteger(b) || b < 1) {
    throw refuse();
  }
  if (k !== undefined && typeof k !== 'string' && typeof k !== 'number') throw refuse();
  return { id: b, value: k };
}
