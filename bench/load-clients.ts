/**
 * The load test's clients (bench/load.ts): the requests each endpoint's
 * clients send, timed from their start to the end of their body into one HDR
 * histogram per endpoint, and every attempt recorded with its answer for the
 * check behind the API (load-verify.ts). One undici pool, one connection per
 * client, one request at a time on each.
 */
import { createHash } from 'node:crypto';
import * as hdr from 'hdr-histogram-js';
import { FormData, Pool } from 'undici';
import {
  ENDPOINTS,
  type ConvertAttempt,
  type Endpoint,
  type EndpointStats,
  type LoadOptions,
  type LoadResult,
  type SampleImage,
  type StoredMedia,
  type UnexpectedAnswer,
  type UploadAttempt,
} from './load-types';

/** `LoadOptions` with its defaults applied. */
export interface LoadSettings {
  refuseEvery: number;
  oversizeEvery: number;
  format: string;
  timeout: number;
}

type Envelope<T> = { statusCode: number; data: T };
type Histogram = ReturnType<typeof histogram>;
type Answer = { status: number | null; body: Buffer; error?: string };

const MiB = 1024 * 1024;
const sha256 = (data: Buffer) => `sha256:${createHash('sha256').update(data).digest('hex')}`;
const FOLDERS = ['load-a', 'load-b'];

const histogram = () =>
  hdr.build({
    lowestDiscernibleValue: 1, // microseconds
    highestTrackableValue: 10 * 60 * 1_000_000,
    numberOfSignificantValueDigits: 3,
  });

const pick = <T>(xs: T[]): T => xs[Math.floor(Math.random() * xs.length)]!;

export class LoadClients {
  private readonly pool: Pool;
  private readonly auth: Record<string, string>;
  private readonly histograms: Record<Endpoint, Histogram>;
  private readonly statuses: Record<Endpoint, Record<string, number>>;
  private readonly uploads: UploadAttempt[] = [];
  private readonly conversions: ConvertAttempt[] = [];
  private readonly downloadMismatches: string[] = [];
  private readonly unexpected: UnexpectedAnswer[] = [];
  private unexpectedCount = 0;
  /** Stored images (metadata and convert sources) and everything downloadable. */
  private readonly images: StoredMedia[] = [];
  private readonly downloadable: StoredMedia[] = [];
  private uploadSeq = 0;
  private loadUploads = 0;

  constructor(
    private readonly options: LoadOptions,
    private readonly settings: LoadSettings,
  ) {
    this.auth = { authorization: `Bearer ${options.token}` };
    this.pool = new Pool(options.url, {
      connections: options.connections + 4,
      pipelining: 1,
      headersTimeout: settings.timeout,
      bodyTimeout: settings.timeout,
    });
    this.histograms = Object.fromEntries(ENDPOINTS.map((e) => [e, histogram()])) as Record<
      Endpoint,
      Histogram
    >;
    this.statuses = Object.fromEntries(ENDPOINTS.map((e) => [e, {}])) as Record<
      Endpoint,
      Record<string, number>
    >;
  }

  /** Sources for the first downloads, metadata and conversions: each image once. */
  async seed(): Promise<void> {
    for (const image of this.options.images) await this.upload('seed', image);
  }

  /**
   * `split[endpoint]` clients per endpoint, each sending one request after
   * another until `durationMs` is up; the one in flight at the deadline
   * finishes. Returns the elapsed time (ms), the drain included.
   */
  async runFor(durationMs: number, split: Record<Endpoint, number>): Promise<number> {
    const actions: Record<Endpoint, () => Promise<void>> = {
      upload: () => this.upload('load'),
      download: () => this.download(),
      metadata: () => this.metadata(),
      convert: () => this.convert(),
    };
    const started = performance.now();
    const deadline = started + durationMs;
    const clients = ENDPOINTS.flatMap((endpoint) =>
      Array.from({ length: split[endpoint] }, async () => {
        // Stop starting requests at the deadline; the one in flight finishes.
        while (performance.now() < deadline) await actions[endpoint]();
      }),
    );
    await Promise.all(clients);
    return performance.now() - started;
  }

  /** Requests, rate, latency percentiles and statuses per endpoint over `elapsedMs`. */
  endpointStats(elapsedMs: number): Record<Endpoint, EndpointStats> {
    return Object.fromEntries(
      ENDPOINTS.map((e) => {
        const h = this.histograms[e];
        const ms = (us: number) => Math.round(us / 10) / 100;
        const stats: EndpointStats = {
          requests: h.totalCount,
          perSecond: Math.round((h.totalCount / (elapsedMs / 1000)) * 10) / 10,
          latencyMs: {
            p50: ms(h.getValueAtPercentile(50)),
            p90: ms(h.getValueAtPercentile(90)),
            p99: ms(h.getValueAtPercentile(99)),
            max: ms(h.maxValue),
            mean: ms(h.mean),
          },
          statuses: this.statuses[e],
        };
        return [e, stats];
      }),
    ) as Record<Endpoint, EndpointStats>;
  }

  /** Every attempt and what went wrong, for the result. */
  outcomes(): Pick<
    LoadResult,
    'uploads' | 'conversions' | 'downloadMismatches' | 'unexpected' | 'unexpectedCount'
  > {
    return {
      uploads: this.uploads,
      conversions: this.conversions,
      downloadMismatches: this.downloadMismatches,
      unexpected: this.unexpected,
      unexpectedCount: this.unexpectedCount,
    };
  }

  async close(): Promise<void> {
    for (const h of Object.values(this.histograms)) h.destroy();
    await this.pool.close();
  }

  private note(endpoint: Endpoint, status: number | null, detail: string): void {
    this.unexpectedCount++;
    if (this.unexpected.length < 50) {
      this.unexpected.push({ endpoint, status, detail: detail.slice(0, 500) });
    }
  }

  /** One request, timed from its start to the end of its body. */
  private async timed(
    endpoint: Endpoint,
    request: Parameters<Pool['request']>[0],
    record: boolean,
  ): Promise<Answer> {
    const started = performance.now();
    let status: number | null = null;
    let body = Buffer.alloc(0);
    let error: string | undefined;
    try {
      const res = await this.pool.request(request);
      status = res.statusCode;
      body = Buffer.from(await res.body.arrayBuffer());
    } catch (err) {
      error = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    }
    if (record) {
      this.histograms[endpoint].recordValue(
        Math.max(1, Math.round((performance.now() - started) * 1000)),
      );
      const label = status === null ? 'error' : String(status);
      this.statuses[endpoint][label] = (this.statuses[endpoint][label] ?? 0) + 1;
    }
    return error === undefined ? { status, body } : { status, body, error };
  }

  /**
   * What upload `n` (the `k`-th of the load phase) sends: `sample` when
   * seeding; during the load, now and then a deliberate refusal (an oversize
   * body or a text file), otherwise the next sample image.
   */
  private uploadBody(
    n: number,
    k: number,
    sample: SampleImage | undefined,
  ): { data: Buffer; ext: string; expected: UploadAttempt['expected'] } {
    const { options } = this;
    const { oversizeEvery, refuseEvery } = this.settings;
    if (sample) {
      return {
        data: sample.data,
        ext: sample.name.slice(sample.name.lastIndexOf('.')),
        expected: 'stored',
      };
    }
    if (oversizeEvery > 0 && k % oversizeEvery === 3 % oversizeEvery) {
      // A JPEG head, then zeros past the limit: refused while it streams.
      const head = options.images.find((i) => /\.jpe?g$/i.test(i.name))?.data ?? Buffer.alloc(0);
      const data = Buffer.alloc(options.maxFileSize! + MiB);
      head.copy(data, 0, 0, Math.min(head.length, 64 * 1024));
      return { data, ext: '.jpg', expected: 'refused' };
    }
    if (refuseEvery > 0 && k % refuseEvery === 5 % refuseEvery) {
      const data = Buffer.from(`not an image, attempt ${n}\n`.repeat(64));
      return { data, ext: '.jpg', expected: 'refused' };
    }
    const image = options.images[n % options.images.length]!;
    return {
      data: image.data,
      ext: image.name.slice(image.name.lastIndexOf('.')),
      expected: 'stored',
    };
  }

  private async upload(phase: UploadAttempt['phase'], sample?: SampleImage): Promise<void> {
    const n = ++this.uploadSeq;
    const k = phase === 'load' ? ++this.loadUploads : 0;
    const { data, ext, expected } = this.uploadBody(n, k, sample);
    const name = `load-${String(n).padStart(6, '0')}${ext}`;
    // One in three names a folder before the file, one in three after it.
    const folder: UploadAttempt['folder'] =
      n % 3 === 1
        ? { name: FOLDERS[n % 2]!, position: 'before' }
        : n % 3 === 2
          ? { name: FOLDERS[n % 2]!, position: 'after' }
          : null;
    const form = new FormData();
    if (folder?.position === 'before') form.append('folder', folder.name);
    form.append('file', new Blob([data]), name);
    if (folder?.position === 'after') form.append('folder', folder.name);

    const attempt: UploadAttempt = {
      phase,
      name,
      bytes: data.length,
      checksum: sha256(data),
      folder,
      expected,
      status: null,
    };
    this.uploads.push(attempt);
    const res = await this.timed(
      'upload',
      { method: 'POST', path: '/media/upload', headers: this.auth, body: form },
      phase === 'load',
    );
    attempt.status = res.status;
    if (res.error) attempt.error = res.error;
    if (res.status === 201) {
      const stored = (JSON.parse(res.body.toString()) as Envelope<StoredMedia>).data;
      attempt.stored = stored;
      this.images.push(stored);
      this.downloadable.push(stored);
    }
    const answeredAsExpected =
      expected === 'stored'
        ? res.status === 201
        : res.status === (data.length > (this.options.maxFileSize ?? Infinity) ? 413 : 415);
    if (!answeredAsExpected) {
      this.note('upload', res.status, res.error ?? res.body.toString());
      if (phase === 'seed') {
        throw new Error(`seed upload of ${name} answered ${res.status}: ${res.body.toString()}`);
      }
    }
  }

  private async download(): Promise<void> {
    const media = pick(this.downloadable);
    const res = await this.timed(
      'download',
      {
        method: 'GET',
        path: `/media/download?media=${encodeURIComponent(media.key)}`,
        headers: this.auth,
      },
      true,
    );
    if (res.status !== 200) {
      return this.note('download', res.status, res.error ?? res.body.toString());
    }
    if (res.body.length !== media.bytes || sha256(res.body) !== media.checksum) {
      this.downloadMismatches.push(
        `${media.key}: got ${res.body.length} bytes ${sha256(res.body)}, record says ${media.bytes} ${media.checksum}`,
      );
    }
  }

  private async metadata(): Promise<void> {
    const media = pick(this.images);
    const res = await this.timed(
      'metadata',
      {
        method: 'GET',
        path: `/media/metadata?mediaKey=${encodeURIComponent(media.key)}`,
        headers: this.auth,
      },
      true,
    );
    if (res.status !== 200) this.note('metadata', res.status, res.error ?? res.body.toString());
  }

  private async convert(): Promise<void> {
    const source = pick(this.images);
    const attempt: ConvertAttempt = { source: source.key, status: null };
    this.conversions.push(attempt);
    const res = await this.timed(
      'convert',
      {
        method: 'POST',
        path: '/media/convert',
        headers: { ...this.auth, 'content-type': 'application/json' },
        body: JSON.stringify({ mediaKey: source.key, format: this.settings.format }),
      },
      true,
    );
    attempt.status = res.status;
    if (res.error) attempt.error = res.error;
    if (res.status === 201) {
      attempt.stored = (JSON.parse(res.body.toString()) as Envelope<StoredMedia>).data;
      this.downloadable.push(attempt.stored);
    } else {
      this.note('convert', res.status, res.error ?? res.body.toString());
      try {
        const { jobId } = JSON.parse(res.body.toString()) as { jobId?: unknown };
        if (typeof jobId === 'string') attempt.jobId = jobId;
      } catch {
        // not JSON: no job id
      }
    }
  }
}
