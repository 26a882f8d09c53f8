/**
 * The few EXIF fields the preview shows (camera, date, GPS), read from the raw
 * EXIF block GET /media/metadata answers (a TIFF structure: "Exif\0\0", then
 * a header, IFD0, its Exif and GPS sub-IFDs). Hand-written on purpose: the
 * libraries that read EXIF parse files, and the console only needs these tags
 * from a block the API already cut out (a few dozen lines, no dependency).
 */
export interface ExifSummary {
  make?: string;
  model?: string;
  taken?: string;
  gps?: { latitude: number; longitude: number; altitude?: number };
}

export function readExif(bytes: Uint8Array): ExifSummary {
  let start = 0;
  if (String.fromCharCode(...bytes.subarray(0, 4)) === 'Exif') start = 6;
  const view = new DataView(bytes.buffer, bytes.byteOffset + start, bytes.byteLength - start);
  if (view.byteLength < 8) return {};
  const little = view.getUint16(0) === 0x4949;
  const u16 = (o: number) => view.getUint16(o, little);
  const u32 = (o: number) => view.getUint32(o, little);
  const ifd = (offset: number) => {
    const tags = new Map<number, { type: number; count: number; at: number }>();
    if (offset + 2 > view.byteLength) return tags;
    const n = u16(offset);
    for (let i = 0; i < n; i++) {
      const e = offset + 2 + i * 12;
      if (e + 12 > view.byteLength) break;
      const type = u16(e + 2);
      const count = u32(e + 4);
      const size =
        ({ 1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 7: 1, 9: 4, 10: 8 } as Record<number, number>)[type] ?? 1;
      tags.set(u16(e), { type, count, at: size * count > 4 ? u32(e + 8) : e + 8 });
    }
    return tags;
  };
  const text = (t?: { count: number; at: number }) => {
    if (!t || t.at + t.count > view.byteLength) return undefined;
    let s = '';
    for (let i = 0; i < t.count; i++) {
      const c = view.getUint8(t.at + i);
      if (c === 0) break;
      s += String.fromCharCode(c);
    }
    return s.trim() || undefined;
  };
  const rationals = (t?: { count: number; at: number }) => {
    if (!t || t.at + t.count * 8 > view.byteLength) return undefined;
    return Array.from(
      { length: t.count },
      (_, i) => u32(t.at + i * 8) / (u32(t.at + i * 8 + 4) || 1),
    );
  };
  const ifd0 = ifd(u32(4));
  const out: ExifSummary = { make: text(ifd0.get(0x010f)), model: text(ifd0.get(0x0110)) };
  const exifAt = ifd0.get(0x8769);
  if (exifAt) out.taken = text(ifd(u32(exifAt.at)).get(0x9003));
  const gpsAt = ifd0.get(0x8825);
  if (gpsAt) {
    const gps = ifd(u32(gpsAt.at));
    const deg = (v?: number[]) =>
      v ? (v[0] ?? 0) + (v[1] ?? 0) / 60 + (v[2] ?? 0) / 3600 : undefined;
    const lat = deg(rationals(gps.get(2)));
    const lon = deg(rationals(gps.get(4)));
    if (lat !== undefined && lon !== undefined) {
      const alt = rationals(gps.get(6))?.[0];
      out.gps = {
        latitude: text(gps.get(1)) === 'S' ? -lat : lat,
        longitude: text(gps.get(3)) === 'W' ? -lon : lon,
        ...(alt === undefined ? {} : { altitude: alt }),
      };
    }
  }
  return out;
}
