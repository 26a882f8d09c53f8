/**
 * The Bull dashboard (@bull-board/express) at /admin/queues, showing every
 * queue, behind operator credentials. Without credentials configured it is not
 * mounted at all (and main.ts says so in the log).
 *
 * Read-only unless the operator turns writes on (DASHBOARD_WRITE=true): every
 * queue adapter is in bull-board's readOnlyMode (its UI hides the buttons and
 * its handlers answer 405), and, whatever a bull-board version's handlers do,
 * any request other than GET or HEAD under the dashboard is refused here
 * with 405 METHOD_NOT_ALLOWED before it reaches them (bull-board's API reads
 * with GET only; every action is a PUT, POST or PATCH).
 *
 * No other site may frame it (middleware/page-protection.ts), and the Basic
 * authentication locks an address out after too many failed logins
 * (middleware/operator-auth.ts).
 */
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';
import { Router, type RequestHandler } from 'express';
import type { Queue } from 'bullmq';
import { Errors } from '@shared/errors';
import { operatorAuth, type OperatorLockout } from '../middleware/operator-auth';
import { pageProtection } from '../middleware/page-protection';

export const DASHBOARD_PATH = '/admin/queues';

const readOnly: RequestHandler = (req, _res, next) => {
  if (req.method === 'GET' || req.method === 'HEAD') return next();
  next(Errors.methodNotAllowed('GET, HEAD'));
};

/** The dashboard's routes, relative to DASHBOARD_PATH, where app.ts mounts them. */
export function dashboardRoutes(
  queues: Queue[],
  options: { user: string; password: string; write: boolean },
  lockout?: OperatorLockout,
): Router {
  const serverAdapter = new ExpressAdapter();
  serverAdapter.setBasePath(DASHBOARD_PATH);
  createBullBoard({
    queues: queues.map((q) => new BullMQAdapter(q, { readOnlyMode: !options.write })),
    serverAdapter,
    options: {
      uiConfig: { boardTitle: options.write ? 'Media queues' : 'Media queues (read-only)' },
    },
  });
  const router = Router();
  router.use(
    pageProtection(),
    operatorAuth(options, lockout),
    ...(options.write ? [] : [readOnly]),
    serverAdapter.getRouter() as Router,
  );
  return router;
}
