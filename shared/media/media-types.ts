/**
 * The media types the service accepts, decided from a file's first bytes
 * (magic numbers, via file-type), never from its name or declared mimetype.
 */
import { fileTypeFromBuffer } from 'file-type';

export type MediaKind = 'image' | 'pdf';

export interface MediaType {
  mime: string;
  /** Extension used in keys. */
  ext: string;
  kind: MediaKind;
}

/** Every type the service knows; `ACCEPTED_TYPES` may narrow it. SVG is never accepted. */
export const KNOWN_TYPES: Readonly<Record<string, MediaType>> = {
  'image/jpeg': { mime: 'image/jpeg', ext: 'jpg', kind: 'image' },
  'image/png': { mime: 'image/png', ext: 'png', kind: 'image' },
  'image/webp': { mime: 'image/webp', ext: 'webp', kind: 'image' },
  'image/gif': { mime: 'image/gif', ext: 'gif', kind: 'image' },
  'image/avif': { mime: 'image/avif', ext: 'avif', kind: 'image' },
  'image/tiff': { mime: 'image/tiff', ext: 'tiff', kind: 'image' },
  'image/heic': { mime: 'image/heic', ext: 'heic', kind: 'image' },
  'image/heif': { mime: 'image/heif', ext: 'heif', kind: 'image' },
  'application/pdf': { mime: 'application/pdf', ext: 'pdf', kind: 'pdf' },
};

/** How many leading bytes detection needs (file-type reads at most this many for our types). */
export const DETECTION_BYTES = 4100;

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
  const m = mime.trim().toLowerCase();
  if (m === 'image/jpg' || m === 'image/pjpeg') return 'image/jpeg';
  if (m === 'image/heic-sequence') return 'image/heic';
  if (m === 'image/heif-sequence') return 'image/heif';
  if (m === 'application/x-pdf') return 'application/pdf';
  return m;
}
