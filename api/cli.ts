/**
 * Operator commands. JSON on stdout; errors as JSON on stderr with exit code 1
 * (2 for usage errors). Uses the same configuration as the server.
 *
 *   org:create --slug <slug> --name <name>
 *   org:list
 *   org:update --org <slug> [--quota <10GB|none>] [--scan-policy <clean-only|not-infected|default>]
 *              [--trash-retention <30d|0|default>]
 *   org:delete --org <slug> --confirm <slug>
 *   token:create --org <slug> [--name <label>] [--expires-in <30d|12h|…>] [--scopes read,write,delete]
 *   token:revoke --id <tokenId>
 *   token:update --id <tokenId> --scopes read,write,delete
 *   token:list --org <slug>
 *   reconcile [--org <slug>] [--older-than <1h>] [--fix] [--pushgateway <url>]
 *   webhook:create --org <slug> --url <url> --events media.created,… [--description <text>]
 *   webhook:list --org <slug>
 *   webhook:update --id <id> [--url <url>] [--events …] [--enabled true|false]
 *   webhook:delete --id <id>
 *   webhook:deliveries --id <id> [--limit <1-100>]
 *   thumbhash:backfill [--org <slug>] [--limit <n>]
 */
import { resumableMultipartUploads } from '@shared/resumable-uploads';
import { parseArgs } from 'node:util';
import bytes from 'bytes';
import ms from 'ms';
import { ConfigError, getConfig } from '@shared/config';
import { isAppError } from '@shared/errors';
import { createLogger } from '@shared/logger';
import { MediaDeletion } from '@shared/media-deletion';
import { MediaRestore } from '@shared/media-restore';
import { BullJobQueue } from '@shared/queue/job-queue';
import { SCAN_POLICIES, type ScanPolicy } from '@shared/scan/scan';
import { createObjectStore } from '@shared/storage/create-object-store';
import { createDataContext, type DataContext } from './context';
import { OffboardingService } from './services/offboarding.service';
import { SCOPES, type Scope } from './services/tokens.service';
import { WebhooksService } from './services/webhooks.service';
import { EVENT_TYPES, type EventType } from '@shared/events/events';
import { adoptDevState } from './dev-state';
import { pushMetrics, reconcileMetrics } from './cli/reconcile-metrics';
import { ReconcileService, type ReconcileReport } from './services/reconcile.service';
import { ThumbhashBackfillService } from './services/thumbhash-backfill.service';
// The worker's image adapter, as the placeholder listener uses it (sharp tuned in one place).
import { configureSharp, ImageAdapter } from '../worker/image/image.adapter';

class UsageError extends Error {}

type Command = (ctx: DataContext, args: string[]) => Promise<unknown>;

function options<T extends Record<string, { type: 'string'; required?: boolean }>>(
  args: string[],
  spec: T,
): Record<keyof T, string | undefined> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args,
      options: Object.fromEntries(Object.keys(spec).map((k) => [k, { type: 'string' }])),
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
  for (const [name, o] of Object.entries(spec)) {
    if (o.required && typeof values[name] !== 'string')
      throw new UsageError(`--${name} is required`);
  }
  return values as Record<keyof T, string | undefined>;
}

function parseDuration(value: string): number {
  const parsed = ms(value as ms.StringValue);
  if (typeof parsed !== 'number' || !Number.isFinite(parsed) || parsed <= 0) {
    throw new UsageError(
      `--expires-in must be a positive duration such as 30d, 12h or 90m (got "${value}")`,
    );
  }
  return parsed;
}

/** `--scan-policy`: one of SCAN_POLICIES, or `default` (SCAN_POLICY applies). */
function parseScanPolicy(value: string): ScanPolicy | null {
  if (value === 'default') return null;
  if ((SCAN_POLICIES as readonly string[]).includes(value)) return value as ScanPolicy;
  throw new UsageError(
    `--scan-policy must be ${SCAN_POLICIES.join(', ')} or default (got "${value}")`,
  );
}

/** `--trash-retention 30d` (a duration: 0 for no trash) or `default` (TRASH_RETENTION_S applies). */
function parseTrashRetention(value: string): number | null {
  if (value === 'default') return null;
  const msValue = value.trim() === '0' ? 0 : ms(value as ms.StringValue);
  if (typeof msValue !== 'number' || !Number.isFinite(msValue) || msValue < 0) {
    throw new UsageError(
      `--trash-retention must be a duration such as 30d or 12h, 0 or default (got "${value}")`,
    );
  }
  return Math.round(msValue / 1000);
}

/** `--quota 10GB` (1024-based units, as the `bytes` package reads them) or `none`. */
function parseQuota(value: string): number | null {
  if (value.trim().toLowerCase() === 'none') return null;
  const parsed = bytes.parse(value);
  if (parsed === null || !Number.isSafeInteger(parsed) || parsed <= 0) {
    throw new UsageError(`--quota must be a size such as 10GB, 500MB, or none (got "${value}")`);
  }
  return parsed;
}

function parseScopes(value: string): Scope[] {
  const scopes = value.split(',').map((s) => s.trim());
  const unknown = scopes.filter((s) => !(SCOPES as readonly string[]).includes(s));
  if (unknown.length > 0 || scopes.length === 0) {
    throw new UsageError(`--scopes takes ${SCOPES.join(', ')} (comma-separated); got "${value}"`);
  }
  return scopes as Scope[];
}

function parseEvents(value: string): EventType[] {
  const events = value.split(',').map((s) => s.trim());
  const unknown = events.filter((e) => !(EVENT_TYPES as readonly string[]).includes(e));
  if (unknown.length > 0 || events.length === 0) {
    throw new UsageError(
      `--events takes ${EVENT_TYPES.join(', ')} (comma-separated); got "${value}"`,
    );
  }
  return events as EventType[];
}

function parseId(value: string): number {
  if (!/^[1-9][0-9]{0,15}$/.test(value)) throw new UsageError(`--id must be a positive integer`);
  return Number(value);
}

/** Webhook endpoints as the API manages them (the same checks of the URL), without a queue. */
function webhooksOf(ctx: DataContext): WebhooksService {
  return new WebhooksService({
    webhooks: ctx.repositories.webhooks,
    settings: ctx.config.webhooks,
    egress: ctx.config.egress,
  });
}

/** The organization owning a webhook endpoint (any organization's: the operator's view). */
async function endpointOwner(ctx: DataContext, id: number) {
  const endpoint = await ctx.repositories.webhooks.get(undefined, id);
  const organization =
    endpoint && (await ctx.repositories.organizations.findById(endpoint.organizationId));
  if (!organization) throw new UsageError(`no webhook endpoint with id ${id}`);
  return { organization };
}

/** Builds what a command needing storage and the queues uses, and closes it afterwards. */
async function withStorageAndQueues<T>(
  ctx: DataContext,
  run: (deps: {
    store: ReturnType<typeof createObjectStore>;
    queue: BullJobQueue | undefined;
    deletion: MediaDeletion;
  }) => Promise<T>,
): Promise<T> {
  const store = createObjectStore(ctx.config, ctx.logger);
  await store.ping();
  const queue = ctx.config.redisUrl ? new BullJobQueue(ctx.config, ctx.logger) : undefined;
  const { media, usage, events } = ctx.repositories;
  const deletion = new MediaDeletion({
    media,
    usage,
    store,
    events,
    logger: ctx.logger,
    invalidations: ctx.invalidations,
  });
  try {
    return await run({ store, queue, deletion });
  } finally {
    await queue?.close();
  }
}

/**
 * reconcile's default grace period: an upload in flight has its object (or its
 * open multipart upload) before its record, for as long as the client takes to
 * send the bytes; an hour is far above that.
 */
const RECONCILE_GRACE = '1h';

export const COMMANDS: Record<string, { usage: string; run: Command }> = {
  'org:create': {
    usage: 'org:create --slug <slug> --name <name>',
    run: async (ctx, args) => {
      const o = options(args, {
        slug: { type: 'string', required: true },
        name: { type: 'string', required: true },
      });
      const { organization, token } = await ctx.organizations.create(o.slug!, o.name!);
      return { organization, token: token.token, tokenId: token.tokenId };
    },
  },
  'org:list': {
    usage: 'org:list',
    run: async (ctx, args) => {
      options(args, {});
      const { organizations, usage } = ctx.repositories;
      const [orgs, counted] = await Promise.all([organizations.list(), usage.all()]);
      return {
        organizations: orgs.map((o) => ({
          ...o,
          usage: counted.get(o.id) ?? { bytes: 0, files: 0 },
        })),
      };
    },
  },
  'org:update': {
    usage:
      'org:update --org <slug> [--quota <10GB|none>] [--scan-policy <clean-only|not-infected|default>] [--trash-retention <30d|0|default>]',
    run: async (ctx, args) => {
      const o = options(args, {
        org: { type: 'string', required: true },
        quota: { type: 'string' },
        'scan-policy': { type: 'string' },
        'trash-retention': { type: 'string' },
      });
      if (
        o.quota === undefined &&
        o['scan-policy'] === undefined &&
        o['trash-retention'] === undefined
      ) {
        throw new UsageError('give --quota, --scan-policy, --trash-retention or several');
      }
      const trashRetention =
        o['trash-retention'] === undefined ? undefined : parseTrashRetention(o['trash-retention']);
      const quotaBytes = o.quota === undefined ? undefined : parseQuota(o.quota);
      const scanPolicy =
        o['scan-policy'] === undefined ? undefined : parseScanPolicy(o['scan-policy']);
      let organization = await ctx.organizations.require(o.org!);
      if (quotaBytes !== undefined) {
        organization = await ctx.organizations.setQuota(organization.id, quotaBytes);
      }
      if (scanPolicy !== undefined) {
        organization = await ctx.organizations.setScanPolicy(organization.id, scanPolicy);
      }
      if (trashRetention !== undefined) {
        organization = await ctx.organizations.setTrashRetention(organization.id, trashRetention);
      }
      return { organization };
    },
  },
  'org:delete': {
    usage: 'org:delete --org <slug> --confirm <slug>',
    run: async (ctx, args) => {
      const o = options(args, {
        org: { type: 'string', required: true },
        confirm: { type: 'string', required: true },
      });
      if (o.confirm !== o.org) {
        throw new UsageError('--confirm must repeat the slug given to --org');
      }
      const organization = await ctx.organizations.require(o.org!);
      return withStorageAndQueues(ctx, async ({ store, queue, deletion }) => {
        if (!queue)
          throw new Error('REDIS_URL is not set: the organization’s jobs must be removed');
        return new OffboardingService({
          repositories: ctx.repositories,
          store,
          deletion,
          jobs: queue,
          changes: ctx.organizations,
          logger: ctx.logger,
        }).delete(organization);
      });
    },
  },
  'token:create': {
    usage:
      'token:create --org <slug> [--name <label>] [--expires-in <30d>] [--scopes read,write,delete]',
    run: async (ctx, args) => {
      const o = options(args, {
        org: { type: 'string', required: true },
        name: { type: 'string' },
        'expires-in': { type: 'string' },
        scopes: { type: 'string' },
      });
      const expiresInMs = o['expires-in'] ? parseDuration(o['expires-in']) : null;
      const scopes = o.scopes === undefined ? undefined : parseScopes(o.scopes);
      const organization = await ctx.organizations.require(o.org!);
      return ctx.tokens.issue(organization.id, { name: o.name ?? null, expiresInMs, scopes });
    },
  },
  'token:revoke': {
    usage: 'token:revoke --id <tokenId>',
    run: async (ctx, args) => {
      const o = options(args, { id: { type: 'string', required: true } });
      return { token: await ctx.tokens.revoke(o.id!) };
    },
  },
  'token:update': {
    usage: 'token:update --id <tokenId> --scopes read,write,delete',
    run: async (ctx, args) => {
      const o = options(args, {
        id: { type: 'string', required: true },
        scopes: { type: 'string', required: true },
      });
      return { token: await ctx.tokens.setScopes(o.id!, parseScopes(o.scopes!)) };
    },
  },
  'token:list': {
    usage: 'token:list --org <slug>',
    run: async (ctx, args) => {
      const o = options(args, { org: { type: 'string', required: true } });
      const organization = await ctx.organizations.require(o.org!);
      return { organization, tokens: await ctx.tokens.list(organization.id) };
    },
  },
  reconcile: {
    usage: 'reconcile [--org <slug>] [--older-than <1h>] [--fix] [--pushgateway <url>]',
    run: async (ctx, args) => {
      // --fix (alias --remove) is a flag; the other options take values.
      const flags = ['--fix', '--remove'];
      const fix = args.some((a) => flags.includes(a));
      const o = options(
        args.filter((a) => !flags.includes(a)),
        {
          org: { type: 'string' },
          'older-than': { type: 'string' },
          pushgateway: { type: 'string' },
        },
      );
      // --pushgateway: the run's findings as metrics, for an alert (deploy/prometheus/alerts.yml).
      if (o.pushgateway !== undefined && !/^https?:\/\/[^/]/.test(o.pushgateway)) {
        throw new UsageError(
          `--pushgateway must be an http(s) URL such as http://pushgateway:9091 (got "${o.pushgateway}")`,
        );
      }
      const olderThan = o['older-than'] ?? RECONCILE_GRACE;
      const olderThanMs = olderThan.trim() === '0' ? 0 : ms(olderThan as ms.StringValue);
      if (typeof olderThanMs !== 'number' || !Number.isFinite(olderThanMs) || olderThanMs < 0) {
        throw new UsageError(
          `--older-than must be a duration such as 1h, 30m or 0 (got "${olderThan}")`,
        );
      }
      const organization = o.org ? await ctx.organizations.require(o.org) : null;
      const started = Date.now();
      const report: ReconcileReport = await withStorageAndQueues(
        ctx,
        ({ store, queue, deletion }) => {
          const { media, usage, jobResults, events, variants } = ctx.repositories;
          // Jobs not finished yet own their temporary inputs: the queue says which.
          return new ReconcileService({
            store,
            media,
            usage,
            variants,
            jobResults,
            deletion,
            restore: new MediaRestore({ media, folders: ctx.repositories.folders, events }),
            jobs: queue,
            resumableExpiryMs: ctx.config.limits.resumable.expiryMs,
            directExpiryMs: ctx.config.limits.direct.expiryMs,
            ...(queue
              ? {
                  resumableUploads: () =>
                    resumableMultipartUploads(queue.redis(), ctx.config.queuePrefix),
                }
              : {}),
          }).run({
            organization,
            olderThanMs,
            fix,
          });
        },
      );
      if (o.pushgateway !== undefined) {
        const metrics = reconcileMetrics(report, {
          seconds: (Date.now() - started) / 1000,
          finishedAt: new Date(),
        });
        try {
          // A run narrowed to one organization has a group of its own.
          await pushMetrics(o.pushgateway, metrics, organization ? { org: organization.slug } : {});
        } catch (err) {
          const found = `objectsWithoutRecord ${report.objectsWithoutRecord.length}, recordsWithoutObject ${report.recordsWithoutObject.length}, incompleteUploads ${report.incompleteUploads.length}`;
          throw new Error(
            `reconcile completed (clean: ${report.clean}; ${found}) but its metrics were not pushed: ${err instanceof Error ? err.message : String(err)}`,
            { cause: err },
          );
        }
      }
      return report;
    },
  },
  'webhook:create': {
    usage:
      'webhook:create --org <slug> --url <url> --events media.created,… [--description <text>]',
    run: async (ctx, args) => {
      const o = options(args, {
        org: { type: 'string', required: true },
        url: { type: 'string', required: true },
        events: { type: 'string', required: true },
        description: { type: 'string' },
      });
      const organization = await ctx.organizations.require(o.org!);
      // The signing secret is in this answer only.
      return webhooksOf(ctx).create(
        { organization },
        { url: o.url!, events: parseEvents(o.events!), description: o.description },
      );
    },
  },
  'webhook:list': {
    usage: 'webhook:list --org <slug>',
    run: async (ctx, args) => {
      const o = options(args, { org: { type: 'string', required: true } });
      const organization = await ctx.organizations.require(o.org!);
      return { organization, webhooks: await webhooksOf(ctx).list({ organization }) };
    },
  },
  'webhook:update': {
    usage: 'webhook:update --id <id> [--url <url>] [--events …] [--enabled true|false]',
    run: async (ctx, args) => {
      const o = options(args, {
        id: { type: 'string', required: true },
        url: { type: 'string' },
        events: { type: 'string' },
        enabled: { type: 'string' },
      });
      if (o.enabled !== undefined && o.enabled !== 'true' && o.enabled !== 'false') {
        throw new UsageError('--enabled takes true or false');
      }
      const id = parseId(o.id!);
      return webhooksOf(ctx).update(await endpointOwner(ctx, id), id, {
        ...(o.url !== undefined ? { url: o.url } : {}),
        ...(o.events !== undefined ? { events: parseEvents(o.events) } : {}),
        ...(o.enabled !== undefined ? { enabled: o.enabled === 'true' } : {}),
      });
    },
  },
  'webhook:delete': {
    usage: 'webhook:delete --id <id>',
    run: async (ctx, args) => {
      const o = options(args, { id: { type: 'string', required: true } });
      const id = parseId(o.id!);
      return webhooksOf(ctx).remove(await endpointOwner(ctx, id), id);
    },
  },
  'webhook:deliveries': {
    usage: 'webhook:deliveries --id <id> [--limit <1-100>]',
    run: async (ctx, args) => {
      const o = options(args, {
        id: { type: 'string', required: true },
        limit: { type: 'string' },
      });
      const id = parseId(o.id!);
      const limit = o.limit === undefined ? 50 : Number(o.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 100) {
        throw new UsageError('--limit must be an integer from 1 to 100');
      }
      return {
        deliveries: await webhooksOf(ctx).deliveries(await endpointOwner(ctx, id), id, { limit }),
      };
    },
  },
  'thumbhash:backfill': {
    usage: 'thumbhash:backfill [--org <slug>] [--limit <n>]',
    run: async (ctx, args) => {
      const o = options(args, { org: { type: 'string' }, limit: { type: 'string' } });
      const limit = o.limit === undefined ? undefined : Number(o.limit);
      if (limit !== undefined && !(Number.isInteger(limit) && limit > 0)) {
        throw new UsageError(`--limit must be a positive integer (got "${o.limit}")`);
      }
      const organization = o.org ? await ctx.organizations.require(o.org) : null;
      configureSharp();
      const images = new ImageAdapter({ maxInputPixels: ctx.config.limits.maxInputPixels });
      try {
        return await withStorageAndQueues(ctx, ({ store }) =>
          new ThumbhashBackfillService({
            media: ctx.repositories.media,
            store,
            thumbhash: (input) => images.thumbhash(input),
            maxBytes: ctx.config.limits.maxFileSize,
          }).run({ organizationId: organization?.id ?? null, limit }),
        );
      } finally {
        await images.close();
      }
    },
  },
};

function usage(): string {
  return `usage: npm run --silent cli -- <command>\n${Object.values(COMMANDS)
    .map((c) => `  ${c.usage}`)
    .join('\n')}`;
}

export async function runCli(argv: string[]): Promise<number> {
  const [name, ...args] = argv;
  const fail = (code: number, error: string, message: string) => {
    process.stderr.write(`${JSON.stringify({ error, message })}\n`);
    return code;
  };
  const command = name ? COMMANDS[name] : undefined;
  if (!command) {
    return fail(2, 'USAGE', name ? `unknown command "${name}"\n${usage()}` : usage());
  }
  let ctx: DataContext | undefined;
  try {
    // From another shell beside a running `npm start`: use its embedded services
    // (only the allow-listed service addresses; ./dev-state.ts).
    adoptDevState(process.env);
    // The CLI serves no /metrics: production asks it for no METRICS_TOKEN.
    const config = getConfig({ servesOperatorSurfaces: false });
    if (!config.mongodbUri)
      return fail(
        1,
        'CONFIG',
        'MONGODB_URI is not set and no running `npm start` was found under DATA_DIR (default ./.data)',
      );
    // Logs go to stderr so stdout stays pure JSON.
    const logger = createLogger(
      { level: config.logLevel === 'info' ? 'warn' : config.logLevel, name: 'cli' },
      process.stderr,
    );
    ctx = await createDataContext(config, logger);
    const result = await command.run(ctx, args);
    process.stdout.write(`${JSON.stringify(result)}\n`);
    return 0;
  } catch (err) {
    if (err instanceof UsageError)
      return fail(2, 'USAGE', `${err.message}\nusage: ${command.usage}`);
    if (err instanceof ConfigError) return fail(1, 'CONFIG', err.message);
    if (isAppError(err)) return fail(1, err.code, err.message);
    return fail(1, 'ERROR', err instanceof Error ? err.message : String(err));
  } finally {
    await ctx?.close().catch(() => undefined);
  }
}

if (require.main === module) {
  void runCli(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
