/** The convert formats (shared/media/formats.ts): the names a client may give. */
import { CONVERT_FORMAT_NAMES, CONVERT_FORMATS } from '../../shared/media/formats';

it('names every format, jpg beside jpeg, and nothing else', () => {
  expect(CONVERT_FORMATS).toEqual(['jpeg', 'png', 'webp', 'avif', 'tiff', 'gif']);
  expect(CONVERT_FORMAT_NAMES).toEqual(['jpeg', 'jpg', 'png', 'webp', 'avif', 'tiff', 'gif']);
});
