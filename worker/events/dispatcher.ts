/**
 * The dispatcher: moves recorded domain events on to their listeners, at
 * least once each, on its own schedule (every `intervalMs`), so events a
 * killed process left behind are dispatched without waiting for anything
 * else. Each tick:
 *
 * 1. records the events still pending in documents (a writer died before
 *    promoting them, or promoting failed) once they are older than `graceMs`
 *    (the writer's own promotion usually gets there first);
 * 2. records the events of jobs that ended since the last tick, from BullMQ's
 *    own record of them (./job-events.ts);
 * 3. claims undispatched events, oldest first, and queues one `event.deliver`
 *    job per listener that takes the event's type, its id derived from the
 *    event and the listener: a dispatcher that dies after queueing and before
 *    marking the event dispatched lets its claim lapse, and the next one's
 *    queueing of the same job is a no-op while the job exists. An event no
 *    listener takes is marked dispatched at once.
 *
 * Several dispatchers (one per worker process) share the work through their
 * claims.
 */
import { derivedUuid } from '@shared/jobs';
import type { DomainEvent } from '@shared/events/events';
import type { EventOutbox } from '@shared/events/outbox';
import type { Logger } from '@shared/logger';
import type { BullJobQueue } from '@shared/queue/job-queue';
import { listenersOf, type Listeners } from '../listeners/listener';
import type { JobEvents } from './job-events';

export interface DispatcherOptions {
  /** Between two ticks (default 250 ms). */
  intervalMs?: number;
  /** Age from which a document's pending events are the dispatcher's to record (default 2 s). */
  graceMs?: number;
  /** How long a claim lasts (default 30 s). */
  claimMs?: number;
  /** Events claimed at once (default 50). */
  batch?: number;
}

export class EventDispatcher {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();
  private stopped = false;
  private readonly intervalMs: number;
  private readonly graceMs: number;
  private readonly claimMs: number;
  private readonly batch: number;

  constructor(
    private readonly deps: {
      outbox: EventOutbox;
      queue: Pick<BullJobQueue, 'add'>;
      listeners: Listeners;
      jobEvents?: Pick<JobEvents, 'sweep'>;
      logger: Logger;
    },
    options: DispatcherOptions = {},
  ) {
    this.intervalMs = options.intervalMs ?? 250;
    this.graceMs = options.graceMs ?? 2_000;
    this.claimMs = options.claimMs ?? 30_000;
    this.batch = options.batch ?? 50;
  }

  start(): void {
    let lastWarning = 0;
    const loop = () => {
      if (this.stopped) return;
      this.running = this.tick()
        .then(() => undefined)
        .catch((err: unknown) => {
          // A dependency away (MongoDB, Redis): tried again every tick, said every 30 s.
          if (Date.now() - lastWarning < 30_000) return;
          lastWarning = Date.now();
          this.deps.logger.warn({ err }, 'event dispatch failed; retrying');
        })
        .finally(() => {
          if (!this.stopped) this.timer = setTimeout(loop, this.intervalMs).unref();
        });
    };
    loop();
  }

  /** Stops after the tick under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** One round: record what documents and jobs left pending, then dispatch. Answers how many it dispatched. */
  async tick(): Promise<number> {
    const before = new Date(Date.now() - this.graceMs);
    await this.deps.outbox.promoteMedia({ before });
    await this.deps.outbox.promoteFolders({ before });
    await this.deps.jobEvents?.sweep();
    let dispatched = 0;
    for (;;) {
      const events = await this.deps.outbox.claim(this.batch, this.claimMs);
      for (const event of events) {
        if (await this.dispatch(event)) dispatched++;
      }
      if (events.length < this.batch || this.stopped) return dispatched;
    }
  }

  private async dispatch(event: DomainEvent): Promise<boolean> {
    try {
      for (const listener of listenersOf(this.deps.listeners, event.type)) {
        await this.deps.queue.add(
          'event.deliver',
          {
            organizationId: event.organizationId,
            requestId: event.id,
            eventId: event.id,
            listener: listener.name,
          },
          deliveryUuid(event.id, listener.name),
          { uncapped: true },
        );
      }
      await this.deps.outbox.dispatched(event.id);
      return true;
    } catch (err) {
      this.deps.logger.warn({ err, eventId: event.id }, 'could not dispatch an event; retried');
      await this.deps.outbox.unclaim(event.id).catch(() => undefined);
      return false;
    }
  }
}

/** The uuid part of a delivery job's id: one per event and listener. */
export function deliveryUuid(eventId: string, listener: string): string {
  return derivedUuid(`event:${eventId}:${listener}`);
}
