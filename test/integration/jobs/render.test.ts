/**
 * GET /media/render through the API, the queue and one worker: every corpus
 * image type (JPEG, HEIC, TIFF) to every format and fit, dimensions read
 * back by decoding the answer; `format=auto` from Accept; a stored variant
 * served with no job (jobs counted in the queue); 20 identical first
 * requests make one job; deleting the source (alone or with its folder)
 * removes its variants; reconcile knows variants and cleans those whose
 * source is gone; bounds are refused with a 400 naming them; a first render
 * is answered from the bytes its worker handed over through Redis (no storage
 * read), a variant over the handoff's bound from storage.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { createLogger } from '../../../shared/logger';
import { MediaDeletion } from '../../../shared/media-deletion';
import { HANDOFF_TTL_MS, handoffKey } from '../../../shared/queue/handoff';
import { createRepositories } from '../../../shared/repositories';
import { OffboardingService } from '../../../api/services/offboarding.service';
import { ReconcileService } from '../../../api/services/reconcile.service';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { reconcileNow } from '../../support/context';
import { eventually } from '../../support/eventually';
import { CORPUS, corpusFile } from '../../support/files';
import { dependencyCalls } from '../../support/metrics';
import { expectMatchesSpec } from '../../support/openapi';
import { startWorker, type TestWorker } from '../../support/worker';

type Media = { id: number; key: string; name: string };
type Body<T> = { data: T; error?: string; details?: { field?: string; message: string }[] };

const FORMATS = ['jpeg', 'png', 'webp', 'avif', 'tiff', 'gif'] as const;
const FITS = ['cover', 'contain', 'inside', 'outside', 'fill'] as const;
/** sharp's name for each format it decodes (AVIF is read as HEIF). */
const DECODED: Record<(typeof FORMATS)[number], string> = {
  jpeg: 'jpeg',
  png: 'png',
  webp: 'webp',
  avif: 'heif',
  tiff: 'tiff',
  gif: 'gif',
};
/** One file of each corpus image type (the JPEG with EXIF orientation 8, the HEIC, the TIFF). */
const TYPES = ['orientation-portrait_8.jpg', 'heic-samplefilehub.heif', 'tiff-BSG1.tiff'];
const W = 48;
const H = 32;

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('render', {
    env: { RENDER_MAX_WIDTH: '1000', RENDER_MAX_HEIGHT: '800' },
  });
  worker = await startWorker(api.env.env);
  org = await api.createOrg('rend');
}, 60_000);
afterAll(async () => {
  await worker.close();
  await api.close();
});

async function render(
  key: string,
  options: Record<string, string | number>,
  headers: Record<string, string> = {},
) {
  const query = new URLSearchParams({ media: key });
  for (const [k, v] of Object.entries(options)) query.set(k, String(v));
  const res = await fetch(`${api.url}/media/render?${query.toString()}`, {
    headers: { ...org.auth, ...headers },
  });
  const bytes = Buffer.from(await res.arrayBuffer());
  const body = res.headers.get('content-type')?.startsWith('application/json')
    ? (JSON.parse(bytes.toString()) as Body<unknown>)
    : undefined;
  expectMatchesSpec('GET', '/media/render', res.status, body, res.headers);
  return { res, bytes, body };
}

/** Every render job of the queue (any state). */
async function renderJobs(sourceKey?: string) {
  const jobs = await api.ctx.queue
    .queue('image')
    .getJobs(['completed', 'failed', 'active', 'waiting', 'delayed', 'prioritized']);
  return jobs.filter(
    (j) =>
      j?.name === 'image.render' &&
      (sourceKey === undefined || (j.data as { key: string }).key === sourceKey),
  );
}

/**
 * Waits (bounded) until `n` variants of `key` are written: their objects in
 * storage and on the record, none still booked (a variant the handoff takes
 * is written after its answer).
 */
async function expectStored(key: string, n: number): Promise<string[]> {
  return eventually(async () => {
    const objects = await api.objectKeys(`.variants/${key}/`);
    expect(objects).toHaveLength(n);
    const doc = await api.ctx.models.Media.findOne({ key }).lean();
    const recorded = (doc?.variants ?? []).map((v) => [v.key, v.pendingUntil]);
    expect(recorded.sort()).toEqual(objects.map((o) => [o, undefined]).sort());
    return objects;
  });
}

/** The dimensions the source shows when displayed (EXIF orientation 5-8 swaps them). */
async function orientedSize(bytes: Buffer): Promise<[number, number]> {
  const m = await sharp(bytes).metadata();
  return (m.orientation ?? 1) >= 5 ? [m.height, m.width] : [m.width, m.height];
}

/** What sharp makes of a source of `sw` × `sh` resized to W × H with `fit` (none of them enlarges). */
function expectedSize(fit: (typeof FITS)[number], sw: number, sh: number): [number, number] {
  if (fit === 'cover' || fit === 'contain' || fit === 'fill') return [W, H];
  const wider = sw / sh > W / H;
  const byWidth: [number, number] = [W, Math.round((sh * W) / sw)];
  const byHeight: [number, number] = [Math.round((sw * H) / sh), H];
  if (fit === 'inside') return wider ? byWidth : byHeight;
  return wider ? byHeight : byWidth; // outside
}

/** media_renders_total by outcome, from the API's /metrics. */
async function renderCounts(): Promise<{ rendered: number; stored: number }> {
  const text = await (await fetch(`${api.url}/metrics`)).text();
  const count = (outcome: string) =>
    Number(
      new RegExp(`^media_renders_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(text)?.[1] ??
        0,
    );
  return { rendered: count('rendered'), stored: count('stored') };
}

describe('every corpus image type to every format and fit', () => {
  it.each(TYPES)(
    '%s',
    async (file) => {
      const bytes = corpusFile(`images/${file}`);
      const source = await org.uploadRecord(bytes, file);
      // HEIC is measured after decoding (sharp reads its header as HEIF).
      const [sw, sh] = await orientedSize(bytes);
      const cases = FORMATS.flatMap((format) => FITS.map((fit) => ({ format, fit })));
      const results = await Promise.all(
        cases.map(async ({ format, fit }) => {
          const { res, bytes: out } = await render(source.key, { w: W, h: H, fit, format });
          return { format, fit, res, out };
        }),
      );
      for (const { format, fit, res, out } of results) {
        expect([format, fit, res.status]).toEqual([format, fit, 200]);
        const meta = await sharp(out).metadata();
        const [ew, eh] = expectedSize(fit, sw, sh);
        expect([format, fit, meta.format]).toEqual([format, fit, DECODED[format]]);
        // sharp may round the computed side the other way by one pixel.
        expect(Math.abs(meta.width - ew)).toBeLessThanOrEqual(1);
        expect(Math.abs(meta.height - eh)).toBeLessThanOrEqual(1);
        expect(res.headers.get('cache-control')).toBe('private, max-age=86400');
        expect(res.headers.get('vary')).toBeNull();
        expect(meta.exif).toBeUndefined();
      }
    },
    120_000,
  );

  it('renders every readable corpus image as the thumbnail preset; a corrupt one is a 422', async () => {
    const files = readdirSync(join(CORPUS, 'images'));
    for (const file of files) {
      const source = await org.uploadRecord(corpusFile(`images/${file}`), file);
      const { res, bytes, body } = await render(source.key, { preset: 'thumbnail', format: 'png' });
      if (file === 'corrupted.jpg') {
        expect([file, res.status, body?.error]).toEqual([file, 422, 'UNREADABLE_MEDIA']);
        continue;
      }
      expect([file, res.status]).toEqual([file, 200]);
      const meta = await sharp(bytes).metadata();
      // 200 × 200 cover, never enlarged (Canon_40D is 100 × 68).
      expect(meta.width).toBeLessThanOrEqual(200);
      expect(meta.height).toBeLessThanOrEqual(200);
      expect(meta.format).toBe('png');
    }
  }, 120_000);
});

describe('metadata', () => {
  it('strips EXIF (GPS included) unless asked to keep it; orientation is applied either way', async () => {
    const source = await org.uploadRecord(corpusFile('images/gps-DSCN0010.jpg'), 'gps.jpg');
    const stripped = await sharp(
      (await render(source.key, { w: 100, format: 'jpeg' })).bytes,
    ).metadata();
    expect(stripped.exif).toBeUndefined();
    const kept = await sharp(
      (await render(source.key, { w: 100, format: 'jpeg', metadata: 'keep' })).bytes,
    ).metadata();
    // The GPS IFD pointer (tag 0x8825; this EXIF is little-endian).
    expect(kept.exif?.includes(Buffer.from([0x25, 0x88]))).toBe(true);

    const portrait = await org.uploadRecord(
      corpusFile('images/orientation-portrait_8.jpg'),
      'p.jpg',
    );
    const out = await sharp(
      (await render(portrait.key, { w: 90, format: 'jpeg', metadata: 'keep' })).bytes,
    ).metadata();
    // 450 × 600 once oriented (libvips' shrink-on-load may round the height up by one).
    expect([out.width, out.orientation]).toEqual([90, 1]);
    expect(Math.abs(out.height - 120)).toBeLessThanOrEqual(1);
  }, 60_000);
});

describe('format=auto', () => {
  it('picks AVIF, WebP or JPEG from Accept and answers Vary: Accept', async () => {
    const source = await org.uploadRecord('Canon_40D.jpg', 'canon.jpg');
    const cases: [string, string][] = [
      ['image/avif,image/webp,*/*;q=0.8', 'image/avif'],
      ['image/webp,*/*', 'image/webp'],
      ['image/avif;q=0,image/webp', 'image/webp'],
      ['*/*', 'image/jpeg'],
    ];
    for (const [accept, type] of cases) {
      const { res, bytes } = await render(source.key, { w: 50 }, { Accept: accept });
      expect([accept, res.status, res.headers.get('content-type')]).toEqual([accept, 200, type]);
      expect(res.headers.get('vary')).toBe('Accept');
      expect((await sharp(bytes).metadata()).width).toBe(50);
    }
  }, 60_000);
});

describe('stored variants', () => {
  it('serves the second request from storage with no job: same bytes, ETag, 304, Range', async () => {
    const source = await org.uploadRecord('xmp-BlueSquare.jpg', 'blue.jpg');
    const before = await renderCounts();
    const first = await render(source.key, { w: 40, h: 40, format: 'webp' });
    expect(first.res.status).toBe(200);
    expect(await renderJobs(source.key)).toHaveLength(1);
    // The variant a handoff answered is written after the answer: stored, then asked again.
    await expectStored(source.key, 1);

    const second = await render(source.key, { w: 40, h: 40, format: 'webp', fit: 'cover' });
    expect(second.res.status).toBe(200);
    expect(second.bytes.equals(first.bytes)).toBe(true);
    expect(await renderJobs(source.key)).toHaveLength(1);
    // Hits and misses, as an operator sees them (media_renders_total).
    const after = await renderCounts();
    expect({
      rendered: after.rendered - before.rendered,
      stored: after.stored - before.stored,
    }).toEqual({ rendered: 1, stored: 1 });
    const etag = second.res.headers.get('etag')!;
    expect(etag).toBe(first.res.headers.get('etag'));

    const notModified = await render(
      source.key,
      { w: 40, h: 40, format: 'webp' },
      {
        'If-None-Match': etag,
      },
    );
    expect(notModified.res.status).toBe(304);
    const partial = await render(
      source.key,
      { w: 40, h: 40, format: 'webp' },
      {
        Range: 'bytes=0-9',
      },
    );
    expect(partial.res.status).toBe(206);
    expect(partial.bytes.equals(first.bytes.subarray(0, 10))).toBe(true);
    expect(partial.res.headers.get('content-range')).toBe(`bytes 0-9/${first.bytes.length}`);
    expect(await renderJobs(source.key)).toHaveLength(1);

    // Stored beside the source, not as a record of its own.
    await expectStored(source.key, 1);
    const list = await fetch(`${api.url}/media?limit=1000`, { headers: org.auth });
    const listed = ((await list.json()) as Body<{ media: Media[] }>).data.media;
    expect(listed.some((m) => m.key.startsWith('.variants/'))).toBe(false);
  }, 60_000);

  it('makes one job for 20 identical first requests at once', async () => {
    const source = await org.uploadRecord(corpusFile('images/gps-DSCN0010.jpg'), 'many.jpg');
    const answers = await Promise.all(
      Array.from({ length: 20 }, () => render(source.key, { w: 64, format: 'avif' })),
    );
    expect(answers.map((a) => a.res.status)).toEqual(Array(20).fill(200));
    for (const a of answers) expect(a.bytes.equals(answers[0]!.bytes)).toBe(true);
    expect(await renderJobs(source.key)).toHaveLength(1);
    await expectStored(source.key, 1);
  }, 60_000);
});

async function storedBytes(key: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of await api.ctx.store.get(key)) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** The API's storage reads so far, from its /metrics. */
const storageReads = () => dependencyCalls(api.url, 'storage', 'get');

describe('the worker’s cache of recently read sources', () => {
  const gets = () => dependencyCalls(worker.opsUrl, 'storage', 'get');

  it('renders a new image from the bytes its placeholder was made from: no storage read', async () => {
    const bytes = corpusFile('images/exif-org-olympus-d320l.jpg');
    const source = await org.uploadRecord(bytes, 'burst.jpg');
    // The placeholder listener reads a new image on the worker (through the cache).
    await eventually(async () => {
      const doc = await api.ctx.models.Media.findOne({ key: source.key }).lean();
      expect(typeof doc?.thumbhash).toBe('string');
    });
    const before = await gets();
    const widths = [64, 96, 128, 160];
    const answers = await Promise.all(widths.map((w) => render(source.key, { w, format: 'webp' })));
    expect(answers.map((a) => a.res.status)).toEqual(widths.map(() => 200));
    expect(await gets()).toBe(before);
    // Each variant is the source's own render at its width, and stored.
    const [sw, sh] = await orientedSize(bytes);
    for (const [i, w] of widths.entries()) {
      const meta = await sharp(answers[i]!.bytes).metadata();
      expect([meta.width, meta.height]).toEqual([w, Math.round((sh * w) / sw)]);
    }
    await expectStored(source.key, widths.length);
  }, 60_000);

  it('reads a source once for a burst of renders (pages of a PDF, which has no placeholder)', async () => {
    const source = await org.uploadRecord(corpusFile('pdfs/pdflatex-4-pages.pdf'), 'burst.pdf');
    // The page-count listener reads a new PDF once (not through the cache): let it first.
    await eventually(async () => {
      const doc = await api.ctx.models.Media.findOne({ key: source.key }).lean();
      expect(doc?.pages).toBe(4);
    });
    const before = await gets();
    const asks = [1, 2, 3, 4].map((page) => ({ page, w: 80, format: 'png' }));
    const answers = await Promise.all(asks.map((o) => render(source.key, o)));
    expect(answers.map((a) => a.res.status)).toEqual(asks.map(() => 200));
    for (const a of answers) expect((await sharp(a.bytes).metadata()).width).toBe(80);
    // Once for the four (one read shared by those at once; the others from the cache).
    expect(await gets()).toBe(before + 1);
    await expectStored(source.key, asks.length);
  }, 60_000);
});

describe('the first answer from the worker’s hands', () => {
  it('answers a first render with the bytes its worker handed over, with no storage read', async () => {
    const source = await org.uploadRecord(
      corpusFile('images/exif-org-olympus-d320l.jpg'),
      'hand.jpg',
    );
    const reads = await storageReads();
    const first = await render(source.key, { w: 120, format: 'webp' });
    expect(first.res.status).toBe(200);
    expect(await storageReads()).toBe(reads);
    expect(first.res.headers.get('content-length')).toBe(String(first.bytes.length));
    // The handed-over bytes expire from Redis.
    const [job] = await renderJobs(source.key);
    const ttl = await api.ctx.redis!.pttl(handoffKey(api.ctx.config.queuePrefix, job!.id!));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(HANDOFF_TTL_MS);

    // Written after the answer: the object, then the record (waited for, bounded).
    const [variantKey] = await expectStored(source.key, 1);
    // The next request streams the stored variant: the same bytes.
    const second = await render(source.key, { w: 120, format: 'webp' });
    expect(second.bytes.equals(first.bytes)).toBe(true);
    expect(await storageReads()).toBe(reads + 1);
    // The handed-over bytes were the stored variant's (read here through the API's store).
    expect((await storedBytes(variantKey!)).equals(first.bytes)).toBe(true);
  }, 60_000);

  it('answers a Range of a first render from the handed-over bytes', async () => {
    const source = await org.uploadRecord(corpusFile('images/gps-DSCN0010.jpg'), 'range.jpg');
    const partial = await render(source.key, { w: 100, format: 'png' }, { Range: 'bytes=0-7' });
    expect(partial.res.status).toBe(206);
    expect(partial.bytes.equals(Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]))).toBe(true);
    const whole = await render(source.key, { w: 100, format: 'png' });
    expect(partial.res.headers.get('content-range')).toBe(`bytes 0-7/${whole.bytes.length}`);
  }, 60_000);

  it('a render whose worker died between its answer and its write: taken over by the next render, or removed by reconcile', async () => {
    const source = await org.uploadRecord(corpusFile('images/gps-DSCN0010.jpg'), 'died.jpg');
    const ask = { w: 90, format: 'webp' };
    const first = await render(source.key, ask);
    expect(first.res.status).toBe(200);
    const [variantKey] = await expectStored(source.key, 1);
    const usage = () => api.ctx.repositories.usage.counters(org.organization.id);
    const counted = (await usage()).variantBytes;
    // What a worker killed after answering leaves: the booking, its hold run out, no object.
    const died = async () => {
      await api.ctx.models.Media.updateOne(
        { key: source.key },
        { $set: { 'variants.0.pendingUntil': new Date(Date.now() - 1_000) } },
      );
      await api.ctx.store.remove(variantKey!);
    };

    await died();
    // Not served (no object behind it): the next request renders again and writes it.
    const again = await render(source.key, ask);
    expect(again.res.status).toBe(200);
    expect(again.bytes.equals(first.bytes)).toBe(true);
    expect(await expectStored(source.key, 1)).toEqual([variantKey]);
    expect((await usage()).variantBytes).toBe(counted);

    await died();
    const { media, usage: counters, variants, events } = createRepositories(api.ctx.models);
    const logger = createLogger({ level: 'silent' });
    const deletion = new MediaDeletion({
      media,
      usage: counters,
      events,
      store: api.ctx.store,
      logger,
    });
    const reconcile = new ReconcileService({
      store: api.ctx.store,
      media,
      usage: counters,
      variants,
      deletion,
    });
    const options = { organization: org.organization, olderThanMs: 0, checkUsage: false };
    const report = await reconcile.run({ ...options, fix: true });
    expect(report.unwrittenVariants).toEqual([
      expect.objectContaining({ media: source.key, key: variantKey, bytes: first.bytes.length }),
    ]);
    expect(report.clean).toBe(false);
    // Records = objects again, and its bytes given back.
    const doc = await api.ctx.models.Media.findOne({ key: source.key }).lean();
    expect(doc?.variants ?? []).toEqual([]);
    expect(await api.objectKeys(`.variants/${source.key}/`)).toEqual([]);
    expect((await usage()).variantBytes).toBe(counted - first.bytes.length);
    expect((await reconcile.run({ ...options, fix: false })).unwrittenVariants).toEqual([]);
    // The next request answers the same bytes (from the job's handed-over bytes while they
    // last, then rendered and stored again).
    const after = await render(source.key, ask);
    expect(after.res.status).toBe(200);
    expect(after.bytes.equals(first.bytes)).toBe(true);
  }, 60_000);

  it('reads a variant over RENDER_HANDOFF_MAX_BYTES back from storage', async () => {
    const source = await org.uploadRecord(
      corpusFile('images/Reconyx_HC500_Hyperfire.jpg'),
      'big.jpg',
    );
    const reads = await storageReads();
    const first = await render(source.key, { w: 1000, format: 'png' });
    expect(first.res.status).toBe(200);
    expect(first.bytes.length).toBeGreaterThan(api.ctx.config.render.handoffMaxBytes);
    expect(await storageReads()).toBe(reads + 1);
    const [variantKey] = await api.objectKeys(`.variants/${source.key}/`);
    expect((await storedBytes(variantKey!)).equals(first.bytes)).toBe(true);
    const [job] = await renderJobs(source.key);
    expect(await api.ctx.redis!.exists(handoffKey(api.ctx.config.queuePrefix, job!.id!))).toBe(0);
  }, 60_000);
});

describe('deletion and reconcile', () => {
  it('deleting a source removes its variants; so does a recursive folder delete', async () => {
    const alone = await org.uploadRecord('Canon_40D.jpg', 'alone.jpg');
    const inFolder = await org.uploadRecord('Canon_40D.jpg', 'in-folder.jpg', {
      folder: 'Renders',
    });
    for (const key of [alone.key, inFolder.key]) {
      for (const w of [20, 30])
        expect((await render(key, { w, format: 'png' })).res.status).toBe(200);
      await expectStored(key, 2);
    }
    const del = await fetch(`${api.url}/media/${alone.id}`, {
      method: 'DELETE',
      headers: org.auth,
    });
    expect(del.status).toBe(200);
    expect(await api.objectKeys(`.variants/${alone.key}/`)).toEqual([]);
    expect((await render(alone.key, { w: 20, format: 'png' })).res.status).toBe(404);

    const folders = await fetch(`${api.url}/media/folders`, { headers: org.auth });
    type Folders = Body<{ folders: { id: number; name: string }[] }>;
    const folderId = ((await folders.json()) as Folders).data.folders.find(
      (f) => f.name === 'Renders',
    )!.id;
    const folder = await fetch(`${api.url}/media/folders/${folderId}?recursive=true`, {
      method: 'DELETE',
      headers: org.auth,
    });
    expect([folder.status, await folder.text()]).toEqual([202, expect.any(String)]);
    await eventually(async () => {
      expect(await api.objectKeys(`.variants/${inFolder.key}/`)).toEqual([]);
    }, 20_000);
  }, 60_000);

  it('offboarding an organization removes its variants, left-over ones included', async () => {
    const leaving = await api.createOrg('rend-leaving');
    const key = await leaving.upload('Canon_40D.jpg', 'leaving.jpg');
    const rendered = await fetch(`${api.url}/media/render?media=${key}&w=30&format=webp`, {
      headers: leaving.auth,
    });
    expect(rendered.status).toBe(200);
    await expectStored(key, 1);
    // One whose source went without it (a render that lost a race with a delete, say).
    const stray = `.variants/${leaving.organization.slug}/gone-xyz.jpg/abc.webp`;
    await api.ctx.store.put(stray, Buffer.from('stray'), { contentType: 'image/webp' });
    expect(await api.objectKeys(`.variants/${leaving.organization.slug}/`)).toHaveLength(2);

    const { repositories, store, queue, logger } = api.ctx;
    const deletion = new MediaDeletion({ ...repositories, store, logger });
    await new OffboardingService({ repositories, store, deletion, jobs: queue, logger }).delete(
      leaving.organization,
    );
    expect(await api.objectKeys(`.variants/${leaving.organization.slug}/`)).toEqual([]);
    expect(await api.objectKeys(`.variants/${org.organization.slug}/`)).not.toEqual([]);
  }, 60_000);

  it('reconcile knows variants of live sources, and cleans those whose source is gone', async () => {
    const source = await org.uploadRecord('Canon_40D.jpg', 'kept.jpg');
    expect((await render(source.key, { w: 25, format: 'jpeg' })).res.status).toBe(200);
    await expectStored(source.key, 1);
    const ghost = `.variants/${org.organization.slug}/gone-abc.jpg/xyz.jpg`;
    await api.ctx.store.put(ghost, Buffer.from('variant of nothing'), {
      contentType: 'image/jpeg',
    });

    const report = await reconcileNow(api.ctx.store, api.ctx.models, api.ctx.queue);
    expect(report.objectsWithoutRecord).toEqual([
      expect.objectContaining({ key: ghost, variant: true, temporary: false }),
    ]);

    const { media, usage, events } = createRepositories(api.ctx.models);
    const logger = createLogger({ level: 'silent' });
    const deletion = new MediaDeletion({ media, usage, events, store: api.ctx.store, logger });
    const fixed = await new ReconcileService({ store: api.ctx.store, media, usage, deletion }).run({
      organization: org.organization,
      olderThanMs: 0,
      now: new Date(Date.now() + 60_000),
      fix: true,
      checkUsage: false,
    });
    expect(fixed.objectsWithoutRecord.map((o) => o.key)).toEqual([ghost]);
    expect(await api.objectKeys(`.variants/${org.organization.slug}/gone-abc.jpg/`)).toEqual([]);
    expect(await api.objectKeys(`.variants/${source.key}/`)).toHaveLength(1);
  }, 60_000);
});

describe('refusals', () => {
  let key: string;
  beforeAll(async () => {
    key = (await org.uploadRecord('Canon_40D.jpg', 'bounds.jpg')).key;
  });

  it.each([
    [{ w: 1001 }, 'w', 'RENDER_MAX_WIDTH'],
    [{ h: 801 }, 'h', 'RENDER_MAX_HEIGHT'],
    [{ w: 0 }, 'w', 'integer'],
    [{ fit: 'crop' }, 'fit', 'cover'],
    [{ format: 'bmp' }, 'format', 'auto'],
    [{ q: 101 }, 'q', '100'],
    [{ preset: 'huge' }, 'preset', 'RENDER_PRESETS'],
    [{ preset: 'thumbnail', w: 10 }, 'w', 'preset'],
  ])('%j: 400 naming %s', async (options, field, words) => {
    const { res, body } = await render(key, options);
    expect(res.status).toBe(400);
    expect(body?.error).toBe('VALIDATION_FAILED');
    const detail = body?.details?.find((d) => d.field === field);
    expect(detail?.message).toContain(words);
  });

  it('refuses an unknown key and another organization’s (404), with no job', async () => {
    const before = (await renderJobs()).length;
    expect((await render(`${org.organization.slug}/nothing.jpg`, { w: 10 })).res.status).toBe(404);
    const other = await api.createOrg('rend-other');
    const res = await fetch(`${api.url}/media/render?media=${encodeURIComponent(key)}&w=10`, {
      headers: other.auth,
    });
    expect(res.status).toBe(404);
    expect(await renderJobs()).toHaveLength(before);
  });
});
