/** Answers that may be a job (202 with a status URL): followed to the end, and shown in the Jobs view. */
import { problem, rawFetch } from './api';
import { trackJob } from './ui';

interface Envelope {
  statusCode?: number;
  message?: string;
  error?: string;
  data?: Record<string, unknown> & { jobId?: string; state?: string };
}

/** The final `data` of an answer: at once for a 200/201, after polling the job for a 202. */
export async function settle(res: Response, what: string): Promise<Record<string, unknown>> {
  let body = (await res.json()) as Envelope;
  if (res.status >= 400) throw new Error(problem(body, res));
  if (res.status !== 202) return body.data ?? {};
  const jobId = String(body.data?.jobId);
  trackJob({ jobId, what, state: String(body.data?.state ?? 'waiting') });
  for (let wait = 300; ; wait = Math.min(wait * 1.5, 3000)) {
    await new Promise((r) => setTimeout(r, wait));
    const next = await rawFetch(`/media/jobs/${encodeURIComponent(jobId)}`, { method: 'GET' });
    body = (await next.json()) as Envelope;
    if (next.status >= 400) {
      trackJob({ jobId, what, state: 'failed', detail: problem(body, next) });
      throw new Error(problem(body, next));
    }
    if (next.status === 200) {
      trackJob({ jobId, what, state: 'completed' });
      return body.data ?? {};
    }
    trackJob({ jobId, what, state: String(body.data?.state ?? 'active') });
  }
}
