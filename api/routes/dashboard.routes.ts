/**
 * The Bull dashboard (@bull-board/express) at /admin/queues, showing every
 * queue, behind operator credentials. Without credentials configured it is not
 * mounted at all (and main.ts says so in the log).
 */
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';
import { Router } from 'express';
import type { Queue } from 'bullmq';
import { operatorAuth } from '../middleware/operator-auth';

export const DASHBOARD_PATH = '/admin/queues';

export function dashboardRoutes(
  queues: Queue[],
  credentials: { user: string; password: string },
): Router {
  const serverAdapter = new ExpressAdapter();
  serverAdapter.setBasePath(DASHBOARD_PATH);
  createBullBoard({
    queues: queues.map((q) => new BullMQAdapter(q)),
    serverAdapter,
    options: { uiConfig: { boardTitle: 'Media queues' } },
  });
  const router = Router();
  router.use(DASHBOARD_PATH, operatorAuth(credentials), serverAdapter.getRouter() as Router);
  return router;
}
