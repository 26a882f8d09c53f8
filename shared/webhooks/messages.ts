/**
 * Webhook messages as the Standard Webhooks specification describes them
 * (https://www.standardwebhooks.com): a thin JSON payload `{type, timestamp,
 * data}`, signed with HMAC-SHA256 by the `standardwebhooks` package, in the
 * headers `webhook-id` (one per message and endpoint: the same across
 * retries and replays), `webhook-timestamp` and `webhook-signature` (one
 * `v1,` signature per secret that signs now: two during a rotation's
 * overlap). Secrets are `whsec_` and 32 random bytes in base64.
 */
import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import type { DomainEvent, EventType } from '../events/events';
import { derivedUuid } from '../jobs';

/** The events an endpoint may subscribe to. */
export type WebhookEventType = EventType;

/** The type of a test message (POST /media/webhooks/{id}/test): sent whatever the endpoint subscribes to. */
export const TEST_EVENT_TYPE = 'webhook.test';

export function newSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

/** The message id of an event to an endpoint: `msg_` and a hash of both (stable). */
export function messageIdOf(eventId: string, endpointId: number): string {
  return `msg_${derivedUuid(`webhook:${eventId}:${endpointId}`).replace(/-/g, '')}`;
}

/** The id (uuid part) of an attempt's job: one per message, run, attempt and wait. */
export function attemptUuid(p: {
  messageId: string;
  run: string;
  attempt: number;
  waits: number;
}): string {
  return derivedUuid(`webhook:${p.messageId}:${p.run}:${p.attempt}:${p.waits}`);
}

/**
 * The payload of an event's message: what happened, with the event's own data.
 * A file in no folder is recorded with `folderId: null`; clients see the
 * organization's root folder id there, as in every answer of the API.
 */
export function eventPayload(event: DomainEvent, rootFolderId?: number): string {
  let data = event.data as unknown as Record<string, unknown>;
  const media = data.media as { folderId?: number | null } | undefined;
  if (media && media.folderId === null && rootFolderId !== undefined) {
    data = { ...data, media: { ...media, folderId: rootFolderId } };
  }
  return JSON.stringify({
    type: event.type,
    timestamp: new Date(event.occurredAt).toISOString(),
    data,
  });
}

export function testPayload(endpointId: number, at: Date): string {
  return JSON.stringify({
    type: TEST_EVENT_TYPE,
    timestamp: at.toISOString(),
    data: { endpointId },
  });
}

/** The three signature headers for a message, signed with each secret (current first). */
export function signatureHeaders(
  messageId: string,
  at: Date,
  payload: string,
  secrets: readonly string[],
): Record<'webhook-id' | 'webhook-timestamp' | 'webhook-signature', string> {
  // The specification's timestamp is in whole seconds: sign what is sent.
  const seconds = new Date(Math.floor(at.getTime() / 1000) * 1000);
  return {
    'webhook-id': messageId,
    'webhook-timestamp': String(seconds.getTime() / 1000),
    'webhook-signature': secrets
      .map((secret) => new Webhook(secret).sign(messageId, seconds, payload))
      .join(' '),
  };
}
