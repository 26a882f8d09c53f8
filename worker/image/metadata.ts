/**
 * Metadata: sharp's own `metadata()` of the bytes, every field it reports.
 * It reads headers only, so it is answered whatever the pixel count:
 * reporting the dimensions of an image too large to convert is cheap and
 * tells the client why a conversion is refused. The ICC profile is included
 * as `icc` when present, like `exif`/`iptc`/`xmp`: it is a raw block the image
 * carries, `hasProfile` alone does not say which profile (sRGB or Display P3),
 * and its size is bounded by the file's.
 */
import type { Metadata } from 'sharp';
import { readHeader } from './sharp';

/**
 * What `GET /media/metadata` returns: everything sharp's `metadata()` reports,
 * with sharp's values, and `size` the input's byte count. Buffers (`exif`,
 * `iptc`, `xmp`, `icc`, `tifftagPhotoshop`) stay Buffers here; their JSON form
 * is the interface's `{ "type": "Buffer", "data": [...] }`. `width` and
 * `height` are as stored: an `orientation` of 5-8 means a viewer shows them
 * swapped. A type alias, not an interface, so it is a `Record<string, unknown>`.
 */
export type ImageMetadata = Omit<Metadata, 'size'> & {
  /** Bytes of the input. */
  size: number;
};

/** What sharp reads from the image's header (no pixels are decoded). */
export async function readMetadata(input: Buffer, maxInputPixels: number): Promise<ImageMetadata> {
  const meta = await readHeader(input, maxInputPixels);
  return { ...meta, size: input.length };
}
