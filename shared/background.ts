/**
 * Work a process does off a request's or a job's answer (a merge's uploaded
 * inputs removed once its result is recorded, say): started at once, its
 * failure logged, never awaited by the answer, and awaited by the process's
 * graceful shutdown, so a stop does not cut it off and leave an orphan.
 */
import type { Logger } from './logger';

export class BackgroundTasks {
  private readonly running = new Set<Promise<void>>();

  constructor(private readonly logger: Logger) {}

  /** Runs `task` off the answer's path; `what` names it in the log if it fails. */
  run(what: string, task: () => Promise<unknown>, context: Record<string, unknown> = {}): void {
    const done: Promise<void> = task()
      .then(() => undefined)
      .catch((err: unknown) => this.logger.warn({ err, ...context }, `could not ${what}`))
      .finally(() => this.running.delete(done));
    this.running.add(done);
  }

  /** Waits for every task started so far (and those they start meanwhile). */
  async drain(): Promise<void> {
    while (this.running.size > 0) await Promise.all(this.running);
  }
}
