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
 * 3. claims undispatched events, a batch at a time (`batch`, oldest first,
 *    three statements however many), hands the batch to each fan-out
 *    listener at once (the webhooks' messages queued in one round trip:
 *    ../listeners/listener.ts `fanOut`), and queues one `event.deliver` job
 *    per other listener that takes an event's type, its id derived from the
 *    event and the listener, the batch's events side by side; then marks the
 *    batch dispatched in one statement. A dispatcher that dies after queueing
 *    and before marking lets its claim lapse, and the next one's queueing of
 *    the same jobs is a no-op while they exist. An event no listener takes
 *    is marked dispatched at once; one whose queueing failed is given back.
 *
 * Several dispatchers (one per worker process) share the work through their
 * claims.
 */
import { derivedUuid } from '@shared/jobs';
import type { DomainEvent } from '@shared/events/events';
import type { EventOutbox } from '@shared/events/outbox';
import type { Logger } from '@shared/logger';
import type { BullJobQueue } from '@shared/queue/job-queue';
import type { JobContext } from '../context';
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
      /** What fan-out listeners are given (without it, each gets `event.deliver` jobs like the others). */
      context?: Omit<JobContext, 'listeners'>;
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
      const done = events.length > 0 ? await this.dispatch(events) : 0;
      dispatched += done;
      // A batch not all dispatched (a dependency away) waits for the next tick.
      if (events.length < this.batch || done < events.length || this.stopped) return dispatched;
    }
  }

  /** A claimed batch to its listeners; answers how many events were marked dispatched. */
  private async dispatch(events: DomainEvent[]): Promise<number> {
    const { listeners, context, logger } = this.deps;
    const failed = new Set<string>();
    const giveBack = (err: unknown, ids: string[]) => {
      logger.warn({ err, eventIds: ids }, 'could not dispatch events; retried');
      for (const id of ids) failed.add(id);
    };
    // Fan-outs: each takes the batch's events of its types, at once.
    const fanOuts = context ? [...listeners.values()].filter((l) => l.fanOut !== undefined) : [];
    await Promise.all(
      fanOuts.map(async (listener) => {
        const mine = events.filter((e) => listener.events.includes(e.type));
        if (mine.length === 0) return;
        try {
          await listener.fanOut!(mine, { ...context!, log: logger });
        } catch (err) {
          giveBack(
            err,
            mine.map((e) => e.id),
          );
        }
      }),
    );
    // The others: one `event.deliver` job per event and listener, the events side by side.
    await Promise.all(
      events.map(async (event) => {
        try {
          for (const listener of listenersOf(listeners, event.type)) {
            if (fanOuts.includes(listener)) continue;
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
        } catch (err) {
          giveBack(err, [event.id]);
        }
      }),
    );
    const done = events.filter((e) => !failed.has(e.id)).map((e) => e.id);
    // Marking fails (MongoDB away): the claims lapse and the next claim queues the same ids again.
    await this.deps.outbox.dispatched(done);
    if (failed.size > 0) await this.deps.outbox.unclaim([...failed]).catch(() => undefined);
    return done.length;
  }
}

/** The uuid part of a delivery job's id: one per event and listener. */
export function deliveryUuid(eventId: string, listener: string): string {
  return derivedUuid(`event:${eventId}:${listener}`);
}
