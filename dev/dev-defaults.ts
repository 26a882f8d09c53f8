/**
 * What `npm start` turns on by itself in development (never with
 * NODE_ENV=production), each only when the user set nothing for it, through
 * the same variables a deployment sets (shared/config/variables.ts):
 *
 * - signed URLs: URL_SIGNING_KEYS, a key generated once into
 *   DATA_DIR/url-signing.key (mode 0600) and reused by every later start, so
 *   URLs signed before a restart still verify after it;
 * - the Bull dashboard at /admin/queues: DASHBOARD_USER/DASHBOARD_PASSWORD,
 *   credentials generated once into DATA_DIR/dashboard.json (mode 0600);
 * - the rate limit: RATE_LIMIT_MAX ten times production's default, so that
 *   trying the API by hand does not run into it;
 * - SHUTDOWN_TIMEOUT_MS: a few seconds, so that Ctrl-C stops everything
 *   within 10 s even with work in flight.
 *
 * The values go into the children's environment only; the files stay under
 * DATA_DIR, which is the user's development data.
 */
import { randomBytes } from 'node:crypto';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { VARIABLES } from '@shared/config/variables';

/** Production's RATE_LIMIT_MAX default (the schema's), and development's: ten times it. */
export const PRODUCTION_RATE_LIMIT = Number(VARIABLES.RATE_LIMIT_MAX.value.default);
export const DEVELOPMENT_RATE_LIMIT = PRODUCTION_RATE_LIMIT * 10;
/** Development's SHUTDOWN_TIMEOUT_MS: the launcher gives its children 8 s before SIGKILL. */
export const DEVELOPMENT_SHUTDOWN_TIMEOUT_MS = 5_000;

export const SIGNING_KEY_FILE = 'url-signing.key';
export const DASHBOARD_FILE = 'dashboard.json';

export interface DevDefaults {
  /** Variables to add to the children's environment. */
  env: Record<string, string>;
  /** Which features this turned on, and the file each came from (for the banner). */
  generated: { signingKey?: string; dashboard?: string; rateLimit?: number };
}

/** Set by the user, directly or as `<NAME>_FILE` (shared/config/secrets.ts). */
const isSet = (env: NodeJS.ProcessEnv, name: string): boolean =>
  Boolean(env[name]) || Boolean(env[`${name}_FILE`]);

/** The content of `file`, or `make()` written there first (0600, never overwriting). */
async function kept(file: string, make: () => string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const value = make();
  try {
    await writeFile(file, value, { mode: 0o600, flag: 'wx' });
  } catch (err) {
    // Another start wrote it first: use that one.
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return readFile(file, 'utf8');
    throw err;
  }
  await chmod(file, 0o600);
  return value;
}

export async function developmentDefaults(
  env: NodeJS.ProcessEnv,
  dataDir: string,
): Promise<DevDefaults> {
  const defaults: DevDefaults = { env: {}, generated: {} };
  if (env.NODE_ENV === 'production') return defaults;

  if (!isSet(env, 'URL_SIGNING_KEYS')) {
    const file = join(dataDir, SIGNING_KEY_FILE);
    const key = (await kept(file, () => `${randomBytes(32).toString('base64url')}\n`)).trim();
    defaults.env.URL_SIGNING_KEYS = key;
    defaults.generated.signingKey = file;
  }
  if (!isSet(env, 'DASHBOARD_USER') && !isSet(env, 'DASHBOARD_PASSWORD')) {
    const file = join(dataDir, DASHBOARD_FILE);
    const { user, password } = JSON.parse(
      await kept(
        file,
        () =>
          `${JSON.stringify({ user: 'admin', password: randomBytes(12).toString('base64url') })}\n`,
      ),
    ) as { user: string; password: string };
    defaults.env.DASHBOARD_USER = user;
    defaults.env.DASHBOARD_PASSWORD = password;
    defaults.generated.dashboard = file;
  }
  if (!isSet(env, 'RATE_LIMIT_MAX')) {
    defaults.env.RATE_LIMIT_MAX = String(DEVELOPMENT_RATE_LIMIT);
    defaults.generated.rateLimit = DEVELOPMENT_RATE_LIMIT;
  }
  if (!isSet(env, 'SHUTDOWN_TIMEOUT_MS'))
    defaults.env.SHUTDOWN_TIMEOUT_MS = String(DEVELOPMENT_SHUTDOWN_TIMEOUT_MS);
  return defaults;
}
