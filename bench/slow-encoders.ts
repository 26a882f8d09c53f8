/**
 * How long each output format takes to encode, by image size and encoder
 * effort: the figures behind the slow-encoder bounds (docs/renders.md,
 * "Slow encoders"). In this process, with sharp tuned as the worker tunes it
 * (no cache, one libvips thread), one encode at a time:
 *
 *   npx tsx bench/slow-encoders.ts [--sizes 1,4,12,16] [--photos 0.25,1,4,12.2]
 *                                  [--rounds 3] [--only gif,avif]
 *   npx tsx bench/slow-encoders.ts --sizes 4 --photos '' --rounds 1 --sequence gif,avif,gif,gif
 *     (encodes of one input one after another, as a worker taking mixed jobs does)
 *
 * Each case decodes a JPEG and encodes it, as a conversion or a render at the
 * source's size does: noise of 1, 4, 12 and 16 MP (gaussian, sigma 40: the
 * worst case for AV1), and the 12 MP corpus photo (tests-42_IndexError.jpg,
 * 4032 × 3024) as it is and scaled down (the worst case for GIF dithering).
 * "service" rows are the worker's own settings at the input's size.
 * Wall time and the process's CPU time (every thread) per case, the least of
 * `--rounds` runs (other work on the machine only ever adds to both); a markdown table on stdout, JSON in bench/out/.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import sharp, { type Sharp } from 'sharp';
import type { ConvertFormat } from '../shared/media/formats';
import { ENCODERS } from '../worker/image/encoders';
import { configureSharp } from '../worker/image/sharp';

interface Case {
  format: ConvertFormat;
  /** What the row stands for: the service's setting for the input's size, sharp's default, or another. */
  label: string;
  encode: (image: Sharp, pixels: number) => Sharp;
  /** Skipped on larger inputs (a case known to take tens of seconds there). */
  maxMegapixels?: number;
}

/** The service's own settings for `format` at the input's size (worker/image/encoders.ts). */
const service = (format: ConvertFormat): Case => ({
  format,
  label: 'service',
  encode: (image, pixels) => ENCODERS[format](image, undefined, pixels),
});

const CASES: Case[] = [
  service('jpeg'),
  service('png'),
  service('tiff'),
  service('webp'),
  { format: 'webp', label: 'effort 4 (default)', encode: (i) => i.webp({ effort: 4 }) },
  { format: 'webp', label: 'effort 0', encode: (i) => i.webp({ effort: 0 }) },
  service('avif'),
  {
    format: 'avif',
    label: 'effort 4, 4:4:4 (default)',
    encode: (i) => i.avif({ quality: 50, effort: 4 }),
    maxMegapixels: 1,
  },
  {
    format: 'avif',
    label: 'effort 2, 4:2:0 (before)',
    encode: (i) => i.avif({ quality: 50, effort: 2, chromaSubsampling: '4:2:0' }),
  },
  {
    format: 'avif',
    label: 'effort 0, 4:2:0',
    encode: (i) => i.avif({ quality: 50, effort: 0, chromaSubsampling: '4:2:0' }),
  },
  service('gif'),
  {
    format: 'gif',
    label: 'effort 7, dither 1 (default, before)',
    encode: (i) => i.gif(),
    maxMegapixels: 12.2,
  },
  { format: 'gif', label: 'effort 1, dither 1', encode: (i) => i.gif({ effort: 1 }) },
  { format: 'gif', label: 'effort 1, dither 0', encode: (i) => i.gif({ effort: 1, dither: 0 }) },
];

/** Width × height of the noisy inputs, 4:3, by megapixels. */
const SIDES: Record<number, [number, number]> = {
  1: [1154, 866],
  4: [2309, 1732],
  12: [4000, 3000],
  16: [4619, 3464],
};

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '1,4,12,16' },
    photos: { type: 'string', default: '0.25,1,4,12.2' },
    rounds: { type: 'string', default: '3' },
    only: { type: 'string' },
    sequence: { type: 'string' },
  },
});
const sizes = values.sizes.split(',').filter(Boolean).map(Number);
const photoSizes = values.photos.split(',').filter(Boolean).map(Number);
const rounds = Number(values.rounds);
const only = values.only?.split(',');
/** Formats to encode one after another (the service's settings), each one's CPU time printed. */
const sequence = values.sequence?.split(',') as ConvertFormat[] | undefined;

async function noisyJpeg(width: number, height: number): Promise<Buffer> {
  return sharp({
    create: {
      width,
      height,
      channels: 3,
      background: '#808080',
      noise: { type: 'gaussian', mean: 128, sigma: 40 },
    },
  })
    .jpeg({ quality: 90 })
    .toBuffer();
}

interface Row {
  input: string;
  megapixels: number;
  format: string;
  label: string;
  wallMs: number;
  cpuMs: number;
  bytes: number;
}

const least = (xs: number[]) => Math.min(...xs);

async function measure(
  input: Buffer,
  c: Case,
  pixels: number,
): Promise<{ wallMs: number; cpuMs: number; bytes: number }> {
  const walls: number[] = [];
  const cpus: number[] = [];
  let bytes = 0;
  for (let r = 0; r < rounds; r++) {
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const out = await c
      .encode(
        sharp(input, { sequentialRead: true, autoOrient: true, limitInputPixels: false }),
        pixels,
      )
      .toBuffer();
    walls.push(performance.now() - t0);
    const cpu = process.cpuUsage(cpu0);
    cpus.push((cpu.user + cpu.system) / 1000);
    bytes = out.length;
  }
  return { wallMs: least(walls), cpuMs: least(cpus), bytes };
}

async function main() {
  configureSharp();
  const inputs: { name: string; megapixels: number; pixels: number; data: Buffer }[] = [];
  for (const mp of sizes) {
    const side = SIDES[mp];
    if (!side) throw new Error(`no input of ${mp} MP (known: ${Object.keys(SIDES).join(', ')})`);
    inputs.push({
      name: `noise ${side[0]}×${side[1]}`,
      megapixels: mp,
      pixels: side[0] * side[1],
      data: await noisyJpeg(...side),
    });
  }
  const photo = readFileSync(
    join(__dirname, '..', 'test', 'fixtures', 'corpus', 'images', 'tests-42_IndexError.jpg'),
  );
  for (const mp of photoSizes) {
    // The 12.2 MP photo as it is, or scaled down (JPEG q90) to at most `mp` megapixels.
    const width = Math.floor(4032 * Math.min(1, Math.sqrt((mp * 1e6) / (4032 * 3024))));
    const data =
      width >= 4032 ? photo : await sharp(photo).resize({ width }).jpeg({ quality: 90 }).toBuffer();
    const { height } = await sharp(data).metadata();
    inputs.push({ name: `photo ${width}×${height}`, megapixels: mp, pixels: width * height, data });
  }

  const out = (line: string) => process.stdout.write(`${line}\n`);
  if (sequence) {
    // One encode after another of the first input, as a worker taking mixed jobs does.
    const input = inputs[0]!;
    const times: string[] = [];
    for (const format of sequence) {
      const m = await measure(input.data, service(format), input.pixels);
      times.push(`${format} ${(m.cpuMs / 1000).toFixed(2)}`);
    }
    out(`${input.name}, CPU s in order: ${times.join(', ')}`);
    return;
  }

  const rows: Row[] = [];
  out('| input | format | setting | wall s | CPU s | output KB |');
  out('| --- | --- | --- | ---: | ---: | ---: |');
  for (const input of inputs) {
    for (const c of CASES) {
      if (only && !only.includes(c.format)) continue;
      if (c.maxMegapixels !== undefined && input.megapixels > c.maxMegapixels) continue;
      const m = await measure(input.data, c, input.pixels);
      rows.push({
        input: input.name,
        megapixels: input.megapixels,
        format: c.format,
        label: c.label,
        ...m,
      });
      out(
        `| ${input.name} | ${c.format} | ${c.label} | ${(m.wallMs / 1000).toFixed(2)} | ` +
          `${(m.cpuMs / 1000).toFixed(2)} | ${Math.round(m.bytes / 1024)} |`,
      );
    }
  }
  const dir = join(__dirname, 'out');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'slow-encoders.json'), JSON.stringify({ rounds, rows }, null, 2));
}

main().catch((err: unknown) => {
  process.stderr.write(`${String(err)}\n`);
  process.exit(1);
});
