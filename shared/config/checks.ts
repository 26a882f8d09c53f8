/**
 * Checks across variables, each written once: render sizes within the render
 * maxima, presets read as the render reads them (its maxima and the slow
 * formats' output bounds), S3 credentials that go together, a Redis Cluster's hash
 * tag, a stored result within its organization's bound, the dashboard's
 * user and password together, METRICS_PUBLIC against METRICS_TOKEN, and what
 * production requires.
 */
import { renderPresetProblems } from '../media/render-params';
import { isHashTagged, parseRedisUrl } from '../queue/redis-url';
import { unreadableFile } from './secrets';
import type { Env } from './schema';
import type { VariableName } from './variables';

/** Reports a problem with one variable. */
export type Issue = (name: VariableName, message: string) => void;

/** Every problem between variables of an environment that parsed, each reported on the variable to change. */
export function checkAcrossVariables(env: Env, issue: Issue): void {
  const within = (what: string, s: { width?: number | null; height?: number | null }) => {
    if ((s.width ?? 0) > env.RENDER_MAX_WIDTH) return `${what} is wider than RENDER_MAX_WIDTH`;
    if ((s.height ?? 0) > env.RENDER_MAX_HEIGHT) return `${what} is taller than RENDER_MAX_HEIGHT`;
    return undefined;
  };
  for (const size of env.RENDER_SIZES) {
    const problem = within(`${size.width ?? ''}x${size.height ?? ''}`, size);
    if (problem) issue('RENDER_SIZES', problem);
  }
  // Each preset read again as the render reads it, with the maxima and the slow formats' bounds.
  const rules = {
    maxWidth: env.RENDER_MAX_WIDTH,
    maxHeight: env.RENDER_MAX_HEIGHT,
    maxOutputPixels: { gif: env.MAX_GIF_OUTPUT_PIXELS, avif: env.MAX_AVIF_OUTPUT_PIXELS },
  };
  for (const problem of renderPresetProblems(env.RENDER_PRESETS, rules)) {
    issue('RENDER_PRESETS', problem);
  }
  if (env.S3_ENDPOINT) {
    // Static keys, or else a web identity (IRSA); keys win when both are there.
    const keys = ['S3_ACCESS_KEY', 'S3_SECRET_KEY'] as const;
    const identity = ['AWS_WEB_IDENTITY_TOKEN_FILE', 'AWS_ROLE_ARN'] as const;
    if (keys.some((k) => env[k])) {
      for (const k of keys) if (!env[k]) issue(k, `is required with ${keys.find((o) => o !== k)}`);
    } else if (identity.some((k) => env[k])) {
      for (const k of identity) {
        if (!env[k]) issue(k, `is required with ${identity.find((o) => o !== k)} (web identity)`);
      }
      if (env.S3_SESSION_TOKEN)
        issue('S3_SESSION_TOKEN', 'goes with S3_ACCESS_KEY and S3_SECRET_KEY');
      const tokenFile = env.AWS_WEB_IDENTITY_TOKEN_FILE;
      const unreadable = tokenFile ? unreadableFile(tokenFile) : undefined;
      if (unreadable) issue('AWS_WEB_IDENTITY_TOKEN_FILE', unreadable);
    } else {
      for (const k of keys) {
        issue(
          k,
          'is required when S3_ENDPOINT is set (or a web identity: AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN)',
        );
      }
    }
  } else if (env.S3_SESSION_TOKEN && !env.S3_ACCESS_KEY) {
    issue('S3_SESSION_TOKEN', 'goes with S3_ACCESS_KEY and S3_SECRET_KEY');
  }
  if (env.REDIS_URL && !isHashTagged(env.QUEUE_PREFIX)) {
    let cluster = false;
    try {
      cluster = parseRedisUrl(env.REDIS_URL).mode === 'cluster';
    } catch {
      // REDIS_URL's own issue says what is wrong with it.
    }
    if (cluster) {
      issue(
        'QUEUE_PREFIX',
        `must be a hash tag such as {${env.QUEUE_PREFIX.replace(/[{}]/g, '')}} when REDIS_URL is a Redis Cluster: BullMQ's multi-key commands need every key of a queue in one slot`,
      );
    }
  }
  if (env.RESULT_MAX_BYTES > env.RESULTS_MAX_BYTES_PER_ORG) {
    issue(
      'RESULT_MAX_BYTES',
      'must not be larger than RESULTS_MAX_BYTES_PER_ORG (one result would not fit)',
    );
  }
  if (Boolean(env.DASHBOARD_USER) !== Boolean(env.DASHBOARD_PASSWORD)) {
    issue(
      env.DASHBOARD_USER ? 'DASHBOARD_PASSWORD' : 'DASHBOARD_USER',
      'DASHBOARD_USER and DASHBOARD_PASSWORD are set together (or neither, to disable the dashboard)',
    );
  }
  if (env.METRICS_PUBLIC && env.METRICS_TOKEN) {
    issue(
      'METRICS_PUBLIC',
      'true contradicts METRICS_TOKEN (which closes /metrics); set one of them',
    );
  }
  if (env.NODE_ENV === 'production') {
    // Production never falls back to an embedded default (docs/operations.md, "Running without Docker").
    for (const key of ['MONGODB_URI', 'REDIS_URL', 'S3_ENDPOINT'] as const) {
      if (!env[key]) {
        issue(
          key,
          'is required when NODE_ENV=production (embedded defaults are for development only)',
        );
      }
    }
  }
}

/**
 * What a process that serves /metrics and /readyz (the API, a worker) must
 * have in production: a METRICS_TOKEN, or METRICS_PUBLIC=true saying they are
 * open on purpose (docs/operations.md, "Protecting /metrics"). The CLI serves
 * neither and is not asked. Read from the raw environment, as the schema
 * reads it (an empty token is no token), so it is reported with every other
 * problem.
 */
export function openSurfaces(env: NodeJS.ProcessEnv): string[] {
  const open = env.METRICS_PUBLIC === 'true';
  if (env.NODE_ENV !== 'production' || env.METRICS_TOKEN?.trim() || open) return [];
  return [
    'METRICS_TOKEN: is required when NODE_ENV=production: without it /metrics and the details of /readyz are open to anyone who reaches the port (set METRICS_PUBLIC=true to serve them open on purpose, on an internal network only)',
  ];
}
