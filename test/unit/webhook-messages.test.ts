/**
 * Webhook messages (shared/webhooks/messages.ts) as the Standard Webhooks
 * specification has them, checked with the `standardwebhooks` package a
 * receiver would use: one signature per secret that signs (two during a
 * rotation's overlap, either verifies), a stable message id per event and
 * endpoint, the thin payload, secrets of the documented form.
 */
import { Webhook } from 'standardwebhooks';
import type { DomainEvent } from '@shared/events/events';
import {
  attemptUuid,
  eventPayload,
  messageIdOf,
  newSecret,
  signatureHeaders,
} from '@shared/webhooks/messages';

const event: DomainEvent<'job.completed'> = {
  id: 'job.completed:image-1',
  type: 'job.completed',
  organizationId: 7,
  occurredAt: new Date('2026-01-01T00:00:00.000Z'),
  data: { job: { id: 'image-1', name: 'image.convert', status: 'completed', mediaId: 42 } },
};

describe('webhook messages', () => {
  it('makes secrets of the documented form, each its own', () => {
    const a = newSecret();
    expect(a).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(newSecret()).not.toBe(a);
  });

  it('derives one message id per event and endpoint, and one job per attempt', () => {
    expect(messageIdOf(event.id, 3)).toBe(messageIdOf(event.id, 3));
    expect(messageIdOf(event.id, 3)).not.toBe(messageIdOf(event.id, 4));
    expect(messageIdOf(event.id, 3)).toMatch(/^msg_[0-9a-f]{32}$/);
    const p = { messageId: 'msg_x', run: 'event', attempt: 1, waits: 0 };
    expect(attemptUuid(p)).toBe(attemptUuid({ ...p }));
    expect(attemptUuid({ ...p, attempt: 2 })).not.toBe(attemptUuid(p));
    expect(attemptUuid({ ...p, run: 'replay-1' })).not.toBe(attemptUuid(p));
  });

  it('sends the thin payload {type, timestamp, data}', () => {
    expect(JSON.parse(eventPayload(event))).toEqual({
      type: 'job.completed',
      timestamp: '2026-01-01T00:00:00.000Z',
      data: { job: { id: 'image-1', name: 'image.convert', status: 'completed', mediaId: 42 } },
    });
  });

  it("answers a file in no folder with the organization's root folder id", () => {
    const mediaOf = (body: string) =>
      (JSON.parse(body) as { data: { media: Record<string, unknown> } }).data.media;
    const created = {
      ...event,
      type: 'media.created',
      data: { media: { id: 7, folderId: null, key: 'acme/a-x.png' } },
    } as unknown as DomainEvent;
    expect(mediaOf(eventPayload(created, 99))).toEqual({
      id: 7,
      folderId: 99,
      key: 'acme/a-x.png',
    });
    const inFolder = { ...created, data: { media: { id: 8, folderId: 5 } } } as DomainEvent;
    expect(mediaOf(eventPayload(inFolder, 99)).folderId).toBe(5);
  });

  it('signs with every secret that signs: each verifies, a stranger does not', () => {
    const [current, previous, stranger] = [newSecret(), newSecret(), newSecret()];
    const body = eventPayload(event);
    const at = new Date();
    const headers = signatureHeaders('msg_abc', at, body, [current, previous]);
    expect(headers['webhook-id']).toBe('msg_abc');
    expect(headers['webhook-timestamp']).toBe(String(Math.floor(at.getTime() / 1000)));
    const signatures = headers['webhook-signature'].split(' ');
    expect(signatures).toHaveLength(2);
    for (const s of signatures) expect(s).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    expect(new Webhook(current).verify(body, headers)).toEqual(JSON.parse(body));
    expect(new Webhook(previous).verify(body, headers)).toEqual(JSON.parse(body));
    expect(() => new Webhook(stranger).verify(body, headers)).toThrow();
    // A body changed in transit does not verify.
    expect(() => new Webhook(current).verify(body.replace('42', '43'), headers)).toThrow();
  });
});
