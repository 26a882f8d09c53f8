/**
 * Parses `data:<mediatype>[;param=value]*;base64,<data>` URLs (RFC 2397),
 * strictly: base64 only, valid alphabet and padding, decoded size known and
 * checked before anything is decoded.
 */
export interface ParsedDataUrl {
  /** The declared media type, lower-cased (may be empty). */
  declaredType: string;
  base64: string;
  decodedSize: number;
}

export class DataUrlError extends Error {
  override readonly name = 'DataUrlError';
}

const PREFIX = /^data:([^,;]*)((?:;[^,;]*)*),/i;

export function parseDataUrl(input: unknown): ParsedDataUrl {
  if (typeof input !== 'string' || input.length === 0) {
    throw new DataUrlError('file must be a non-empty data URL (data:<type>;base64,<data>)');
  }
  const head = PREFIX.exec(input.slice(0, 512));
  if (!head)
    throw new DataUrlError('file is not a data URL: it must start with "data:<type>;base64,"');
  const params = (head[2] ?? '').split(';').filter(Boolean);
  if (!params.some((p) => p.toLowerCase() === 'base64')) {
    throw new DataUrlError('only base64 data URLs are accepted (data:<type>;base64,<data>)');
  }
  // Whitespace (line breaks from MIME encoders) is tolerated and removed.
  const base64 = input.slice(head[0].length).replace(/\s+/g, '');
  if (base64.length === 0) throw new DataUrlError('the data URL carries no data');
  if (base64.length % 4 === 1 || !/^[A-Za-z0-9+/]*={0,2}$/.test(base64)) {
    throw new DataUrlError('the data URL is not valid base64');
  }
  const padding = base64.endsWith('==') ? 2 : base64.endsWith('=') ? 1 : 0;
  if (padding && base64.length % 4 !== 0)
    throw new DataUrlError('the data URL is not valid base64');
  const decodedSize = Math.floor((base64.length * 3) / 4) - padding;
  return { declaredType: (head[1] ?? '').trim().toLowerCase(), base64, decodedSize };
}
