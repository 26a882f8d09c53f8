/**
 * webhook.deliver: one attempt to deliver a webhook message to its endpoint
 * (worker/services/webhook-deliveries.service.ts). A failed attempt is not a
 * failed job: the service logs it and queues the next attempt on the
 * message's schedule; the job fails (and BullMQ retries it) only when the
 * service's own dependencies fail (MongoDB, Redis).
 */
import type { Processor } from '../registry';

export const webhookDeliverProcessor: Processor<'webhook.deliver', 'webhooks'> = {
  name: 'webhook.deliver',
  process(job, ctx) {
    return ctx.webhooks.attempt(job.data, job.signal, job.log);
  },
};
