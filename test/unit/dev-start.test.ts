/**
 * What `npm start` decides before it starts anything: the development
 * defaults it adds to its children's environment (dev/dev-defaults.ts) and
 * whether dist/ must be built (dev/build-if-stale.ts), on temporary
 * directories.
 */
import { mkdir, mkdtemp, readFile, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '@shared/config';
import {
  developmentDefaults,
  DEVELOPMENT_RATE_LIMIT,
  PRODUCTION_RATE_LIMIT,
} from '../../dev/dev-defaults';
import { staleness } from '../../dev/build-if-stale';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dev-start-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('development defaults', () => {
  it('generates a signing key and dashboard credentials once (mode 0600), reuses them, and raises the rate limit tenfold', async () => {
    const first = await developmentDefaults({ NODE_ENV: 'development' }, dir);
    expect(PRODUCTION_RATE_LIMIT).toBe(600);
    expect(first.env.RATE_LIMIT_MAX).toBe(String(DEVELOPMENT_RATE_LIMIT));
    expect(DEVELOPMENT_RATE_LIMIT).toBeGreaterThanOrEqual(10 * PRODUCTION_RATE_LIMIT);
    for (const file of ['url-signing.key', 'dashboard.json'])
      expect((await stat(join(dir, file))).mode & 0o777).toBe(0o600);

    const second = await developmentDefaults({ NODE_ENV: 'development' }, dir);
    expect(second.env).toEqual(first.env);

    // What the children then run with: signing and the dashboard on.
    const config = loadConfig({ NODE_ENV: 'development', ...first.env });
    expect(config.urlSigning).toBeDefined();
    expect(config.dashboard).toMatchObject({ user: 'admin', write: false });
    expect(config.rateLimit?.max).toBe(DEVELOPMENT_RATE_LIMIT);
    expect((await readFile(join(dir, 'url-signing.key'), 'utf8')).trim()).toBe(
      first.env.URL_SIGNING_KEYS,
    );
  });

  it('leaves alone what the user set, directly or as a file, and does nothing in production', async () => {
    const set = await developmentDefaults(
      {
        NODE_ENV: 'development',
        URL_SIGNING_KEYS_FILE: '/run/secrets/keys',
        DASHBOARD_USER: 'ops',
        RATE_LIMIT_MAX: '0',
        SHUTDOWN_TIMEOUT_MS: '1000',
      },
      dir,
    );
    expect(set.env).toEqual({});
    expect(set.generated).toEqual({});

    const production = await developmentDefaults({ NODE_ENV: 'production' }, dir);
    expect(production.env).toEqual({});
    // Nothing written either.
    await expect(stat(join(dir, 'url-signing.key'))).rejects.toThrow();
  });
});

describe('build staleness', () => {
  async function project(): Promise<void> {
    for (const d of ['api', 'worker', 'shared', 'dist/api', 'dist/worker'])
      await mkdir(join(dir, d), { recursive: true });
    await writeFile(join(dir, 'api', 'main.ts'), '');
    await writeFile(join(dir, 'package-lock.json'), '{}');
    const past = new Date(Date.now() - 60_000);
    for (const file of ['api/main.ts', 'package-lock.json'])
      await utimes(join(dir, file), past, past);
    for (const file of ['dist/api/main.js', 'dist/worker/main.js', 'dist/api/openapi.yaml'])
      await writeFile(join(dir, file), '');
  }

  it('is current after a build, stale when a source or the lock file changes or an output is missing', async () => {
    await project();
    expect(staleness(dir)).toBeUndefined();

    const later = new Date(Date.now() + 1_000);
    await utimes(join(dir, 'api', 'main.ts'), later, later);
    expect(staleness(dir)).toBe('api/main.ts changed');

    await project();
    await writeFile(join(dir, 'shared', 'new.ts'), '');
    await utimes(join(dir, 'shared', 'new.ts'), later, later);
    expect(staleness(dir)).toBe('shared/new.ts changed');

    await rm(join(dir, 'shared', 'new.ts'));
    await utimes(join(dir, 'package-lock.json'), later, later);
    expect(staleness(dir)).toBe('package-lock.json changed');

    await project();
    await rm(join(dir, 'dist', 'api', 'openapi.yaml'));
    expect(staleness(dir)).toBe('dist/ is incomplete');
  });
});
