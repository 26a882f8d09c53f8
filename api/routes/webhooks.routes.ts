/**
 * Webhook endpoints (scope `webhooks`): POST /media/webhooks {url, events,
 * description?, enabled?} (201, with the signing secret, shown this once),
 * GET /media/webhooks, GET/PATCH/DELETE /media/webhooks/{id},
 * GET /media/webhooks/{id}/deliveries (the delivery log, newest first),
 * POST /media/webhooks/{id}/replay {messageId} or {since},
 * POST /media/webhooks/{id}/rotate (a new secret; the old one signs during
 * the overlap), POST /media/webhooks/{id}/test (a `webhook.test` message).
 */
import { Router } from 'express';
import { z } from 'zod';
import { EVENT_TYPES } from '@shared/events/events';
import { success } from '../http/respond';
import type { WebhooksService } from '../services/webhooks.service';
import { jsonBody, RouteTable, type RouteGuards } from './route-table';

const ID_MESSAGE = 'the webhook endpoint id must be a positive integer';

const idParams = z
  .object({ id: z.string() })
  .transform(({ id }) => Number(id))
  .pipe(z.number({ error: ID_MESSAGE }).int(ID_MESSAGE).positive(ID_MESSAGE))
  .transform((id) => ({ id }));

const url = z
  .string({ error: 'url is required' })
  .min(1, 'url is required')
  .max(2_048, 'url is at most 2048 characters');
const events = z
  .array(z.enum(EVENT_TYPES, { error: `each event is one of ${EVENT_TYPES.join(', ')}` }), {
    error: 'events is a list of event types',
  })
  .min(1, 'events lists at least one event type');
const description = z.string().max(500, 'description is at most 500 characters');
const enabled = z.boolean({ error: 'enabled is true or false' });

const createBody = jsonBody(
  z
    .object({ url, events, description: description.optional(), enabled: enabled.optional() })
    .strict(),
  { limit: '16kb' },
);

const updateBody = jsonBody(
  z
    .object({ url, events, description, enabled })
    .partial()
    .strict()
    .refine((b) => Object.keys(b).length > 0, { message: 'nothing to change' }),
  { limit: '16kb' },
);

const replayBody = jsonBody(
  z.union(
    [
      z.object({ messageId: z.string().min(1).max(100) }).strict(),
      z.object({ since: z.iso.datetime({ offset: true }) }).strict(),
    ],
    { error: 'give messageId (one message) or since (an ISO date: every failed message since)' },
  ),
  { limit: '4kb' },
);

const deliveriesQuery = z
  .object({
    limit: z.coerce
      .number({ error: 'limit must be an integer from 1 to 100' })
      .int('limit must be an integer from 1 to 100')
      .min(1, 'limit must be an integer from 1 to 100')
      .max(100, 'limit must be an integer from 1 to 100'),
    before: z.iso.datetime({ offset: true, error: 'before must be an ISO date' }),
    messageId: z.string().max(100),
  })
  .partial();

export function webhookRoutes(deps: { webhooks: WebhooksService; guards: RouteGuards }): Router {
  const routes = new RouteTable(Router(), deps.guards);
  const { webhooks } = deps;

  routes.post(
    '/media/webhooks',
    { scope: 'webhooks', cost: 2, body: createBody },
    async ({ caller, body }, res) => {
      success(res, await webhooks.create(caller, body), 201);
    },
  );

  routes.get('/media/webhooks', { scope: 'webhooks' }, async ({ caller }, res) => {
    success(res, { webhooks: await webhooks.list(caller) });
  });

  routes.get(
    '/media/webhooks/:id',
    { scope: 'webhooks', params: idParams },
    async ({ caller, params }, res) => {
      success(res, await webhooks.get(caller, params.id));
    },
  );

  routes.patch(
    '/media/webhooks/:id',
    { scope: 'webhooks', cost: 2, body: updateBody, params: idParams },
    async ({ caller, body, params }, res) => {
      success(res, await webhooks.update(caller, params.id, body));
    },
  );

  routes.delete(
    '/media/webhooks/:id',
    { scope: 'webhooks', cost: 2, params: idParams },
    async ({ caller, params }, res) => {
      success(res, await webhooks.remove(caller, params.id));
    },
  );

  routes.get(
    '/media/webhooks/:id/deliveries',
    { scope: 'webhooks', params: idParams, query: deliveriesQuery },
    async ({ caller, params, query }, res) => {
      const deliveries = await webhooks.deliveries(caller, params.id, {
        limit: query.limit ?? 50,
        before: query.before ? new Date(query.before) : undefined,
        messageId: query.messageId,
      });
      success(res, { deliveries });
    },
  );

  routes.post(
    '/media/webhooks/:id/replay',
    { scope: 'webhooks', cost: 5, body: replayBody, params: idParams },
    async ({ caller, body, params }, res) => {
      const which = 'messageId' in body ? body : { since: new Date(body.since) };
      success(res, await webhooks.replay(caller, params.id, which));
    },
  );

  routes.post(
    '/media/webhooks/:id/rotate',
    { scope: 'webhooks', cost: 2, params: idParams },
    async ({ caller, params }, res) => {
      success(res, await webhooks.rotate(caller, params.id));
    },
  );

  routes.post(
    '/media/webhooks/:id/test',
    { scope: 'webhooks', cost: 2, params: idParams },
    async ({ caller, params }, res) => {
      success(res, await webhooks.test(caller, params.id));
    },
  );

  return routes.router;
}
