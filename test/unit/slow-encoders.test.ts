/**
 * The slow encoders' bounds (worker/image/encoders.ts, shared/media/formats.ts):
 * a render's size worked out from the header agrees with sharp's resize; a
 * GIF or AVIF over its pixel bound is refused from the header (422
 * OUTPUT_TOO_LARGE, before any pixel is decoded); the encoders' settings drop
 * with the output's pixels; a preset over a bound stops the start; and image
 * work whose job's time is up starts nothing.
 */
import fc from 'fast-check';
import sharp from 'sharp';
import { loadConfig } from '../../shared/config';
import { AppError, Errors } from '../../shared/errors';
import { outputTooLarge } from '../../shared/media/formats';
import { RENDER_FITS, type RenderOptions } from '../../shared/media/render-options';
import { ENCODER_TIERS, tierFor } from '../../worker/image/encoders';
import { ImageAdapter } from '../../worker/image/image.adapter';
import { renderedSize } from '../../worker/image/render';

const limits = { gif: 40_000, avif: 90_000 };
const adapter = new ImageAdapter({ maxInputPixels: 100_000_000, maxOutputPixels: limits });
afterAll(() => adapter.close());

const options = (o: Partial<RenderOptions>): RenderOptions => ({
  width: null,
  height: null,
  fit: 'cover',
  format: 'png',
  quality: null,
  keepMetadata: false,
  ...o,
});

describe('renderedSize', () => {
  it('is the size sharp renders, within a pixel, for any source, box and fit', async () => {
    const side = fc.integer({ min: 1, max: 400 });
    await fc.assert(
      fc.asyncProperty(
        side,
        side,
        fc.option(side, { nil: null }),
        fc.option(side, { nil: null }),
        fc.constantFrom(...RENDER_FITS),
        async (W, H, width, height, fit) => {
          // As the API normalizes them: a fit matters with both sides only.
          const o = { width, height, fit: width !== null && height !== null ? fit : 'cover' };
          const source = await sharp({
            create: { width: W, height: H, channels: 3, background: '#808080' },
          })
            .png()
            .toBuffer();
          const rendered = await adapter.render(source, options(o));
          const predicted = renderedSize({ width: W, height: H }, o);
          expect(Math.abs(predicted.width - rendered.width)).toBeLessThanOrEqual(1);
          expect(Math.abs(predicted.height - rendered.height)).toBeLessThanOrEqual(1);
        },
      ),
      { numRuns: 150 },
    );
  }, 60_000);

  it('follows the EXIF orientation: a quarter-turned photo renders with its sides swapped', async () => {
    const turned = await sharp({
      create: { width: 400, height: 200, channels: 3, background: '#808080' },
    })
      .withMetadata({ orientation: 6 })
      .jpeg()
      .toBuffer();
    // 200 × 400 once oriented: w=100 gives 100 × 200, 20,000 pixels (a GIF within 40,000).
    const gif = await adapter.render(turned, options({ width: 100, format: 'gif' }));
    expect([gif.width, gif.height]).toEqual([100, 200]);
  });
});

describe('the pixel bounds of GIF and AVIF', () => {
  it('refuses an output over its format’s bound, naming the size, the limit and the setting', () => {
    expect(outputTooLarge('gif', 200, 200, limits)).toBeUndefined();
    expect(outputTooLarge('avif', 300, 300, limits)).toBeUndefined();
    expect(outputTooLarge('png', 10_000, 10_000, limits)).toBeUndefined();
    const gif = outputTooLarge('gif', 201, 200, limits);
    expect(gif).toMatchObject({
      status: 422,
      code: 'OUTPUT_TOO_LARGE',
      details: [
        {
          format: 'GIF',
          width: 201,
          height: 200,
          limit: 40_000,
          setting: 'MAX_GIF_OUTPUT_PIXELS',
        },
      ],
    });
    expect(gif?.message).toContain('MAX_GIF_OUTPUT_PIXELS');
    expect(outputTooLarge('avif', 301, 300, limits)?.details).toMatchObject([
      { setting: 'MAX_AVIF_OUTPUT_PIXELS' },
    ]);
  });

  it('refuses from the header, before any pixel is decoded (a 10,000 × 10,000 PNG at once)', async () => {
    // 100 MP of one colour: a few hundred KB, seconds to decode and quantise.
    const huge = await sharp({
      create: { width: 10_000, height: 10_000, channels: 3, background: '#808080' },
    })
      .png({ compressionLevel: 9 })
      .toBuffer();
    for (const format of ['gif', 'avif'] as const) {
      const started = performance.now();
      await expect(adapter.convert(huge, format)).rejects.toMatchObject({
        code: 'OUTPUT_TOO_LARGE',
        details: [{ width: 10_000, height: 10_000 }],
      });
      await expect(adapter.render(huge, options({ width: 4096, format }))).rejects.toMatchObject({
        code: 'OUTPUT_TOO_LARGE',
        details: [{ width: 4096, height: 4096 }],
      });
      // Decoding it alone would take seconds, quantising it minutes (bound generously: CI is shared).
      expect(performance.now() - started).toBeLessThan(3_000);
    }
    // A thumbnail of it is within the bounds.
    const thumb = await adapter.render(huge, options({ width: 150, format: 'gif' }));
    expect([thumb.width, thumb.height]).toEqual([150, 150]);
  }, 30_000);

  it('holds a preset of a fixed size (contain) to the bounds at start', () => {
    const preset = (p: object) =>
      loadConfig({ MAX_GIF_OUTPUT_PIXELS: '40000', RENDER_PRESETS: JSON.stringify({ p }) });
    expect(() => preset({ w: 200, h: 200, fit: 'contain', format: 'gif' })).not.toThrow();
    expect(() => preset({ w: 201, h: 200, fit: 'contain', format: 'gif' })).toThrow(
      /RENDER_PRESETS: preset "p": a GIF of 201 × 200 is over the limit of 40,000 pixels \(MAX_GIF_OUTPUT_PIXELS\)/,
    );
    // A cover render's size follows the source's: the worker checks it.
    expect(() => preset({ w: 400, h: 400, fit: 'cover', format: 'gif' })).not.toThrow();
  });
});

describe('encoder settings by output pixels', () => {
  it('lowers the effort as the output grows', () => {
    expect(tierFor('gif', 250_000).effort).toBe(7);
    expect(tierFor('gif', 250_001).effort).toBe(1);
    expect(tierFor('avif', 2_000_000).effort).toBe(2);
    expect(tierFor('avif', 2_000_001).effort).toBe(0);
    expect(tierFor('webp', 4_000_000).effort).toBe(4);
    expect(tierFor('webp', 50_000_000).effort).toBe(2);
    // Every table ends with a tier for any size.
    for (const tiers of Object.values(ENCODER_TIERS)) {
      expect(tiers[tiers.length - 1]!.upTo).toBe(Infinity);
    }
  });
});

describe('the job’s time', () => {
  it('starts nothing once the signal has aborted, and answers the job’s error', async () => {
    const small = await sharp({
      create: { width: 64, height: 64, channels: 3, background: '#808080' },
    })
      .jpeg()
      .toBuffer();
    const stop = new AbortController();
    stop.abort(Errors.processingTimeout(1000));
    const before = sharp.counters();
    // One after another, each awaited as it starts (a second one started beside the first
    // would reject before anything awaits it: an unhandled rejection).
    for (const work of [
      () => adapter.convert(small, 'gif', { signal: stop.signal }),
      () => adapter.render(small, options({ width: 32 }), { signal: stop.signal }),
    ]) {
      const err: unknown = await work().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(AppError);
      expect(err).toMatchObject({ code: 'PROCESSING_TIMEOUT', status: 422 });
    }
    expect(sharp.counters()).toEqual(before);
  });
});
