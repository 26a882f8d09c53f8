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
 *   if its worker died); an attempt that finds its endpoint full is put back
 *   after a short wait, so a slow endpoint holds a few of the `webhook`
 *   queue's slots, never all of them, and other endpoints (of any
 *   organization) go on.
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
import type { RedisConnection } from '@shared/queue/redis';
import type { WebhooksRepository } from '@shared/repositories/webhooks.repository';
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

/** Takes a lease on one of an endpoint's slots (expired leases dropped first); 1 when taken. */
const LEASE_LUA = `
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[4]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[4])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
`;

export interface WebhookDeliveriesDeps {
  webhooks: WebhooksRepository;
  events: Pick<EventOutbox, 'get'>;
  queue: () => Pick<BullJobQueue, 'schedule' | 'redis'>;
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
    const endpoints = await this.deps.webhooks.subscribers(event.organizationId, event.type);
    for (const endpoint of endpoints) {
      const payload: Payload = {
        organizationId: event.organizationId,
        requestId: event.id,
        endpointId: endpoint.id,
        messageId: messageIdOf(event.id, endpoint.id),
        eventId: event.id,
        eventType: event.type,
        trigger: 'event',
        run: 'event',
        attempt: 1,
        waits: 0,
      };
      await this.deps.queue().schedule('webhook.deliver', payload, attemptUuid(payload));
    }
    return endpoints.length;
  }

  /** Makes one attempt; queues the next one when it failed and the schedule allows. */
  async attempt(payload: Payload, signal: AbortSignal, log: Logger): Promise<Result> {
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
    if (payload.eventId) {
      const event = await this.deps.events.get(payload.eventId);
      if (!event) {
        log.warn({ eventId: payload.eventId }, 'event expired from the outbox: nothing sent');
        return { outcome: 'skipped', status: null };
      }
      body = eventPayload(event);
    } else {
      body = testPayload(endpoint.id, this.now());
    }

    const lease = `${attemptUuid(payload)}`;
    if (!(await this.lease(endpoint.id, lease))) {
      const next = { ...payload, waits: payload.waits + 1 };
      const delayMs = Math.min(2_000, 100 * 2 ** Math.min(payload.waits, 4));
      await this.deps
        .queue()
        .schedule('webhook.deliver', next, attemptUuid(next), {
          delayMs: delayMs + Math.round(Math.random() * delayMs),
        });
      return { outcome: 'waiting', status: null };
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
    } finally {
      await this.release(endpoint.id, lease);
    }
    const latencyMs = Math.round(performance.now() - started);
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
      await this.deps.webhooks.succeeded(endpoint.id);
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
      log.warn({ endpointId: endpoint.id, failingSince }, 'webhook endpoint failing too long: disabled');
      return { outcome: 'failed', status };
    }

    const retryAfterMs =
      status === 429 || status === 503
        ? parseRetryAfter(answer?.headers['retry-after'], this.now())
        : null;
    const delayMs = retryDelay(settings.retrySchedule, payload.attempt + 1, { retryAfterMs });
    if (delayMs !== null) {
      const next: Payload = { ...payload, attempt: payload.attempt + 1, waits: 0 };
      await this.deps
        .queue()
        .schedule('webhook.deliver', next, attemptUuid(next), { delayMs });
      entry.nextAttemptAt = new Date(this.now().getTime() + delayMs);
    }
    await this.deps.webhooks.logAttempt(entry);
    log.info(
      { endpointId: endpoint.id, status, errorClass, latencyMs, nextAttemptAt: entry.nextAttemptAt },
      'webhook delivery failed',
    );
    return { outcome: 'failed', status };
  }

  private key(endpointId: number): string {
    return `${this.deps.queuePrefix}:webhook-inflight:${endpointId}`;
  }

  private async lease(endpointId: number, member: string): Promise<boolean> {
    const redis: RedisConnection = this.deps.queue().redis();
    const ttl = this.deps.settings.timeoutMs + 5_000;
    const taken = await redis.eval(
      LEASE_LUA,
      1,
      this.key(endpointId),
      String(Date.now()),
      String(ttl),
      String(this.deps.settings.endpointConcurrency),
      member,
    );
    return Number(taken) === 1;
  }

  private async release(endpointId: number, member: string): Promise<void> {
    await this.deps
      .queue()
      .redis()
      .zrem(this.key(endpointId), member)
      .catch(() => undefined);
  }
}
