import { ConfigError, loadConfig } from '../../shared/config';
import { JOB_OPTIONS, JOB_QUEUES } from '../../shared/jobs';

const problemsOf = (env: NodeJS.ProcessEnv): string[] => {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  throw new Error('expected a ConfigError');
};

describe('configuration', () => {
  it('has documented defaults for an empty environment', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      nodeEnv: 'development',
      port: 3000,
      publicBaseUrl: 'http://localhost:3000',
      bucket: 'media',
      s3: undefined,
      jobWaitMs: 30_000,
      limits: {
        maxFileSize: 100 * 1024 * 1024,
        maxFiles: 20,
        maxBase64Size: 20 * 1024 * 1024,
        maxMergeInputs: 50,
      },
      worker: {
        queues: ['image', 'pdf', 'maintenance', 'webhook', 'scan', 'import'],
        // The webhook and import queues' are WEBHOOK_CONCURRENCY and IMPORT_CONCURRENCY (they wait on the network).
        concurrency: { image: 2, pdf: 2, maintenance: 2, webhook: 16, scan: 2, import: 4 },
      },
    });
  });

  it('names the variable when a value is bad', () => {
    expect(problemsOf({ PORT: 'eighty' })).toEqual([expect.stringMatching(/^PORT: /)]);
    expect(problemsOf({ MAX_FILE_SIZE: '-1' })).toEqual([
      expect.stringMatching(/^MAX_FILE_SIZE: /),
    ]);
    expect(problemsOf({ REDIS_URL: 'http://x' })).toEqual([
      expect.stringMatching(/^REDIS_URL: .*redis/),
    ]);
    expect(problemsOf({ WORKER_QUEUES: 'image,video' })).toEqual([
      expect.stringMatching(/^WORKER_QUEUES: unknown queue "video"/),
    ]);
  });

  it('reports every bad variable at once', () => {
    const problems = problemsOf({ PORT: 'x', JOB_WAIT_MS: 'y', S3_BUCKET: 'No_Caps' });
    expect(problems.map((p) => p.split(':')[0]).sort()).toEqual([
      'JOB_WAIT_MS',
      'PORT',
      'S3_BUCKET',
    ]);
  });

  it('requires the S3 keys with an S3 endpoint', () => {
    expect(problemsOf({ S3_ENDPOINT: 'http://127.0.0.1:9000' }).sort()).toEqual([
      expect.stringMatching(/^S3_ACCESS_KEY: /),
      expect.stringMatching(/^S3_SECRET_KEY: /),
    ]);
  });

  it('refuses embedded defaults in production and says which variable is missing', () => {
    const problems = problemsOf({ NODE_ENV: 'production', METRICS_TOKEN: 'm' });
    expect(problems.map((p) => p.split(':')[0]).sort()).toEqual([
      'MONGODB_URI',
      'REDIS_URL',
      'S3_ENDPOINT',
    ]);
  });

  it('keeps a stored job result no longer than its completed job, and one result within an organization’s bound', () => {
    const jobKeptMs = JOB_OPTIONS.removeOnComplete.age * 1000;
    expect(loadConfig({}).results).toEqual({
      maxBytes: 32 * 1024 * 1024,
      maxBytesPerOrg: 256 * 1024 * 1024,
      ttlMs: jobKeptMs,
    });
    expect(problemsOf({ RESULT_TTL_MS: String(jobKeptMs + 1) })[0]).toMatch(/^RESULT_TTL_MS:/);
    expect(
      problemsOf({ RESULT_MAX_BYTES: '2000000', RESULTS_MAX_BYTES_PER_ORG: '1000000' }),
    ).toEqual([
      'RESULT_MAX_BYTES: must not be larger than RESULTS_MAX_BYTES_PER_ORG (one result would not fit)',
    ]);
  });

  it('refuses production with /metrics and /readyz details open, unless METRICS_PUBLIC=true says so', () => {
    const services = {
      NODE_ENV: 'production',
      MONGODB_URI: 'mongodb://db:27017/media',
      REDIS_URL: 'redis://redis:6379',
      S3_ENDPOINT: 'http://minio:9000',
      S3_ACCESS_KEY: 'a',
      S3_SECRET_KEY: 'b',
    };
    expect(problemsOf(services)).toEqual([
      expect.stringMatching(
        /^METRICS_TOKEN: is required when NODE_ENV=production: .*METRICS_PUBLIC=true/,
      ),
    ]);
    expect(loadConfig({ ...services, METRICS_TOKEN: 'scrape' }).metricsToken).toBe('scrape');
    expect(loadConfig({ ...services, METRICS_PUBLIC: 'true' }).metricsToken).toBeUndefined();
    // Both: contradictory, refused (in any environment).
    expect(problemsOf({ METRICS_TOKEN: 'scrape', METRICS_PUBLIC: 'true' })).toEqual([
      expect.stringMatching(/^METRICS_PUBLIC: /),
    ]);
    // The CLI serves neither, and is not asked.
    expect(loadConfig(services, { servesOperatorSurfaces: false }).metricsToken).toBeUndefined();
    // Outside production nothing is asked for.
    expect(loadConfig({ NODE_ENV: 'development' }).metricsToken).toBeUndefined();
  });

  it('parses per-queue worker concurrency', () => {
    expect(loadConfig({ WORKER_CONCURRENCY: 'image=1,pdf=4' }).worker.concurrency).toEqual({
      image: 1,
      pdf: 4,
      maintenance: 1,
      webhook: 16,
      scan: 1,
      import: 4,
    });
    expect(loadConfig({ WORKER_CONCURRENCY: '3' }).worker.concurrency).toEqual({
      image: 3,
      pdf: 3,
      maintenance: 3,
      webhook: 16,
      scan: 3,
      import: 4,
    });
    expect(problemsOf({ WORKER_CONCURRENCY: 'image=0' })).toEqual([
      expect.stringMatching(/^WORKER_CONCURRENCY: /),
    ]);
  });

  it('wants the dashboard user and password together', () => {
    expect(problemsOf({ DASHBOARD_USER: 'ops' })).toEqual([
      expect.stringMatching(/^DASHBOARD_PASSWORD: /),
    ]);
    expect(loadConfig({ DASHBOARD_USER: 'ops', DASHBOARD_PASSWORD: 'pw' }).dashboard).toEqual({
      user: 'ops',
      password: 'pw',
      write: false, // read-only unless DASHBOARD_WRITE=true
      failureLimit: 10, // failed logins per address …
      lockoutMs: 900_000, // … within 15 minutes
    });
    expect(
      loadConfig({ DASHBOARD_USER: 'ops', DASHBOARD_PASSWORD: 'pw', DASHBOARD_WRITE: 'true' })
        .dashboard?.write,
    ).toBe(true);
    expect(loadConfig({}).dashboard).toBeUndefined();
  });

  it('limits each token to 600 cost units a minute by default; RATE_LIMIT_MAX=0 turns it off', () => {
    expect(loadConfig({}).rateLimit).toEqual({
      max: 600,
      windowMs: 60_000,
      authFailures: 30,
      authLookupsPerSecond: 100,
    });
    expect(
      loadConfig({
        RATE_LIMIT_MAX: '5',
        RATE_LIMIT_WINDOW_MS: '2000',
        AUTH_FAILURE_LIMIT: '0',
        AUTH_LOOKUPS_PER_SECOND: '0',
      }).rateLimit,
    ).toEqual({ max: 5, windowMs: 2_000, authFailures: 0, authLookupsPerSecond: 0 });
    expect(loadConfig({ RATE_LIMIT_MAX: '0' }).rateLimit).toBeUndefined();
    expect(problemsOf({ RATE_LIMIT_MAX: '-1', RATE_LIMIT_WINDOW_MS: '10' }).sort()).toEqual([
      expect.stringMatching(/^RATE_LIMIT_MAX: /),
      expect.stringMatching(/^RATE_LIMIT_WINDOW_MS: /),
    ]);
  });

  it('treats empty values as unset and trims a trailing slash off PUBLIC_BASE_URL', () => {
    const config = loadConfig({ PORT: '', PUBLIC_BASE_URL: 'https://media.example.com/' });
    expect(config.port).toBe(3000);
    expect(config.publicBaseUrl).toBe('https://media.example.com');
  });

  it('takes its queue names from the job map', () => {
    const queues = [...new Set(Object.values(JOB_QUEUES))];
    expect(loadConfig({}).worker.queues).toEqual(queues);
    expect(Object.keys(loadConfig({}).worker.concurrency)).toEqual(queues);
    for (const queue of queues) {
      expect(loadConfig({ WORKER_QUEUES: queue }).worker.queues).toEqual([queue]);
    }
  });

  it('refuses at load, naming RENDER_PRESETS, a preset the render would refuse', () => {
    const presets = (entries: Record<string, unknown>) => JSON.stringify(entries);
    expect(problemsOf({ RENDER_PRESETS: presets({ big: { w: 5000 } }) })).toEqual([
      'RENDER_PRESETS: preset "big": w is over the limit of 4096 (RENDER_MAX_WIDTH)',
    ]);
    expect(
      problemsOf({ RENDER_MAX_HEIGHT: '300', RENDER_PRESETS: presets({ tall: { h: 301 } }) }),
    ).toEqual(['RENDER_PRESETS: preset "tall": h is over the limit of 300 (RENDER_MAX_HEIGHT)']);
    expect(problemsOf({ RENDER_PRESETS: presets({ odd: { format: 'bmp' } }) })).toEqual([
      'RENDER_PRESETS: preset "odd": format must be one of auto, jpeg, jpg, png, webp, gif, avif, tiff',
    ]);
    expect(problemsOf({ RENDER_PRESETS: presets({ q0: { q: 0 } }) })).toEqual([
      'RENDER_PRESETS: preset "q0": q must be an integer from 1 to 100',
    ]);
    expect(problemsOf({ RENDER_PRESETS: presets({ nested: { preset: 'thumbnail' } }) })).toEqual([
      'RENDER_PRESETS: preset "nested": unknown field(s): preset (known: w, h, fit, format, q, metadata)',
    ]);
    // What the render accepts, a preset may say: jpg, any case, sizes as text, within raised maxima.
    const config = loadConfig({
      RENDER_MAX_WIDTH: '8000',
      RENDER_PRESETS: presets({ big: { w: 5000, format: 'JPG', metadata: 'Keep', h: '20' } }),
    });
    expect(config.render.presets).toEqual({
      big: { width: 5000, height: 20, format: 'jpeg', keepMetadata: true },
    });
  });
});
