/**
 * Webhook endpoints (per organization, with their signing secrets) and the
 * delivery log (one document per attempt, kept 30 days by a TTL index).
 * Secrets leave this repository only through `signingSecrets` (the worker's
 * signer) and the create/rotate answers; `toEndpoint` never carries them.
 */
import type { EventType } from '../events/events';
import type { Models, WebhookDeliveryDoc, WebhookEndpointDoc } from '../db/models';
import { db } from '../db/errors';
import type { CountersRepository } from './counters.repository';

/** An endpoint as the API shows it: no secret. */
export interface WebhookEndpoint {
  id: number;
  organizationId: number;
  url: string;
  events: EventType[];
  description: string;
  enabled: boolean;
  disabledReason: string | null;
  failingSince: string | null;
  createdAt: string;
  updatedAt: string;
}

export type WebhookDelivery = Omit<WebhookDeliveryDoc, 'at' | 'nextAttemptAt'> & {
  at: string;
  nextAttemptAt: string | null;
};

const iso = (d: Date | null | undefined) => (d ? new Date(d).toISOString() : null);

export function toEndpoint(doc: WebhookEndpointDoc): WebhookEndpoint {
  return {
    id: doc.id,
    organizationId: doc.organizationId,
    url: doc.url,
    events: doc.events,
    description: doc.description ?? '',
    enabled: doc.enabled,
    disabledReason: doc.disabledReason ?? null,
    failingSince: iso(doc.failingSince),
    createdAt: iso(doc.createdAt)!,
    updatedAt: iso(doc.updatedAt)!,
  };
}

function toDelivery(doc: WebhookDeliveryDoc): WebhookDelivery {
  return {
    endpointId: doc.endpointId,
    organizationId: doc.organizationId,
    messageId: doc.messageId,
    eventId: doc.eventId ?? null,
    eventType: doc.eventType,
    attempt: doc.attempt,
    trigger: doc.trigger,
    at: iso(doc.at)!,
    ok: doc.ok,
    status: doc.status ?? null,
    latencyMs: doc.latencyMs,
    errorClass: doc.errorClass ?? null,
    response: doc.response ?? '',
    nextAttemptAt: iso(doc.nextAttemptAt),
  };
}

export interface EndpointChanges {
  url?: string;
  events?: EventType[];
  description?: string;
  enabled?: boolean;
}

export class WebhooksRepository {
  constructor(
    private readonly models: Pick<Models, 'WebhookEndpoint' | 'WebhookDelivery'>,
    private readonly counters: CountersRepository,
    private readonly now: () => Date = () => new Date(),
  ) {}

  async create(
    organizationId: number,
    input: { url: string; events: EventType[]; description: string; enabled: boolean },
    secret: string,
  ): Promise<WebhookEndpoint> {
    const id = await this.counters.next('webhooks');
    const doc = await db(() =>
      this.models.WebhookEndpoint.create({
        id,
        organizationId,
        ...input,
        disabledReason: null,
        failingSince: null,
        secrets: [{ secret, expiresAt: null, createdAt: this.now() }],
      }),
    );
    return toEndpoint(doc.toObject());
  }

  async count(organizationId: number): Promise<number> {
    return db(() => this.models.WebhookEndpoint.countDocuments({ organizationId }).exec());
  }

  async list(organizationId: number): Promise<WebhookEndpoint[]> {
    const docs = await db(() =>
      this.models.WebhookEndpoint.find({ organizationId }).sort({ id: 1 }).lean().exec(),
    );
    return docs.map(toEndpoint);
  }

  /** One endpoint of the organization (any organization's when `organizationId` is undefined: the CLI). */
  async get(organizationId: number | undefined, id: number): Promise<WebhookEndpoint | null> {
    const doc = await this.find(organizationId, id);
    return doc ? toEndpoint(doc) : null;
  }

  private find(organizationId: number | undefined, id: number) {
    return db(() =>
      this.models.WebhookEndpoint.findOne({
        id,
        ...(organizationId === undefined ? {} : { organizationId }),
      })
        .lean()
        .exec(),
    );
  }

  /** The enabled endpoints of an organization that take an event type. */
  async subscribers(organizationId: number, type: string): Promise<WebhookEndpoint[]> {
    const docs = await db(() =>
      this.models.WebhookEndpoint.find({
        organizationId,
        enabled: true,
        events: type as EventType,
      })
        .lean()
        .exec(),
    );
    return docs.map((d) => toEndpoint(d));
  }

  /** Changes an endpoint; enabling it clears why it was disabled and its failing streak. */
  async update(
    organizationId: number | undefined,
    id: number,
    changes: EndpointChanges,
  ): Promise<WebhookEndpoint | null> {
    const set: Record<string, unknown> = { ...changes };
    if (changes.enabled === true) Object.assign(set, { disabledReason: null, failingSince: null });
    const doc = await db(() =>
      this.models.WebhookEndpoint.findOneAndUpdate(
        { id, ...(organizationId === undefined ? {} : { organizationId }) },
        { $set: set },
        { returnDocument: 'after', lean: true },
      ).exec(),
    );
    return doc ? toEndpoint(doc) : null;
  }

  async remove(organizationId: number | undefined, id: number): Promise<boolean> {
    const r = await db(() =>
      this.models.WebhookEndpoint.deleteOne({
        id,
        ...(organizationId === undefined ? {} : { organizationId }),
      }).exec(),
    );
    return r.deletedCount > 0;
  }

  /**
   * A new current secret; the previous current one signs until `overlapMs`
   * from now (0: no longer), and older ones go.
   */
  async rotate(
    organizationId: number,
    id: number,
    secret: string,
    overlapMs: number,
  ): Promise<{ endpoint: WebhookEndpoint; previousExpiresAt: Date | null } | null> {
    const doc = await this.find(organizationId, id);
    if (!doc) return null;
    const now = this.now();
    const current = doc.secrets.find((s) => s.expiresAt === null) ?? doc.secrets[0];
    const previousExpiresAt = overlapMs > 0 && current ? new Date(now.getTime() + overlapMs) : null;
    const secrets = [
      { secret, expiresAt: null, createdAt: now },
      ...(current && previousExpiresAt
        ? [{ secret: current.secret, expiresAt: previousExpiresAt, createdAt: current.createdAt }]
        : []),
    ];
    const updated = await db(() =>
      this.models.WebhookEndpoint.findOneAndUpdate(
        { id, organizationId },
        { $set: { secrets } },
        { returnDocument: 'after', lean: true },
      ).exec(),
    );
    return updated ? { endpoint: toEndpoint(updated), previousExpiresAt } : null;
  }

  /** The endpoint with the secrets that sign now (current first): the worker's view. */
  async forDelivery(id: number): Promise<{ endpoint: WebhookEndpoint; secrets: string[] } | null> {
    const doc = await this.find(undefined, id);
    if (!doc) return null;
    const now = this.now().getTime();
    const secrets = doc.secrets
      .filter((s) => s.expiresAt === null || new Date(s.expiresAt).getTime() > now)
      .map((s) => s.secret);
    return { endpoint: toEndpoint(doc), secrets };
  }

  /** A delivery succeeded: the failing streak ends. */
  async succeeded(id: number): Promise<void> {
    await db(() =>
      this.models.WebhookEndpoint.updateOne(
        { id, failingSince: { $ne: null } },
        { $set: { failingSince: null } },
      ).exec(),
    );
  }

  /** A delivery failed: answers since when the endpoint has been failing. */
  async failed(id: number, at: Date): Promise<Date> {
    await db(() =>
      this.models.WebhookEndpoint.updateOne(
        { id, failingSince: null },
        { $set: { failingSince: at } },
      ).exec(),
    );
    const doc = await this.find(undefined, id);
    return doc?.failingSince ? new Date(doc.failingSince) : at;
  }

  async disable(id: number, reason: string): Promise<void> {
    await db(() =>
      this.models.WebhookEndpoint.updateOne(
        { id },
        { $set: { enabled: false, disabledReason: reason } },
      ).exec(),
    );
  }

  async logAttempt(entry: WebhookDeliveryDoc): Promise<void> {
    await db(() => this.models.WebhookDelivery.create(entry));
  }

  /** An endpoint's attempts, newest first (before `before`, at most `limit`). */
  async deliveries(
    endpointId: number,
    options: { limit: number; before?: Date; messageId?: string },
  ): Promise<WebhookDelivery[]> {
    const docs = await db(() =>
      this.models.WebhookDelivery.find({
        endpointId,
        ...(options.before ? { at: { $lt: options.before } } : {}),
        ...(options.messageId ? { messageId: options.messageId } : {}),
      })
        .sort({ at: -1 })
        .limit(options.limit)
        .lean()
        .exec(),
    );
    return docs.map(toDelivery);
  }

  /** The first attempt of a message to an endpoint (what a replay sends again). */
  async message(
    endpointId: number,
    messageId: string,
  ): Promise<Pick<WebhookDeliveryDoc, 'messageId' | 'eventId' | 'eventType'> | null> {
    return db(() =>
      this.models.WebhookDelivery.findOne(
        { endpointId, messageId },
        { messageId: 1, eventId: 1, eventType: 1 },
      )
        .lean()
        .exec(),
    );
  }

  /**
   * Messages to an endpoint whose last attempt since `since` failed and will
   * not be tried again (what "replay every failed one" sends).
   */
  async failedSince(
    endpointId: number,
    since: Date,
    limit: number,
  ): Promise<Pick<WebhookDeliveryDoc, 'messageId' | 'eventId' | 'eventType'>[]> {
    const docs = await db(() =>
      this.models.WebhookDelivery.find({ endpointId, at: { $gte: since } })
        .sort({ at: 1 })
        .lean()
        .exec(),
    );
    const last = new Map<string, WebhookDeliveryDoc>();
    for (const d of docs) last.set(d.messageId, d);
    return [...last.values()]
      .filter((d) => !d.ok && d.nextAttemptAt === null)
      .slice(0, limit)
      .map((d) => ({ messageId: d.messageId, eventId: d.eventId, eventType: d.eventType }));
  }
}
