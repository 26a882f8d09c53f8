/**
 * Entry names of an archive (POST /media/archive): made from record names
 * and folder names, which a client chose, so made safe to extract anywhere.
 * A folder name is split into segments at `/` (its hierarchy), a file name
 * keeps what follows its last `/` (`\`, a separator to Windows tools, becomes
 * `_` rather than a segment);
 * control characters and the characters Windows refuses in file names
 * (`<>:"|?*`) become `_`; spaces and dots are trimmed from both ends of a
 * segment (so `.` and `..` leave nothing), empty segments are dropped (a file
 * name that leaves nothing becomes `_`); a segment is cut to 200 characters. So no entry is absolute
 * or climbs out of the folder it is extracted to. The same path a second
 * time (compared without case, as macOS and Windows do) gets " (2)", " (3)"…
 * before its extension.
 */

/** Characters no segment keeps: C0/C1 controls, DEL, `\` and Windows's reserved ones. */
// eslint-disable-next-line no-control-regex -- control characters are what it removes
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\\<>:"|?*]/g;
const MAX_SEGMENT = 200;
/** The name of a file whose own name leaves nothing. */
export const UNNAMED = '_';

function segment(raw: string): string {
  return raw
    .normalize('NFC')
    .replace(UNSAFE, '_')
    .replace(/^[\s.]+|[\s.]+$/g, '')
    .slice(0, MAX_SEGMENT);
}

/** The safe segments of a folder path (`a/b`): none for an empty or a dots-only path. */
export function folderSegments(path: string): string[] {
  return path
    .split('/')
    .map(segment)
    .filter((s) => s !== '');
}

/**
 * A file name as one safe segment: the part after its last `/` (a merged
 * PDF's name is its object's address), or `_` when that leaves nothing.
 */
export function fileSegment(name: string): string {
  return segment(name.slice(name.lastIndexOf('/') + 1)) || UNNAMED;
}

/** Gives each entry path once: the second of a path (any case) is suffixed " (2)", and so on. */
export class EntryNames {
  private readonly taken = new Set<string>();

  /** The entry path for a file `name` in the folder `folders` (segments from folderSegments). */
  next(folders: readonly string[], name: string): string {
    const file = fileSegment(name);
    const dir = folders.length > 0 ? `${folders.join('/')}/` : '';
    const dot = file.lastIndexOf('.');
    const [base, ext] = dot > 0 ? [file.slice(0, dot), file.slice(dot)] : [file, ''];
    let path = `${dir}${file}`;
    for (let n = 2; this.taken.has(path.toLowerCase()); n++) path = `${dir}${base} (${n})${ext}`;
    this.taken.add(path.toLowerCase());
    return path;
  }
}
