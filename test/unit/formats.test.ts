/**
 * The convert formats (shared/media/formats.ts): the names a client may give
 * and how they are read.
 */
import { CONVERT_FORMAT_NAMES, CONVERT_FORMATS, normaliseFormat } from '../../shared/media/formats';

describe('normaliseFormat', () => {
  it('accepts the six formats in any case, and jpg for jpeg', () => {
    expect(normaliseFormat('JPG')).toBe('jpeg');
    expect(normaliseFormat(' jpeg ')).toBe('jpeg');
    expect(normaliseFormat('WebP')).toBe('webp');
    for (const f of CONVERT_FORMATS) expect(normaliseFormat(f.toUpperCase())).toBe(f);
    for (const f of ['bmp', 'svg', 'heic', 'jpe', '', 'toString']) {
      expect(normaliseFormat(f)).toBeUndefined();
    }
  });

  it('names every format, jpg beside jpeg, and nothing else', () => {
    expect(CONVERT_FORMAT_NAMES).toEqual(['jpeg', 'jpg', 'png', 'webp', 'avif', 'tiff', 'gif']);
    for (const name of CONVERT_FORMAT_NAMES)
      expect(CONVERT_FORMATS).toContain(normaliseFormat(name));
  });
});
