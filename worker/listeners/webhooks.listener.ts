/**
 * Every domain event to the organization's webhook endpoints that take it:
 * one `webhook.deliver` job per endpoint, its id derived from the event and
 * the endpoint (a repeated delivery of the event queues nothing more). A
 * fan-out: the dispatcher hands it each claimed batch, and the messages'
 * first attempts are queued in one round trip (no `event.deliver` job
 * between the event and its webhooks).
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
  async fanOut(events, ctx) {
    const queued = await ctx.webhooks.enqueueEvents(events);
    if (queued > 0) ctx.log.debug({ events: events.length, messages: queued }, 'webhooks queued');
  },
};
