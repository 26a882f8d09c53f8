/**
 * The object estimate a merge checks before any parsing (merge.ts): about how
 * many objects pdf-lib would build from a file, counted over its raw bytes in
 * one linear pass with `Buffer.indexOf`, without copying them into strings or
 * running regular expressions (docs/performance.md, "PDF adapter", has why).
 */

const OBJ = Buffer.from('obj', 'latin1');
const OBJSTM = Buffer.from('/ObjStm', 'latin1');
const SLASH_N = Buffer.from('/N', 'latin1');
/** How far from an `/ObjStm` its `/N` may sit (both are in the same stream dictionary). */
const WINDOW = 256;
/** `/N` values of more digits than this are not counted (as a malformed count). */
const MAX_DIGITS = 9;

/** PDF whitespace (ISO 32000-1, 7.2.2). */
function isWhitespace(byte: number | undefined): boolean {
  return (
    byte === 0x00 ||
    byte === 0x09 ||
    byte === 0x0a ||
    byte === 0x0c ||
    byte === 0x0d ||
    byte === 0x20
  );
}

function isDigit(byte: number | undefined): boolean {
  return byte !== undefined && byte >= 0x30 && byte <= 0x39;
}

function isWordByte(byte: number | undefined): boolean {
  return (
    byte !== undefined &&
    (isDigit(byte) ||
      (byte >= 0x41 && byte <= 0x5a) ||
      (byte >= 0x61 && byte <= 0x7a) ||
      byte === 0x5f)
  );
}

/**
 * About how many objects pdf-lib would build from `data`: indirect object
 * headers (`12 0 obj`: "obj" after whitespace, which "endobj" is not) plus,
 * for every `/ObjStm`, the count of the first `/N <digits>` entry starting
 * within 256 bytes before or after it. An estimate, good enough to refuse
 * files of millions of tiny objects before they cost gigabytes.
 *
 * Linear: each byte is visited a bounded number of times. `/ObjStm`
 * occurrences are met in ascending order and so are the windows they look in,
 * so the search for the next valid `/N` only ever moves forward.
 */
export function estimateObjectCount(data: Buffer): number {
  let count = 0;
  for (let at = data.indexOf(OBJ); at !== -1; at = data.indexOf(OBJ, at + OBJ.length)) {
    if (at > 0 && isWhitespace(data[at - 1])) count++;
  }

  // The first valid `/N` at or after the last window's start (null: none left; undefined: not searched yet).
  let searchedFrom = 0;
  let nextN: Count | null | undefined;
  for (let at = data.indexOf(OBJSTM); at !== -1; at = data.indexOf(OBJSTM, at + OBJSTM.length)) {
    const from = Math.max(0, at - WINDOW);
    const to = Math.min(data.length, at + WINDOW);
    if (nextN === undefined || (nextN !== null && nextN.at < from)) {
      nextN = findCount(data, Math.max(from, searchedFrom));
      searchedFrom = nextN ? nextN.at : data.length;
    }
    // The digits must end within the window too.
    if (nextN && nextN.at < to && nextN.end <= to) count += nextN.value;
  }
  return count;
}

interface Count {
  /** Where `/N` starts, and where its digits end. */
  at: number;
  end: number;
  value: number;
}

/** The first `/N` followed by whitespace and 1–9 digits (then no word byte) at or after `from`. */
function findCount(data: Buffer, from: number): Count | null {
  for (let at = data.indexOf(SLASH_N, from); at !== -1; at = data.indexOf(SLASH_N, at + 1)) {
    let i = at + SLASH_N.length;
    if (!isWhitespace(data[i])) continue;
    while (isWhitespace(data[i])) i++;
    const start = i;
    let value = 0;
    while (isDigit(data[i]) && i - start <= MAX_DIGITS) value = value * 10 + data[i++]! - 0x30;
    const digits = i - start;
    if (digits === 0 || digits > MAX_DIGITS || isWordByte(data[i])) continue;
    return { at, end: i, value };
  }
  return null;
}
