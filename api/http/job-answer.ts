/** Sends a job's answer: its finished result, or 202 with where to ask (and how far it has come). */
import type { Response } from 'express';
import { success } from './respond';
import type { JobAnswer } from '../services/jobs.service';

export function respondToJob(res: Response, answer: JobAnswer, finishedStatus?: 200 | 201): void {
  if (answer.kind === 'done') {
    success(res, answer.data, finishedStatus ?? (answer.creates ? 201 : 200));
    return;
  }
  res.setHeader('Location', answer.statusUrl);
  res.status(202).json({
    statusCode: 202,
    message: 'Accepted',
    data: {
      jobId: answer.jobId,
      state: answer.state,
      statusUrl: answer.statusUrl,
      ...(answer.progress ? { progress: answer.progress } : {}),
    },
  });
}
