/**
 * event.deliver: hands one recorded domain event to one listener
 * (worker/listeners/). Queued once per event and listener by the dispatcher;
 * a failure is retried like any job's, so a listener may see an event more
 * than once and drops duplicates by the event's id. An event expired from
 * the outbox, or a listener no longer registered, is nothing to do.
 */
import type { Processor } from '../registry';

export const eventDeliverProcessor: Processor<'event.deliver'> = {
  name: 'event.deliver',
  async process(job, ctx) {
    const { eventId, listener: name } = job.data;
    const listener = ctx.listeners.get(name);
    const event = listener ? await ctx.events.get(eventId) : null;
    if (!listener || !event) {
      job.log.warn({ eventId, listener: name }, 'event or listener gone: nothing delivered');
      return { delivered: false };
    }
    await listener.handle(event, { ...ctx, log: job.log, signal: job.signal });
    return { delivered: true };
  },
};
