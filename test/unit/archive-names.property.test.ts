/**
 * Archive entry names (api/domain/archive-names.ts), with fast-check: whatever
 * folder and file names hold, an entry path is relative, never climbs (`..`),
 * holds no control or Windows-reserved character, and is given once (without
 * case); plus the suffixes of duplicates, by example.
 */
import fc from 'fast-check';
import { EntryNames, folderSegments, UNNAMED } from '../../api/domain/archive-names';

const RUNS = { numRuns: 300 };
// eslint-disable-next-line no-control-regex -- what must never be in an entry
const FORBIDDEN = /[\u0000-\u001f\u007f-\u009f\\<>:"|?*]/;
/** Names built from the dangerous pieces as well as any text. */
const hostile = fc.oneof(
  fc.string(),
  fc
    .array(
      fc.constantFrom(
        '..',
        '.',
        '/',
        '\\',
        'a',
        'C:',
        '\u0000',
        '\u001b',
        ' ',
        '.jpg',
        'é',
        '\u202e',
      ),
      { maxLength: 8 },
    )
    .map((parts) => parts.join('')),
);

describe('archive entry names', () => {
  it('are relative, never climb, hold nothing unsafe, and are unique without case', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(hostile, hostile), { minLength: 1, maxLength: 20 }),
        (files) => {
          const names = new EntryNames();
          const seen = new Set<string>();
          for (const [folder, file] of files) {
            const path = names.next(folderSegments(folder), file);
            expect(path).not.toBe('');
            expect(path.startsWith('/')).toBe(false);
            expect(path).not.toMatch(FORBIDDEN);
            const segments = path.split('/');
            for (const s of segments) {
              expect(s).not.toBe('');
              expect(s).not.toBe('.');
              expect(s).not.toBe('..');
            }
            expect(seen.has(path.toLowerCase())).toBe(false);
            seen.add(path.toLowerCase());
          }
        },
      ),
      RUNS,
    );
  });

  it('suffixes duplicates before the extension, and makes unsafe names safe', () => {
    const names = new EntryNames();
    expect(names.next([], 'dup.jpg')).toBe('dup.jpg');
    expect(names.next([], 'dup.jpg')).toBe('dup (2).jpg');
    expect(names.next([], 'DUP.jpg')).toBe('DUP (3).jpg');
    expect(names.next(['a'], 'dup.jpg')).toBe('a/dup.jpg');
    expect(names.next([], 'README')).toBe('README');
    expect(names.next([], 'README')).toBe('README (2)');
    expect(names.next(folderSegments('../../etc'), 'passwd')).toBe('etc/passwd');
    expect(names.next(folderSegments('/abs//x/'), 'a\u0007b.pdf')).toBe('abs/x/a_b.pdf');
    expect(names.next([], 'http://host/bucket/merged_1.pdf')).toBe('merged_1.pdf');
    expect(names.next([], '..')).toBe(UNNAMED);
    expect(names.next([], 'what?<now>.png')).toBe('what__now_.png');
    expect(names.next([], 'C:\\evil.jpg')).toBe('C__evil.jpg');
  });
});
