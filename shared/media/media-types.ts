/**
 * The media types the service accepts, decided from a file's first bytes
 * (magic numbers, via file-type), never from its name or declared mimetype.
 * The types themselves are the formats table's (formats.ts).
 */
import { fileTypeFromBuffer } from 'file-type';
import { formatOfMime, MEDIA_FORMATS, type MediaKind } from './formats';

export type { MediaKind };

export interface MediaType {
  mime: string;
  /** Extension used in keys. */
  ext: string;
  kind: MediaKind;
}

/** Every type the service knows; `ACCEPTED_TYPES` may narrow it. SVG is never accepted. */
export const KNOWN_TYPES: Readonly<Record<string, MediaType>> = Object.fromEntries(
  Object.values(MEDIA_FORMATS).map(({ mime, ext, kind }) => [mime, { mime, ext, kind }]),
);

/** How many leading bytes detection needs (file-type reads at most this many for our types). */
export const DETECTION_BYTES = 4100;

/** The first `min` bytes of a stream (fewer when it ends first), and whether it ended. */
export async function readHead(
  iterator: AsyncIterator<Buffer>,
  min: number,
): Promise<{ bytes: Buffer; done: boolean }> {
  const chunks: Buffer[] = [];
  let length = 0;
  while (length < min) {
    const next = await iterator.next();
    if (next.done) return { bytes: Buffer.concat(chunks, length), done: true };
    chunks.push(next.value);
    length += next.value.length;
  }
  return { bytes: Buffer.concat(chunks, length), done: false };
}

/** A stream's chunks again once its head was read (`readHead`): the head, then the rest. */
export async function* headThenRest(
  head: { bytes: Buffer; done: boolean },
  iterator: AsyncIterator<Buffer>,
): AsyncGenerator<Buffer> {
  yield head.bytes;
  if (head.done) return;
  for (;;) {
    const next = await iterator.next();
    if (next.done) return;
    yield next.value;
  }
}

/** The known type of these leading bytes, or undefined when they are no type we know. */
export async function detectType(head: Uint8Array): Promise<MediaType | undefined> {
  const found = await fileTypeFromBuffer(head);
  if (found) return KNOWN_TYPES[found.mime];
  // file-type follows a TIFF's directory offsets to tell TIFF from camera raw
  // formats built on it; when the first directory lies beyond the head it gives
  // up. A plain TIFF header is enough for us (raw formats are not accepted and
  // sharp decodes what it is given or reports it unreadable).
  if (startsWith(head, TIFF_LE) || startsWith(head, TIFF_BE)) return KNOWN_TYPES['image/tiff'];
  return undefined;
}

const TIFF_LE = [0x49, 0x49, 0x2a, 0x00];
const TIFF_BE = [0x4d, 0x4d, 0x00, 0x2a];
const startsWith = (data: Uint8Array, magic: number[]) => magic.every((b, i) => data[i] === b);

/** What a client may send in a `mimetype` field or data URL for a type (aliases included). */
export function normaliseMime(mime: string): string {
  return formatOfMime(mime)?.mime ?? mime.trim().toLowerCase();
}
