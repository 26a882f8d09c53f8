/**
 * The image adapter against the real sample files (test/fixtures/corpus/images):
 * metadata is sharp's own, conversions decode and are oriented, damaged and
 * oversized inputs are refused with the right error, HEIC decodes.
 *
 * To stay well under a minute on two cores, not every pair is converted:
 * the two large JPEGs (8 and 12 MP) go to jpeg, png, webp and tiff, plus AVIF
 * for the 12 MP one (its speed is the point); GIF, which takes 8-12 s at that
 * size, is covered by the 3 MP photo. The 8.5 MP HEIC goes to jpeg, png and
 * webp (tiff in the orientation and colour tests), the small HEIF to every
 * format, and every other image to every format.
 */
import { CORPUS } from '../support/files';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { crc32, deflateSync } from 'node:zlib';
import sharp, { type Metadata } from 'sharp';
import { CONVERT_FORMATS, type ConvertFormat } from '../../shared/media/formats';
import { decodeHeicPixels, isobmffTruncated } from '../../worker/image/heic';
import {
  FORMAT_EXT,
  FORMAT_MIME,
  ImageAdapter,
  configureSharp,
} from '../../worker/image/image.adapter';

const corpus = CORPUS;
const imagesDir = join(corpus, 'images');
const read = (name: string) => readFileSync(join(imagesDir, name));
const allImages = readdirSync(imagesDir).sort();
const readable = allImages.filter((name) => name !== 'corrupted.jpg');
const HEIC = ['heic-IMG_5195.HEIC', 'heic-samplefilehub.heif'];
const LARGE = ['hdr-iphone_hdr_YES.jpg', 'tests-42_IndexError.jpg'];

const adapter = new ImageAdapter({ maxInputPixels: 100_000_000 });

/** sharp's own reading of the same bytes (the limit off: metadata reads headers only). */
const sharpMetadata = (bytes: Buffer) => sharp(bytes, { limitInputPixels: false }).metadata();

/** Dimensions a viewer shows: swapped for EXIF orientations 5-8. */
const oriented = (m: Metadata) =>
  (m.orientation ?? 1) >= 5
    ? { width: m.height, height: m.width }
    : { width: m.width, height: m.height };

/** A PNG whose header declares width × height, with a few rows of real (zero) data. */
function pngDeclaring(width: number, height: number): Buffer {
  const chunk = (type: string, data: Buffer) => {
    const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    body.copy(out, 4);
    out.writeUInt32BE(crc32(body) >>> 0, 8 + data.length);
    return out;
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // truecolour RGB
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IDAT', deflateSync(Buffer.alloc(4 * (1 + width * 3)))),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

/** Where a HEIC box's payload starts; asserts the box is there. */
function boxPayload(bytes: Buffer, type: string, nth = 0): number {
  let at = -1;
  for (let i = 0; i <= nth; i++) {
    at = bytes.indexOf(type, at + 1, 'latin1');
    expect(at).toBeGreaterThan(0);
  }
  return at + 4;
}

/**
 * The outcome of `work` and the CPU time it took (all of the process's
 * threads, milliseconds): a bound on the work done, which unlike wall time
 * does not grow when other processes load the machine.
 */
const timed = async <T>(work: () => Promise<T>) => {
  const start = process.cpuUsage();
  const result = await work().then(
    (value) => ({ value, error: undefined }),
    (error: unknown) => ({ value: undefined, error }),
  );
  const used = process.cpuUsage(start);
  return { ...result, ms: (used.user + used.system) / 1000 };
};

const rawPixels = async (data: Buffer) => sharp(data).raw().toBuffer({ resolveWithObject: true });

const meanAbsDiff = (a: Buffer, b: Buffer) => {
  expect(a.length).toBe(b.length);
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += Math.abs(a[i]! - b[i]!);
  return sum / a.length;
};

beforeAll(() => configureSharp());
afterAll(() => adapter.close());

describe('HEIC decoder loading', () => {
  // First in the file on purpose: nothing before it may have decoded a HEIC.
  it('is not loaded for metadata or for a HEIC refused from its header', async () => {
    await adapter.readMetadata(read('heic-IMG_5195.HEIC'));
    const small = new ImageAdapter({ maxInputPixels: 1_000_000 });
    await expect(small.convert(read('heic-IMG_5195.HEIC'), 'jpeg')).rejects.toMatchObject({
      status: 422,
    });
    expect([adapter.heicThreads, small.heicThreads]).toEqual([0, 0]);
    await small.close();
    await adapter.convert(read('heic-samplefilehub.heif'), 'jpeg');
    expect(adapter.heicThreads).toBe(1);
  });
});

describe('readMetadata', () => {
  it.each(allImages)('%s: equals sharp’s own metadata, every field', async (name) => {
    const bytes = read(name);
    const ours: Record<string, unknown> = await adapter.readMetadata(bytes);
    const theirs: Record<string, unknown> = { ...(await sharpMetadata(bytes)) };
    // Every field sharp reports, with its value; `size` is the input's byte count.
    expect(Object.keys(ours).sort()).toEqual(
      Object.keys(theirs)
        .filter((k) => theirs[k] !== undefined)
        .concat(theirs.size === undefined ? ['size'] : [])
        .sort(),
    );
    for (const [field, expected] of Object.entries(theirs)) {
      if (expected === undefined) continue;
      if (Buffer.isBuffer(expected)) {
        const actual = ours[field];
        expect(Buffer.isBuffer(actual)).toBe(true);
        expect((actual as Buffer).equals(expected)).toBe(true);
      } else if (field !== 'size') {
        expect({ field, value: ours[field] }).toEqual({ field, value: expected });
      }
    }
    expect(ours.size).toBe(bytes.length);
    expect(theirs.size).toBe(bytes.length);
  });

  it('reports EXIF, profiles and XMP as the corpus README says', async () => {
    const canon = await adapter.readMetadata(read('Canon_40D.jpg'));
    expect(canon).toMatchObject({ format: 'jpeg', width: 100, height: 68, hasProfile: true });
    expect(canon.exif?.length).toBeGreaterThan(0);
    expect(canon.icc?.length).toBeGreaterThan(0);
    expect((await adapter.readMetadata(read('gps-DSCN0010.jpg'))).exif).toBeInstanceOf(Buffer);
    expect(await adapter.readMetadata(read('exif-org-olympus-d320l.jpg'))).not.toHaveProperty(
      'exif',
    );
    const xmp = await adapter.readMetadata(read('xmp-BlueSquare.jpg'));
    expect(xmp.xmp?.toString('utf8')).toContain('<x:xmpmeta');
    expect(xmp.iptc).toBeInstanceOf(Buffer);
  });

  it('reports orientation with the dimensions as stored', async () => {
    expect(await adapter.readMetadata(read('orientation-landscape_6.jpg'))).toMatchObject({
      orientation: 6,
      width: 450,
      height: 600,
    });
    expect(await adapter.readMetadata(read('orientation-portrait_8.jpg'))).toMatchObject({
      orientation: 8,
      width: 600,
      height: 450,
    });
  });

  it('reads the header of HEIC files and of the truncated JPEG', async () => {
    expect(await adapter.readMetadata(read('heic-IMG_5195.HEIC'))).toMatchObject({
      format: 'heif',
      width: 2566,
      height: 3313,
      hasProfile: true,
    });
    expect(await adapter.readMetadata(read('corrupted.jpg'))).toMatchObject({
      format: 'jpeg',
      width: 3648,
      height: 2736,
    });
  });

  it('serialises buffers in the documented { type: "Buffer", data } form', async () => {
    const meta = await adapter.readMetadata(read('Canon_40D.jpg'));
    const json = JSON.parse(JSON.stringify(meta)) as { exif: { type: string; data: number[] } };
    expect(json.exif.type).toBe('Buffer');
    expect(Buffer.from(json.exif.data).equals(meta.exif!)).toBe(true);
  });

  it('answers a 50,000 × 50,000 PNG quickly from its header (no pixels decoded)', async () => {
    const { value, error, ms } = await timed(() =>
      adapter.readMetadata(pngDeclaring(50_000, 50_000)),
    );
    expect(error).toBeUndefined();
    expect(value).toMatchObject({ format: 'png', width: 50_000, height: 50_000 });
    expect(ms).toBeLessThan(2_000);
  });

  it('refuses what is not an accepted image with 415', async () => {
    const pdf = readFileSync(join(corpus, 'pdfs', 'minimal-document.pdf'));
    const svg = Buffer.from(
      '<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><rect width="8" height="8"/></svg>',
    );
    for (const bytes of [pdf, svg, Buffer.from('just some text'), Buffer.alloc(0)]) {
      await expect(adapter.readMetadata(bytes)).rejects.toMatchObject({
        status: 415,
        code: 'UNSUPPORTED_MEDIA_TYPE',
      });
    }
  });
});

describe('convert', () => {
  // HEIC files have their own block below.
  const cases: [string, ConvertFormat][] = [];
  for (const name of readable.filter((n) => !HEIC.includes(n))) {
    for (const format of CONVERT_FORMATS) {
      const large = LARGE.includes(name);
      if (large && (format === 'gif' || format === 'avif')) continue;
      cases.push([name, format]);
    }
  }
  cases.push(['tests-42_IndexError.jpg', 'avif']);

  it.each(cases)(
    '%s → %s: decodes, has the target format and the oriented dimensions',
    async (name, format) => {
      const bytes = read(name);
      const source = await sharpMetadata(bytes);
      const result = await adapter.convert(bytes, format);
      const out = await sharpMetadata(result.data);
      expect(out.mediaType).toBe(FORMAT_MIME[format]);
      expect(result).toMatchObject({ mime: FORMAT_MIME[format], ext: FORMAT_EXT[format] });
      expect({ width: out.width, height: out.height }).toEqual(oriented(source));
      expect(result.info).toEqual({
        format,
        width: out.width,
        height: out.height,
        size: result.data.length,
      });
      const decoded = await rawPixels(result.data);
      expect(decoded.info).toMatchObject(oriented(source));
    },
    30_000,
  );

  it('swaps the dimensions of EXIF-rotated photos and rotates their pixels', async () => {
    for (const [name, width, height] of [
      ['orientation-landscape_6.jpg', 600, 450],
      ['orientation-portrait_8.jpg', 450, 600],
    ] as const) {
      const bytes = read(name);
      const result = await adapter.convert(bytes, 'png');
      expect(result.info).toMatchObject({ width, height });
      const ours = await rawPixels(result.data);
      const expected = await sharp(bytes).rotate().raw().toBuffer();
      expect(ours.data.equals(expected)).toBe(true);
    }
  });

  it('refuses the truncated corrupted.jpg with 422 UNREADABLE_MEDIA', async () => {
    for (const format of ['jpeg', 'png'] as const) {
      const { error, ms } = await timed(() => adapter.convert(read('corrupted.jpg'), format));
      expect(error).toMatchObject({ status: 422, code: 'UNREADABLE_MEDIA' });
      expect((error as Error).message).toMatch(/corrupt or truncated/);
      expect(ms).toBeLessThan(5_000);
    }
  });

  it('refuses a JPEG cut in half, and a TIFF whose directory is cut off, with 422', async () => {
    const jpeg = read('gps-DSCN0010.jpg');
    await expect(adapter.convert(jpeg.subarray(0, jpeg.length / 2), 'png')).rejects.toMatchObject({
      status: 422,
      code: 'UNREADABLE_MEDIA',
    });
    const tiff = read('tiff-BSG1.tiff');
    await expect(adapter.convert(tiff.subarray(0, tiff.length / 2), 'png')).rejects.toMatchObject({
      status: 422,
      code: 'UNREADABLE_MEDIA',
      message: expect.stringMatching(/TIFF/) as unknown,
    });
  });

  it('converts a JPEG with stray bytes before a marker (a decoder warning, not an error)', async () => {
    const jpeg = read('gps-DSCN0010.jpg');
    // Walk the marker segments to the first quantisation table (DQT, 0xFFDB).
    let dqt = 2;
    while (jpeg[dqt + 1] !== 0xdb) dqt += 2 + jpeg.readUInt16BE(dqt + 2);
    const odd = Buffer.concat([jpeg.subarray(0, dqt), Buffer.from([0, 0, 0]), jpeg.subarray(dqt)]);
    await expect(sharp(odd, { failOn: 'warning' }).png().toBuffer()).rejects.toThrow(/extraneous/);
    await expect(adapter.convert(odd, 'png')).resolves.toMatchObject({
      info: { width: 640, height: 480 },
    });
  });

  it('refuses a 50,000 × 50,000 PNG quickly, before decoding', async () => {
    const { error, ms } = await timed(() => adapter.convert(pngDeclaring(50_000, 50_000), 'jpeg'));
    expect(error).toMatchObject({
      status: 422,
      code: 'UNREADABLE_MEDIA',
      details: [{ width: 50_000, height: 50_000, limit: 100_000_000 }],
    });
    expect((error as Error).message).toMatch(/too many pixels/);
    expect(ms).toBeLessThan(2_000);
  });

  it('applies the configured pixel limit', async () => {
    const small = new ImageAdapter({ maxInputPixels: 1_000_000 });
    await expect(small.convert(read('Reconyx_HC500_Hyperfire.jpg'), 'png')).rejects.toMatchObject({
      status: 422,
      details: [{ width: 2048, height: 1536, limit: 1_000_000 }],
    });
    await expect(small.convert(read('gps-DSCN0010.jpg'), 'png')).resolves.toBeDefined();
    await small.close();
  });

  it('refuses non-images with 415', async () => {
    const pdf = readFileSync(join(corpus, 'pdfs', 'minimal-document.pdf'));
    await expect(adapter.convert(pdf, 'jpeg')).rejects.toMatchObject({
      status: 415,
      code: 'UNSUPPORTED_MEDIA_TYPE',
      message: expect.stringMatching(/PDF/) as unknown,
    });
    await expect(adapter.convert(Buffer.from('hello'), 'png')).rejects.toMatchObject({
      status: 415,
    });
  });

  it('validates quality and format', async () => {
    const bytes = read('Canon_40D.jpg');
    for (const quality of [0, 101, 1.5, Number.NaN]) {
      await expect(adapter.convert(bytes, 'jpeg', { quality })).rejects.toMatchObject({
        status: 400,
        code: 'VALIDATION_FAILED',
        details: [{ field: 'quality' }],
      });
    }
    await expect(adapter.convert(bytes, 'bmp' as ConvertFormat)).rejects.toMatchObject({
      status: 400,
      details: [{ field: 'format' }],
    });
  });

  it('uses quality for lossy formats and ignores it for lossless ones', async () => {
    const bytes = read('gps-DSCN0010.jpg');
    for (const format of ['jpeg', 'webp', 'avif'] as const) {
      const low = await adapter.convert(bytes, format, { quality: 10 });
      const high = await adapter.convert(bytes, format, { quality: 95 });
      expect(low.data.length).toBeLessThan(high.data.length);
    }
    for (const format of ['png', 'tiff', 'gif'] as const) {
      const plain = await adapter.convert(bytes, format);
      const withQuality = await adapter.convert(bytes, format, { quality: 10 });
      expect(withQuality.data.equals(plain.data)).toBe(true);
    }
    // png and tiff are lossless: the same pixels as the decoded source.
    const source = await sharp(bytes).raw().toBuffer();
    for (const format of ['png', 'tiff'] as const) {
      const { data } = await rawPixels((await adapter.convert(bytes, format)).data);
      expect(data.equals(source)).toBe(true);
    }
  });

  it('flattens transparency onto white for JPEG', async () => {
    const transparent = await sharp({
      create: { width: 4, height: 4, channels: 4, background: { r: 0, g: 0, b: 0, alpha: 0 } },
    })
      .png()
      .toBuffer();
    const { data } = await rawPixels((await adapter.convert(transparent, 'jpeg')).data);
    expect(Math.min(...data)).toBeGreaterThan(250);
  });
});

describe('HEIC', () => {
  const cases: [string, ConvertFormat][] = [
    ...CONVERT_FORMATS.map((f): [string, ConvertFormat] => ['heic-samplefilehub.heif', f]),
    ...(['jpeg', 'png', 'webp'] as const).map((f): [string, ConvertFormat] => [
      'heic-IMG_5195.HEIC',
      f,
    ]),
  ];
  it.each(cases)(
    '%s → %s has the dimensions sharp reads from the header',
    async (name, format) => {
      const bytes = read(name);
      const header = await sharpMetadata(bytes);
      expect(header).toMatchObject({ format: 'heif', compression: 'hevc' });
      const result = await adapter.convert(bytes, format);
      expect(result.mime).toBe(FORMAT_MIME[format]);
      const out = await rawPixels(result.data);
      expect(out.info).toMatchObject({ width: header.width, height: header.height });
      expect(out.info.width * out.info.height).toBeGreaterThan(250_000);
      // A real photo, not a blank: the pixels vary.
      const stats = await sharp(result.data).stats();
      expect(stats.channels[0]!.stdev).toBeGreaterThan(10);
    },
    30_000,
  );

  it('applies an irot transform once: output rotated 90° anticlockwise', async () => {
    const bytes = read('heic-IMG_5195.HEIC');
    const rotated = Buffer.from(bytes);
    const angle = boxPayload(rotated, 'irot');
    expect(rotated[angle]).toBe(0);
    rotated[angle] = 1; // 90° anticlockwise
    expect(await adapter.readMetadata(rotated)).toMatchObject({ width: 3313, height: 2566 });
    const upright = await rawPixels((await adapter.convert(bytes, 'tiff')).data);
    const turned = await rawPixels((await adapter.convert(rotated, 'tiff')).data);
    expect(turned.info).toMatchObject({ width: 3313, height: 2566 });
    const { width, height, channels } = upright.info;
    const expected = await sharp(upright.data, { raw: { width, height, channels } })
      .rotate(-90)
      .raw()
      .toBuffer();
    expect(turned.data.equals(expected)).toBe(true);
  }, 30_000);

  it('honours the embedded ICC profile (Display P3 → sRGB); a file without one is unchanged', async () => {
    for (const [name, profiled] of [
      ['heic-IMG_5195.HEIC', true],
      ['heic-samplefilehub.heif', false],
    ] as const) {
      const bytes = read(name);
      // The decoder's pixels as they are, i.e. what bare raw input to sharp would give.
      const naive = decodeHeicPixels(bytes).data;
      const ours = await rawPixels((await adapter.convert(bytes, 'tiff')).data);
      const diff = meanAbsDiff(ours.data, naive);
      if (profiled) expect(diff).toBeGreaterThan(1);
      else expect(diff).toBe(0);
    }
    // Two 8.5 MP decodes and converts: about 12 s alone, past 30 s beside other CPU-heavy files.
  }, 90_000);

  it('refuses a HEIC declaring 50,000 × 50,000 pixels quickly, from its header', async () => {
    const bytes = Buffer.from(read('heic-IMG_5195.HEIC'));
    const ispe = boxPayload(bytes, 'ispe', 1) + 4; // the grid's (tiles come first)
    expect([bytes.readUInt32BE(ispe), bytes.readUInt32BE(ispe + 4)]).toEqual([2566, 3313]);
    bytes.writeUInt32BE(50_000, ispe);
    bytes.writeUInt32BE(50_000, ispe + 4);
    const { error, ms } = await timed(() => adapter.convert(bytes, 'jpeg'));
    expect(error).toMatchObject({
      status: 422,
      details: [{ width: 50_000, height: 50_000 }],
    });
    expect(ms).toBeLessThan(2_000);
  });

  it('refuses a truncated HEIC with 422 (its header still reads)', async () => {
    const bytes = read('heic-samplefilehub.heif');
    const cut = bytes.subarray(0, Math.floor(bytes.length * 0.7));
    expect(isobmffTruncated(bytes)).toBe(false);
    expect(isobmffTruncated(cut)).toBe(true);
    await expect(adapter.readMetadata(cut)).resolves.toMatchObject({ width: 640, height: 426 });
    await expect(adapter.convert(cut, 'jpeg')).rejects.toMatchObject({
      status: 422,
      code: 'UNREADABLE_MEDIA',
      message: expect.stringMatching(/truncated/) as unknown,
    });
  });
});
