/**
 * The merge's object estimate (worker/pdf/object-count.ts), rewritten as one
 * linear pass over the bytes: it gives what the former estimate (a string
 * copy and a regular expression per `/ObjStm`, kept here as the oracle) gave,
 * on crafted files and on random ones.
 */
import fc from 'fast-check';
import { estimateObjectCount } from '../../worker/pdf/object-count';

/**
 * The estimate as it was before: a string copy and a regular
 * expression per /ObjStm, so quadratic on files dense in /ObjStm. One deliberate
 * change: it cut its copy at the window's end, so a count whose digits crossed
 * that end was read as its first digits; now such a count is not counted (the
 * oracle reads a little past the window and drops it too).
 */
function formerEstimate(data: Buffer): number {
  const whitespace = new Set([0x00, 0x09, 0x0a, 0x0c, 0x0d, 0x20]);
  const obj = Buffer.from('obj', 'latin1');
  const objStm = Buffer.from('/ObjStm', 'latin1');
  let count = 0;
  for (let at = data.indexOf(obj); at !== -1; at = data.indexOf(obj, at + obj.length)) {
    if (at > 0 && whitespace.has(data[at - 1]!)) count++;
  }
  for (let at = data.indexOf(objStm); at !== -1; at = data.indexOf(objStm, at + objStm.length)) {
    const from = Math.max(0, at - 256);
    const window = Math.min(data.length, at + 256) - from;
    const around = data.toString('latin1', from, at + 256 + 64);
    const n = /\/N[\0\t\n\f\r ]+(\d{1,9})(?![0-9A-Za-z_])/.exec(around);
    if (n && n.index < window && n.index + n[0].length <= window) count += Number(n[1]);
  }
  return count;
}

const latin1 = (s: string) => Buffer.from(s, 'latin1');

describe('estimateObjectCount', () => {
  it.each([
    ['no objects', '%PDF-1.7\n%%EOF', 0],
    ['object headers, not endobj', '1 0 obj\n<<>>\nendobj\n2 0 obj\n<<>>\nendobj', 2],
    ['"obj" at the very start does not count', 'obj 1 0 obj', 1],
    ['an object stream with /N after /ObjStm', '1 0 obj\n<< /Type /ObjStm /N 120 /First 9 >>', 121],
    ['an object stream with /N before /ObjStm', '1 0 obj\n<< /N 7 /First 9 /Type /ObjStm >>', 8],
    ['/Name and /N1 are not /N', '<< /Name 5 /N1 6 /Type /ObjStm /N\r\n 3 >>', 3],
    ['a count of ten digits is not counted', '<< /Type /ObjStm /N 1234567890 >>', 0],
    ['a count followed by a letter is not counted', '<< /Type /ObjStm /N 12a /N 4 >>', 4],
    ['an /N too far away is not counted', `<< /Type /ObjStm ${' '.repeat(300)}/N 9 >>`, 0],
    ['two object streams near one /N both count it', '/ObjStm /N 5 /ObjStm', 10],
  ])('%s', (_name, text, expected) => {
    expect(estimateObjectCount(latin1(text))).toBe(expected);
    expect(formerEstimate(latin1(text))).toBe(expected);
  });

  it('counts a file dense in /ObjStm (the slow case) as before', () => {
    const dense = latin1(`${'/ObjStm'.repeat(100_000)} /N 3 ${'/ObjStm /N 2 '.repeat(10_000)}`);
    expect(estimateObjectCount(dense)).toBe(formerEstimate(dense));
  });

  it('agrees with the former estimate on random files', () => {
    const tokens = [
      '/ObjStm',
      '/N',
      ' ',
      '\n',
      '0',
      '7',
      '42',
      '1234567890',
      'obj',
      'end',
      '/Name',
      'x',
      ' '.repeat(200),
    ];
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...tokens), { maxLength: 300 }), (parts) => {
        const data = latin1(parts.join(''));
        expect(estimateObjectCount(data)).toBe(formerEstimate(data));
      }),
      { numRuns: 500 },
    );
  });
});
