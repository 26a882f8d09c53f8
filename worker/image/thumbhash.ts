/**
 * An image's placeholder: its ThumbHash (https://evanw.github.io/thumbhash/),
 * a few dozen bytes a client turns into a blurred preview while the image
 * loads. The image is first rendered as every render is (render.ts: its
 * pixel bound, the job's time limit, HEIC on its own threads, the
 * orientation applied) to a PNG within 100 × 100 (ThumbHash's largest
 * input), whose pixels are then read as raw RGBA: a small second decode.
 */
import sharp from 'sharp';
import { rgbaToThumbHash } from 'thumbhash';
import type { RenderOptions } from '@shared/media/render-options';
import type { RenderResult } from './render';
import type { TimeLimit } from './sharp';

/** ThumbHash takes images of at most 100 × 100. */
export const THUMBHASH_MAX_SIDE = 100;

export const THUMBHASH_RENDER: RenderOptions = {
  width: THUMBHASH_MAX_SIDE,
  height: THUMBHASH_MAX_SIDE,
  fit: 'inside',
  format: 'png',
  quality: null,
  keepMetadata: false,
};

/** The ThumbHash of `input`, base64; `render` is the image adapter's. */
export async function thumbhashOf(
  input: Buffer,
  render: (input: Buffer, options: RenderOptions, time: TimeLimit) => Promise<RenderResult>,
  time: TimeLimit = {},
): Promise<string> {
  const small = await render(input, THUMBHASH_RENDER, time);
  const { data, info } = await sharp(small.data)
    .ensureAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true });
  return Buffer.from(rgbaToThumbHash(info.width, info.height, data)).toString('base64');
}
