/**
 * The TIFF writer: an uncompressed in-memory TIFF around decoded pixels, with
 * their ICC profile, which is how decoded HEIC pixels reach sharp (heic.ts).
 * Only what that needs: 8-bit chunky RGB or RGBA, little-endian, in strips.
 */
import { Errors } from '@shared/errors';

/** Rows per strip of the in-memory TIFF: strips of about 1 MB keep libtiff's buffers small. */
const TIFF_STRIP_BYTES = 1024 * 1024;

/**
 * An uncompressed, little-endian, chunky RGB(A) TIFF with room for the pixels
 * at `pixelOffset`, and the ICC profile (tag 34675) when given. Exported for
 * tests.
 * @internal
 */
export function tiffContainer(
  width: number,
  height: number,
  channels: 3 | 4,
  icc: Buffer | undefined,
  premultiplied: boolean,
): { buffer: Buffer; pixelOffset: number } {
  const rowBytes = width * channels;
  const rowsPerStrip = Math.max(1, Math.min(height, Math.floor(TIFF_STRIP_BYTES / rowBytes)));
  const strips = Math.ceil(height / rowsPerStrip);
  const SHORT = 3;
  const LONG = 4;
  const UNDEFINED = 7;
  type Entry = [tag: number, type: number, count: number, value: number];

  // Layout: header, IFD, out-of-line values, pixels (each on an even offset).
  const entryCount = 11 + (channels === 4 ? 1 : 0) + (icc ? 1 : 0);
  const ifdOffset = 8;
  let cursor = ifdOffset + 2 + entryCount * 12 + 4;
  const reserve = (bytes: number) => {
    const at = cursor;
    cursor += bytes + (bytes % 2);
    return at;
  };
  const bitsOffset = reserve(channels * 2);
  const stripOffsetsOffset = strips > 1 ? reserve(strips * 4) : 0;
  const stripCountsOffset = strips > 1 ? reserve(strips * 4) : 0;
  const iccOffset = icc ? reserve(icc.length) : 0;
  const pixelOffset = cursor;
  const total = pixelOffset + rowBytes * height;
  if (total > 0xffff_ffff) {
    throw Errors.unreadable('The HEIC image is too large to convert');
  }

  const buffer = Buffer.allocUnsafe(total);
  buffer.fill(0, 0, pixelOffset);
  buffer.write('II', 0, 'latin1');
  buffer.writeUInt16LE(42, 2);
  buffer.writeUInt32LE(ifdOffset, 4);

  const entries: Entry[] = [
    [256, LONG, 1, width],
    [257, LONG, 1, height],
    [258, SHORT, channels, bitsOffset], // BitsPerSample: 8 per channel
    [259, SHORT, 1, 1], // Compression: none
    [262, SHORT, 1, 2], // PhotometricInterpretation: RGB
    [273, LONG, strips, strips > 1 ? stripOffsetsOffset : pixelOffset],
    [277, SHORT, 1, channels],
    [278, LONG, 1, rowsPerStrip],
    [279, LONG, strips, strips > 1 ? stripCountsOffset : rowBytes * height],
    [284, SHORT, 1, 1], // PlanarConfiguration: chunky
  ];
  if (channels === 4) entries.push([338, SHORT, 1, premultiplied ? 1 : 2]); // ExtraSamples: alpha
  entries.push([296, SHORT, 1, 1]); // ResolutionUnit: none (sharp reads no density)
  if (icc) entries.push([34675, UNDEFINED, icc.length, iccOffset]);
  entries.sort((a, b) => a[0] - b[0]);

  buffer.writeUInt16LE(entries.length, ifdOffset);
  entries.forEach(([tag, type, count, value], i) => {
    const at = ifdOffset + 2 + i * 12;
    buffer.writeUInt16LE(tag, at);
    buffer.writeUInt16LE(type, at + 2);
    buffer.writeUInt32LE(count, at + 4);
    if (type === SHORT && count === 1) buffer.writeUInt16LE(value, at + 8);
    else buffer.writeUInt32LE(value, at + 8);
  });
  buffer.writeUInt32LE(0, ifdOffset + 2 + entries.length * 12); // no next IFD

  for (let c = 0; c < channels; c++) buffer.writeUInt16LE(8, bitsOffset + c * 2);
  if (strips > 1) {
    for (let s = 0; s < strips; s++) {
      const rows = Math.min(rowsPerStrip, height - s * rowsPerStrip);
      buffer.writeUInt32LE(pixelOffset + s * rowsPerStrip * rowBytes, stripOffsetsOffset + s * 4);
      buffer.writeUInt32LE(rows * rowBytes, stripCountsOffset + s * 4);
    }
  }
  if (icc) icc.copy(buffer, iccOffset);
  return { buffer, pixelOffset };
}
