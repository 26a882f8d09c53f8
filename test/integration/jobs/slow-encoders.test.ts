/**
 * The slow encoders' pixel bounds through the API, the queue and a worker
 * (MAX_GIF_OUTPUT_PIXELS 40,000 and MAX_AVIF_OUTPUT_PIXELS 90,000 here, a
 * 640 × 480 photo as the source):
 *
 *  - a conversion to GIF or AVIF of more pixels than the bound answers 422
 *    OUTPUT_TOO_LARGE (the size, the limit and the setting in `details`),
 *    and stores no record and no object; within the bound it converts;
 *  - a render whose size follows the source's answers the same 422 from its
 *    job and stores no variant; a smaller one renders;
 *  - a `contain` render (its size is its box) over a bound is a 400
 *    VALIDATION_FAILED naming the setting, before any job;
 *  - `format=auto` with an AVIF-capable Accept answers WebP where AVIF would
 *    be over its bound (from the job's refusal, or at once for `contain`),
 *    and AVIF where it is within.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import sharp from 'sharp';
import { eventually } from '../../support/eventually';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { corpusFile } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type ErrorBody = {
  error: string;
  message: string;
  jobId?: string;
  details?: Record<string, unknown>[];
};

const BOUNDS = { MAX_GIF_OUTPUT_PIXELS: '40000', MAX_AVIF_OUTPUT_PIXELS: '90000' };

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;
let photo: string; // 640 × 480

beforeAll(async () => {
  api = await startApi('slow-encoders', { env: BOUNDS });
  worker = await startWorker(api.env.env);
  org = await api.createOrg('bounds');
  photo = await org.upload(corpusFile('images/gps-DSCN0010.jpg'), 'photo.jpg');
}, 60_000);
afterAll(async () => {
  await worker.close();
  await api.close();
});

async function convert(key: string, format: string) {
  const res = await fetch(`${api.url}/media/convert`, {
    method: 'POST',
    headers: { ...org.auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({ mediaKey: key, format }),
  });
  const body = (await res.json()) as ErrorBody & { data: { key: string } };
  expectMatchesSpec('POST', '/media/convert', res.status, body, res.headers);
  return { status: res.status, body };
}

async function render(key: string, query: Record<string, string>, accept?: string) {
  const params = new URLSearchParams({ media: key, ...query });
  const res = await fetch(`${api.url}/media/render?${params.toString()}`, {
    headers: { ...org.auth, ...(accept ? { Accept: accept } : {}) },
  });
  const bytes = Buffer.from(await res.arrayBuffer());
  const body = res.headers.get('content-type')?.startsWith('application/json')
    ? (JSON.parse(bytes.toString()) as ErrorBody)
    : undefined;
  expectMatchesSpec('GET', '/media/render', res.status, body, res.headers);
  return { res, bytes, body };
}

/** The variants recorded on the source's record (their key's extensions), and the objects under `.variants/`. */
async function variantsOf(key: string) {
  const record = await api.ctx.models.Media.findOne({ key }).lean();
  return {
    recorded: (record?.variants ?? []).map((v) => v.key.slice(v.key.lastIndexOf('.') + 1)).sort(),
    objects: (await api.objectKeys(`.variants/${key}/`))
      .map((k) => k.slice(k.lastIndexOf('.') + 1))
      .sort(),
  };
}

/** Refused jobs write nothing; a late write would show within this. */
const settle = () => sleep(500);

describe('conversions', () => {
  it('refuses a GIF or an AVIF over its bound with 422 OUTPUT_TOO_LARGE and keeps nothing', async () => {
    const before = await api.ctx.models.Media.countDocuments({});
    for (const [format, limit, setting] of [
      ['gif', 40_000, 'MAX_GIF_OUTPUT_PIXELS'],
      ['avif', 90_000, 'MAX_AVIF_OUTPUT_PIXELS'],
    ] as const) {
      const { status, body } = await convert(photo, format);
      expect([format, status, body.error]).toEqual([format, 422, 'OUTPUT_TOO_LARGE']);
      expect(body.jobId).toMatch(/^image-/);
      expect(body.details).toEqual([
        {
          message: 'output too large',
          format: format.toUpperCase(),
          width: 640,
          height: 480,
          limit,
          setting,
        },
      ]);
      expect(body.message).toContain(setting);
    }
    await settle();
    expect(await api.ctx.models.Media.countDocuments({})).toBe(before);
    expect(await api.objectKeys(`${org.organization.slug}/`)).toEqual([photo]);
  }, 60_000);

  it('converts an image within the bounds', async () => {
    const small = await org.upload('Canon_40D.jpg', 'small.jpg'); // 100 × 68
    for (const format of ['gif', 'avif']) {
      const { status, body } = await convert(small, format);
      expect([format, status]).toEqual([format, 201]);
      expect(body.data.key.endsWith(`.${format}`)).toBe(true);
    }
  }, 60_000);
});

describe('renders', () => {
  it('refuses a render whose size follows the source over the GIF bound (422) and stores no variant', async () => {
    // 400 px wide: 400 × 300 = 120,000 pixels.
    const { res, body } = await render(photo, { w: '400', format: 'gif' });
    expect([res.status, body?.error]).toEqual([422, 'OUTPUT_TOO_LARGE']);
    expect(body?.details).toMatchObject([{ width: 400, height: 300, limit: 40_000 }]);
    await settle();
    expect(await variantsOf(photo)).toEqual({ recorded: [], objects: [] });

    // 200 px wide: 200 × 150 = 30,000.
    const ok = await render(photo, { w: '200', format: 'gif' });
    expect([ok.res.status, ok.res.headers.get('content-type')]).toEqual([200, 'image/gif']);
    expect(await sharp(ok.bytes).metadata()).toMatchObject({ width: 200, height: 150 });
    // Written after the answer (waited for, bounded).
    await eventually(async () =>
      expect(await variantsOf(photo)).toEqual({ recorded: ['gif'], objects: ['gif'] }),
    );
  }, 60_000);

  it('refuses a contain render over a bound with a 400 naming the setting, before any job', async () => {
    for (const [format, setting] of [
      ['gif', 'MAX_GIF_OUTPUT_PIXELS'],
      ['avif', 'MAX_AVIF_OUTPUT_PIXELS'],
    ] as const) {
      // 301 × 301 = 90,601: over both.
      const { res, body } = await render(photo, { w: '301', h: '301', fit: 'contain', format });
      expect([format, res.status, body?.error]).toEqual([format, 400, 'VALIDATION_FAILED']);
      expect(body?.details?.[0]?.message).toContain(setting);
      // The API's own refusal: no job was queued for it.
      expect(body?.jobId).toBeUndefined();
    }
  }, 60_000);

  it('answers format=auto with WebP where AVIF is over its bound, AVIF where it is within', async () => {
    const source = await org.upload(corpusFile('images/gps-DSCN0010.jpg'), 'auto.jpg');
    const accept = 'image/avif,image/webp,*/*';
    // From the job's refusal: 400 × 300 = 120,000 > 90,000.
    const large = await render(source, { w: '400' }, accept);
    expect([large.res.status, large.res.headers.get('content-type')]).toEqual([200, 'image/webp']);
    expect(large.res.headers.get('vary')).toBe('Accept');
    expect(await sharp(large.bytes).metadata()).toMatchObject({ format: 'webp', width: 400 });
    // At once for contain: 320 × 320 = 102,400.
    const boxed = await render(source, { w: '320', h: '320', fit: 'contain' }, accept);
    expect([boxed.res.status, boxed.res.headers.get('content-type')]).toEqual([200, 'image/webp']);
    // Within: 300 × 225 = 67,500.
    const within = await render(source, { w: '300' }, accept);
    expect([within.res.status, within.res.headers.get('content-type')]).toEqual([
      200,
      'image/avif',
    ]);
    // Asked again, the WebP is served from storage.
    const again = await render(source, { w: '400' }, accept);
    expect([again.res.status, again.bytes.equals(large.bytes)]).toEqual([200, true]);
    await eventually(async () =>
      expect(await variantsOf(source)).toEqual({
        recorded: ['avif', 'webp', 'webp'],
        objects: ['avif', 'webp', 'webp'],
      }),
    );
  }, 60_000);
});
