/**
 * Webhook endpoints of an organization (POST/GET/PATCH/DELETE
 * /media/webhooks[/{id}]), their delivery log, replay, secret rotation and
 * a test send. A URL the guarded way out refuses (shared/egress/) is refused
 * here too (400 URL_NOT_ALLOWED with the reason), before anything is kept;
 * it is checked again at each delivery. The signing secret is answered by
 * `create` and `rotate` only, never by any other call nor logged.
 * Deliveries themselves run on the workers
 * (worker/services/webhook-deliveries.service.ts).
 */
import { randomUUID } from 'node:crypto';
import type { Config } from '@shared/config';
import { checkTarget, EgressFailed, EgressRefused, type EgressPolicy } from '@shared/egress/egress';
import { Errors } from '@shared/errors';
import type { EventType } from '@shared/events/events';
import type { JobPayloads } from '@shared/jobs';
import type { BullJobQueue } from '@shared/queue/job-queue';
import type {
  EndpointChanges,
  WebhookDelivery,
  WebhookEndpoint,
  WebhooksRepository,
} from '@shared/repositories/webhooks.repository';
import { attemptUuid, newSecret, TEST_EVENT_TYPE } from '@shared/webhooks/messages';
import type { Caller } from '../domain/caller';

type Who = Pick<Caller, 'organization'> & Partial<Pick<Caller, 'requestId'>>;

/** Messages one replay may queue at most. */
export const MAX_REPLAY = 1_000;

export interface CreateInput {
  url: string;
  events: EventType[];
  description?: string | undefined;
  enabled?: boolean | undefined;
}

export class WebhooksService {
  constructor(
    private readonly deps: {
      webhooks: WebhooksRepository;
      settings: Config['webhooks'];
      egress: EgressPolicy;
      /** Queues test sends and replays; absent where only management is done (the CLI). */
      queue?: Pick<BullJobQueue, 'schedule'>;
    },
  ) {}

  /** Refuses a URL the guard refuses (400 URL_NOT_ALLOWED, with the reason). */
  private async checkUrl(url: string): Promise<void> {
    try {
      await checkTarget(url, this.deps.egress);
    } catch (err) {
      if (err instanceof EgressRefused || err instanceof EgressFailed) {
        throw Errors.urlNotAllowed(err.message);
      }
      throw err;
    }
  }

  async create(caller: Who, input: CreateInput): Promise<WebhookEndpoint & { secret: string }> {
    const org = caller.organization.id;
    await this.checkUrl(input.url);
    if ((await this.deps.webhooks.count(org)) >= this.deps.settings.maxEndpoints) {
      throw Errors.conflict(
        `The organization has ${this.deps.settings.maxEndpoints} webhook endpoints, the most it may have`,
      );
    }
    const secret = newSecret();
    const endpoint = await this.deps.webhooks.create(
      org,
      {
        url: input.url,
        events: [...new Set(input.events)],
        description: input.description ?? '',
        enabled: input.enabled ?? true,
      },
      secret,
    );
    return { ...endpoint, secret };
  }

  list(caller: Who): Promise<WebhookEndpoint[]> {
    return this.deps.webhooks.list(caller.organization.id);
  }

  async get(caller: Who, id: number): Promise<WebhookEndpoint> {
    const endpoint = await this.deps.webhooks.get(caller.organization.id, id);
    if (!endpoint) throw notFound(id);
    return endpoint;
  }

  async update(caller: Who, id: number, changes: EndpointChanges): Promise<WebhookEndpoint> {
    if (changes.url !== undefined) await this.checkUrl(changes.url);
    const updated = await this.deps.webhooks.update(caller.organization.id, id, {
      ...changes,
      ...(changes.events ? { events: [...new Set(changes.events)] } : {}),
    });
    if (!updated) throw notFound(id);
    return updated;
  }

  async remove(caller: Who, id: number): Promise<{ id: number; deleted: true }> {
    if (!(await this.deps.webhooks.remove(caller.organization.id, id))) throw notFound(id);
    return { id, deleted: true };
  }

  async rotate(
    caller: Who,
    id: number,
  ): Promise<{ id: number; secret: string; previousSecretExpiresAt: string | null }> {
    const secret = newSecret();
    const rotated = await this.deps.webhooks.rotate(
      caller.organization.id,
      id,
      secret,
      this.deps.settings.secretOverlapMs,
    );
    if (!rotated) throw notFound(id);
    return {
      id,
      secret,
      previousSecretExpiresAt: rotated.previousExpiresAt?.toISOString() ?? null,
    };
  }

  async deliveries(
    caller: Who,
    id: number,
    options: { limit: number; before?: Date | undefined; messageId?: string | undefined },
  ): Promise<WebhookDelivery[]> {
    await this.get(caller, id);
    return this.deps.webhooks.deliveries(id, options);
  }

  /** Sends a `webhook.test` message to the endpoint now (whatever events it takes). */
  async test(caller: Who, id: number): Promise<{ messageId: string }> {
    await this.get(caller, id);
    const run = randomUUID();
    const messageId = `msg_${run.replace(/-/g, '')}`;
    await this.queue(
      caller,
      id,
      { messageId, eventId: null, eventType: TEST_EVENT_TYPE },
      'test',
      run,
    );
    return { messageId };
  }

  /**
   * Sends again one message (`messageId`), or every message whose last
   * attempt since `since` failed for good: the same `webhook-id`, a new run
   * of attempts.
   */
  async replay(
    caller: Who,
    id: number,
    which: { messageId: string } | { since: Date },
  ): Promise<{ replayed: string[] }> {
    await this.get(caller, id);
    const messages =
      'messageId' in which
        ? [await this.deps.webhooks.message(id, which.messageId)].filter((m) => m !== null)
        : await this.deps.webhooks.failedSince(id, which.since, MAX_REPLAY);
    if ('messageId' in which && messages.length === 0) {
      throw Errors.notFound(`No message "${which.messageId}" to webhook endpoint ${id}`);
    }
    const run = randomUUID();
    for (const m of messages) {
      await this.queue(caller, id, m, m.eventId ? 'replay' : 'test', run);
    }
    return { replayed: messages.map((m) => m.messageId) };
  }

  private async queue(
    caller: Who,
    endpointId: number,
    message: { messageId: string; eventId: string | null; eventType: string },
    trigger: 'replay' | 'test',
    run: string,
  ): Promise<void> {
    if (!this.deps.queue) throw new Error('webhook deliveries need a queue');
    const payload: JobPayloads['webhook.deliver'] = {
      organizationId: caller.organization.id,
      requestId: caller.requestId ?? run,
      endpointId,
      messageId: message.messageId,
      eventId: message.eventId,
      eventType: message.eventType,
      trigger,
      run,
      attempt: 1,
      waits: 0,
    };
    await this.deps.queue.schedule('webhook.deliver', payload, attemptUuid(payload));
  }
}

const notFound = (id: number) => Errors.notFound(`No webhook endpoint with id ${id}`);
