/**
 * Webhook deliveries on the workers: an event's messages queued (one
 * `webhook.deliver` job per endpoint that takes it, from the `webhooks`
 * listener), and each attempt made: signed (shared/webhooks/messages.ts),
 * sent through the guarded way out (shared/egress/), logged, and followed by
 * the next attempt when it failed (shared/webhooks/schedule.ts).
 *
 * - At least once: a job's id derives from the message, its run and its
 *   attempt, so a worker killed mid-delivery has its job taken over (BullMQ's
 *   stalled-job check) and sent again with the same `webhook-id`; the next
 *   attempt is queued before the attempt is logged.
 * - Per endpoint, at most WEBHOOK_ENDPOINT_CONCURRENCY attempts are in flight
 *   across workers (a lease per attempt in Redis, lapsing after the timeout
 *   if its worker died; given back as soon as the request has ended, before
 *   the attempt is logged). An attempt that finds its endpoint full is parked in
 *   the endpoint's waiting list (Redis) and its job ends; each attempt that
 *   ends hands its slot to the first one waiting (queued again at once), so
 *   a slow endpoint holds a few of the `webhook` queue's slots, never all of
 *   them, costs nothing while its messages wait, and other endpoints (of any
 *   organization) go on. A hand-over cut short by a crash is finished by the
 *   workers' sweep (every few seconds), and queueing twice is harmless (the
 *   job's id derives from the message).
 * - 2xx: delivered, the failing streak ends. 410: the endpoint is disabled.
 *   Anything else (3xx, never followed; 4xx; 5xx; timeout; a target the
 *   guard refuses now) is a failure: retried on the schedule (a 429's or
 *   503's `Retry-After` honoured), and an endpoint failing for
 *   WEBHOOK_DISABLE_AFTER_MS is disabled, saying why.
 *
 * Secrets are read for signing only; nothing here logs them.
 */
import type { Config } from '@shared/config';
import type { DomainEvent } from '@shared/events/events';
import type { EventOutbox } from '@shared/events/outbox';
import {
  egressRequest,
  EgressFailed,
  EgressRefused,
  type EgressPolicy,
  type EgressResponse,
} from '@shared/egress/egress';
import type { JobPayloads, JobResults } from '@shared/jobs';
import type { Logger } from '@shared/logger';
import type { BullJobQueue } from '@shared/queue/job-queue';
import type { WebhookEndpoint, WebhooksRepository } from '@shared/repositories/webhooks.repository';
import {
  attemptUuid,
  eventPayload,
  messageIdOf,
  signatureHeaders,
  testPayload,
} from '@shared/webhooks/messages';
import { parseRetryAfter, retryDelay } from '@shared/webhooks/schedule';

type Payload = JobPayloads['webhook.deliver'];
type Result = JobResults['webhook.deliver'];

/**
 * Takes one of an endpoint's slots for an attempt (expired leases dropped
 * first; an attempt that holds one already keeps it): 1. When none is free,
 * parks the attempt's successor (`ARGV[5]`: `{member, payload}`) in the
 * endpoint's waiting list: 0.
 * KEYS: inflight zset, waiting list, endpoints-with-waiting set.
 * ARGV: now, ttl, limit, member, entry, endpoint id.
 */
const TAKE_LUA = `
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[4]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[4])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
  return 1
end
redis.call('RPUSH', KEYS[2], ARGV[5])
redis.call('SADD', KEYS[3], ARGV[6])
return 0
`;

/**
 * Gives back an attempt's slot (none when `ARGV[4]` is empty) and, when a
 * slot is free and an attempt waits, hands it over: the first waiting entry
 * leaves the list, its lease is taken, and it is kept in the promoting hash
 * (with its time) until its job is queued. Answers the entry, or false.
 * KEYS: inflight zset, waiting list, endpoints-with-waiting set, promoting
 * hash, promoting-at zset. ARGV: now, ttl, limit, member, endpoint id.
 */
const HAND_OVER_LUA = `
local now = tonumber(ARGV[1])
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[1], ARGV[4]) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return false end
local head = redis.call('LPOP', KEYS[2])
if not head then
  redis.call('SREM', KEYS[3], ARGV[5])
  return false
end
local member = cjson.decode(head).member
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), member)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
redis.call('HSET', KEYS[4], member, head)
redis.call('ZADD', KEYS[5], now, member)
return head
`;

/** A hand-over not finished after this is finished by the sweep. */
const PROMOTING_STALE_MS = 15_000;
/** How often a worker sweeps the waiting lists and unfinished hand-overs. */
const SWEEP_EVERY_MS = 5_000;

/** An attempt parked in its endpoint's waiting list: its job's id (uuid) is its lease member. */
interface WaitingEntry {
  member: string;
  payload: Payload;
}

export interface WebhookDeliveriesDeps {
  webhooks: WebhooksRepository;
  events: Pick<EventOutbox, 'get'>;
  /** An organization's root folder id: what a file in no folder answers as its `folderId`. */
  rootFolderId: (organizationId: number) => Promise<number | undefined>;
  queue: () => Pick<BullJobQueue, 'schedule' | 'scheduleMany' | 'redis' | 'ready'>;
  settings: Config['webhooks'];
  egress: EgressPolicy;
  queuePrefix: string;
  logger: Logger;
  now?: () => Date;
}

export class WebhookDeliveries {
  constructor(private readonly deps: WebhookDeliveriesDeps) {}

  private now(): Date {
    return this.deps.now?.() ?? new Date();
  }

  /** Queues an event's message to every enabled endpoint of its organization that takes it. */
  async enqueueEvent(event: DomainEvent): Promise<number> {
    return this.enqueueEvents([event]);
  }

  /**
   * The same for a batch of events (the dispatcher's claim): one read of the
   * endpoints per organization and event type, one of the root folder per
   * organization with endpoints, and every message's first attempt queued in
   * one round trip. Answers how many messages were queued (again, when their
   * jobs exist: a job's id derives from its message).
   */
  async enqueueEvents(events: readonly DomainEvent[]): Promise<number> {
    const subscribers = new Map<string, Promise<WebhookEndpoint[]>>();
    const roots = new Map<number, Promise<number | undefined>>();
    const jobs: { payload: Payload; jobUuid: string }[] = [];
    await Promise.all(
      events.map(async (event) => {
        const key = `${event.organizationId}:${event.type}`;
        if (!subscribers.has(key)) {
          subscribers.set(key, this.deps.webhooks.subscribers(event.organizationId, event.type));
        }
        const endpoints = await subscribers.get(key)!;
        if (endpoints.length === 0) return;
        if (!roots.has(event.organizationId)) {
          roots.set(event.organizationId, this.deps.rootFolderId(event.organizationId));
        }
        const rootFolderId = await roots.get(event.organizationId)!;
        for (const endpoint of endpoints) {
          const payload: Payload = {
            organizationId: event.organizationId,
            requestId: event.id,
            endpointId: endpoint.id,
            messageId: messageIdOf(event.id, endpoint.id),
            eventId: event.id,
            eventType: event.type,
            body: eventPayload(event, rootFolderId),
            trigger: 'event',
            run: 'event',
            attempt: 1,
            waits: 0,
          };
          jobs.push({ payload, jobUuid: attemptUuid(payload) });
        }
      }),
    );
    await this.deps.queue().scheduleMany('webhook.deliver', jobs);
    return jobs.length;
  }

  /** Makes one attempt; queues the next one when it failed and the schedule allows. */
  async attempt(payload: Payload, signal: AbortSignal, log: Logger): Promise<Result> {
    // A slot of the endpoint first (no database read for an attempt that must wait).
    const member = attemptUuid(payload);
    // The queue's fail-fast connection is made on first use: a fresh worker's first attempt.
    await this.deps.queue().ready();
    if (!(await this.take(payload, member))) return { outcome: 'waiting', status: null };
    // The slot is given back once the request has ended (logging it and queueing the next
    // attempt need no slot: the next one parked starts meanwhile), or at the latest here.
    let released: Promise<void> | undefined;
    const release = () =>
      (released ??= this.handOver(payload.endpointId, member).then(
        () => undefined,
        (err: unknown) =>
          log.warn({ err, endpointId: payload.endpointId }, 'could not hand over a webhook slot'),
      ));
    try {
      return await this.send(payload, signal, log, release);
    } finally {
      await release();
    }
  }

  private async send(
    payload: Payload,
    signal: AbortSignal,
    log: Logger,
    release: () => Promise<void>,
  ): Promise<Result> {
    const { settings } = this.deps;
    const found = await this.deps.webhooks.forDelivery(payload.endpointId);
    if (!found || found.endpoint.organizationId !== payload.organizationId) {
      log.info({ endpointId: payload.endpointId }, 'webhook endpoint gone: nothing sent');
      return { outcome: 'skipped', status: null };
    }
    const { endpoint, secrets } = found;
    if (!endpoint.enabled) {
      log.info({ endpointId: endpoint.id }, 'webhook endpoint disabled: nothing sent');
      return { outcome: 'skipped', status: null };
    }
    let body: string;
    if (payload.body) {
      body = payload.body;
    } else if (payload.eventId) {
      const event = await this.deps.events.get(payload.eventId);
      if (!event) {
        log.warn({ eventId: payload.eventId }, 'event expired from the outbox: nothing sent');
        return { outcome: 'skipped', status: null };
      }
      body = eventPayload(event, await this.deps.rootFolderId(event.organizationId));
    } else {
      body = testPayload(endpoint.id, this.now());
    }

    const at = this.now();
    const started = performance.now();
    let answer: EgressResponse | undefined;
    let errorClass: string | null = null;
    let errorText = '';
    try {
      answer = await egressRequest(
        endpoint.url,
        {
          method: 'POST',
          body,
          headers: {
            'content-type': 'application/json',
            'user-agent': 'media-webhooks/1',
            ...signatureHeaders(payload.messageId, at, body, secrets),
          },
          connectMs: Math.min(5_000, settings.timeoutMs),
          headersMs: settings.timeoutMs,
          totalMs: settings.timeoutMs,
          maxBytes: 4096,
          maxRedirects: 0,
          signal,
        },
        this.deps.egress,
      );
      if (answer.status < 200 || answer.status >= 300) errorClass = 'http_status';
    } catch (err) {
      if (err instanceof EgressRefused) errorClass = 'url_not_allowed';
      else if (err instanceof EgressFailed) errorClass = err.kind;
      else throw err;
      errorText = (err as Error).message;
    }
    const latencyMs = Math.round(performance.now() - started);
    await release();
    const status = answer?.status ?? null;
    const entry = {
      endpointId: endpoint.id,
      organizationId: endpoint.organizationId,
      messageId: payload.messageId,
      eventId: payload.eventId,
      eventType: payload.eventType,
      attempt: payload.attempt,
      trigger: payload.trigger,
      at,
      ok: errorClass === null,
      status,
      latencyMs,
      errorClass,
      response: answer ? answer.body.toString('utf8') : errorText,
      nextAttemptAt: null as Date | null,
    };

    if (errorClass === null) {
      if (endpoint.failingSince) await this.deps.webhooks.succeeded(endpoint.id);
      await this.deps.webhooks.logAttempt(entry);
      log.info({ endpointId: endpoint.id, status, latencyMs }, 'webhook delivered');
      return { outcome: 'delivered', status };
    }

    if (status === 410) {
      await this.deps.webhooks.disable(endpoint.id, 'the endpoint answered 410 Gone');
      await this.deps.webhooks.logAttempt(entry);
      log.warn({ endpointId: endpoint.id }, 'webhook endpoint answered 410: disabled');
      return { outcome: 'failed', status };
    }

    const failingSince = await this.deps.webhooks.failed(endpoint.id, at);
    if (this.now().getTime() - failingSince.getTime() >= settings.disableAfterMs) {
      await this.deps.webhooks.disable(
        endpoint.id,
        `every delivery failed since ${failingSince.toISOString()}`,
      );
      await this.deps.webhooks.logAttempt(entry);
      log.warn(
        { endpointId: endpoint.id, failingSince },
        'webhook endpoint failing too long: disabled',
      );
      return { outcome: 'failed', status };
    }

    const retryAfterMs =
      status === 429 || status === 503
        ? parseRetryAfter(answer?.headers['retry-after'], this.now())
        : null;
    const delayMs = retryDelay(settings.retrySchedule, payload.attempt + 1, { retryAfterMs });
    if (delayMs !== null) {
      const next: Payload = { ...payload, attempt: payload.attempt + 1, waits: 0 };
      await this.deps.queue().schedule('webhook.deliver', next, attemptUuid(next), { delayMs });
      entry.nextAttemptAt = new Date(this.now().getTime() + delayMs);
    }
    await this.deps.webhooks.logAttempt(entry);
    log.info(
      {
        endpointId: endpoint.id,
        status,
        errorClass,
        latencyMs,
        nextAttemptAt: entry.nextAttemptAt,
      },
      'webhook delivery failed',
    );
    return { outcome: 'failed', status };
  }

  private keys(endpointId: number) {
    const p = this.deps.queuePrefix;
    return {
      inflight: `${p}:webhook-inflight:${endpointId}`,
      waiting: `${p}:webhook-waiting:${endpointId}`,
      endpoints: `${p}:webhook-waiting-endpoints`,
      promoting: `${p}:webhook-promoting`,
      promotingAt: `${p}:webhook-promoting-at`,
    };
  }

  private leaseMs(): number {
    return this.deps.settings.timeoutMs + 5_000;
  }

  /** Takes a slot of the endpoint for this attempt, or parks its successor in the waiting list. */
  private async take(payload: Payload, member: string): Promise<boolean> {
    const k = this.keys(payload.endpointId);
    const next: Payload = { ...payload, waits: payload.waits + 1 };
    const entry: WaitingEntry = { member: attemptUuid(next), payload: next };
    const taken = await this.deps
      .queue()
      .redis()
      .eval(
        TAKE_LUA,
        3,
        k.inflight,
        k.waiting,
        k.endpoints,
        String(Date.now()),
        String(this.leaseMs()),
        String(this.deps.settings.endpointConcurrency),
        member,
        JSON.stringify(entry),
        String(payload.endpointId),
      );
    return Number(taken) === 1;
  }

  /**
   * Gives back `member`'s slot (none: '') and hands each free slot to the
   * first attempt waiting: its job queued at once.
   */
  private async handOver(endpointId: number, member: string): Promise<number> {
    const k = this.keys(endpointId);
    const redis = this.deps.queue().redis();
    let handed = 0;
    for (let i = 0; i <= this.deps.settings.endpointConcurrency; i++) {
      const head = (await redis.eval(
        HAND_OVER_LUA,
        5,
        k.inflight,
        k.waiting,
        k.endpoints,
        k.promoting,
        k.promotingAt,
        String(Date.now()),
        String(this.leaseMs()),
        String(this.deps.settings.endpointConcurrency),
        i === 0 ? member : '',
        String(endpointId),
      )) as string | null;
      if (!head) break;
      await this.promote(head);
      handed++;
    }
    return handed;
  }

  /** Queues a handed-over attempt (twice is harmless: its job id is its member), then forgets the hand-over. */
  private async promote(head: string): Promise<void> {
    const { member, payload } = JSON.parse(head) as WaitingEntry;
    await this.deps.queue().schedule('webhook.deliver', payload, member);
    const k = this.keys(payload.endpointId);
    await this.deps
      .queue()
      .redis()
      .multi()
      .hdel(k.promoting, member)
      .zrem(k.promotingAt, member)
      .exec();
  }

  /**
   * Finishes what a crash left: hand-overs not queued, and free slots of
   * endpoints with attempts waiting (their last attempt died). Run every few
   * seconds by each worker taking the `webhook` queue.
   */
  async sweep(): Promise<number> {
    // The queue's fail-fast connection is made on first use: a fresh worker's first sweep.
    await this.deps.queue().ready();
    const redis = this.deps.queue().redis();
    const k = this.keys(0);
    let done = 0;
    const stale = await redis.zrangebyscore(k.promotingAt, '-inf', Date.now() - PROMOTING_STALE_MS);
    for (const member of stale) {
      const head = await redis.hget(k.promoting, member);
      if (head) await this.promote(head);
      else await redis.zrem(k.promotingAt, member);
      done++;
    }
    for (const id of await redis.smembers(k.endpoints)) {
      done += await this.handOver(Number(id), '');
    }
    return done;
  }

  startSweeping(): { stop(): Promise<void> } {
    let running: Promise<void> | undefined;
    const timer = setInterval(() => {
      running ??= this.sweep()
        .then(() => undefined)
        .catch((err: unknown) =>
          this.deps.logger.warn({ err }, 'could not sweep the webhook waiting lists'),
        )
        .finally(() => {
          running = undefined;
        });
    }, SWEEP_EVERY_MS);
    timer.unref();
    return {
      stop: async () => {
        clearInterval(timer);
        await running;
      },
    };
  }
}
