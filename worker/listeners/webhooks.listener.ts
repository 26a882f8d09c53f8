/**
 * Every domain event to the organization's webhook endpoints that take it:
 * one `webhook.deliver` job per endpoint, its id derived from the event and
 * the endpoint (a repeated delivery of the event queues nothing more).
 */
import { EVENT_TYPES } from '@shared/events/events';
import type { Listener } from './listener';

export const webhooksListener: Listener = {
  name: 'webhooks',
  events: EVENT_TYPES,
  async handle(event, ctx) {
    const queued = await ctx.webhooks.enqueueEvent(event);
    if (queued > 0) ctx.log.debug({ eventId: event.id, endpoints: queued }, 'webhooks queued');
  },
};
