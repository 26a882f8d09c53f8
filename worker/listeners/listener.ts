/**
 * A listener: what the service does when a domain event happens (a webhook
 * sent, a placeholder made, a file scanned). Each runs as a job of its own
 * per event (`event.deliver`), or, for a fan-out (`fanOut`: it only queues
 * jobs), in the dispatcher itself; queued once per event by the dispatcher
 * (worker/events/dispatcher.ts), retried like any job; it receives the
 * event with its stable id, so it can drop a duplicate. Listeners are
 * registered in one place (./index.ts), like processors, and checked at
 * boot: unique names, known event types.
 */
import type { DomainEvent, EventType } from '@shared/events/events';
import { EVENT_TYPES } from '@shared/events/events';
import type { Config } from '@shared/config';
import type { Logger } from '@shared/logger';
import type { JobContext } from '../context';

export interface Listener {
  /** Stable: it names the listener's deliveries (changing it re-delivers nothing). */
  name: string;
  /** The event types it takes. */
  events: readonly EventType[];
  /** Whether it listens under this configuration (default: always); one that does not gets no deliveries. */
  enabled?: (config: Config) => boolean;
  handle(event: DomainEvent, ctx: ListenerContext): Promise<void>;
  /**
   * A fan-out: what a listener does when its work is only to queue jobs
   * whose ids derive from the event (so queueing twice is harmless). When
   * set, the dispatcher calls it with each claimed batch (the events of the
   * listener's types), in its own process, and queues no `event.deliver`
   * job for the listener: one hop less between an event and its effect. It
   * throws when it could not queue everything; the batch's events are then
   * given back and dispatched again. `handle` still takes a delivery queued
   * before (by an older version).
   */
  fanOut?(events: DomainEvent[], ctx: FanOutContext): Promise<void>;
}

export type ListenerContext = Omit<JobContext, 'listeners'> & { log: Logger; signal: AbortSignal };
/** What a fan-out is given: the worker's context, without a job's signal. */
export type FanOutContext = Omit<JobContext, 'listeners'> & { log: Logger };

export type Listeners = ReadonlyMap<string, Listener>;

export class ListenerRegistryError extends Error {
  override readonly name = 'ListenerRegistryError';
}

export function buildListeners(listeners: readonly Listener[]): Listeners {
  const registry = new Map<string, Listener>();
  const problems: string[] = [];
  for (const l of listeners) {
    if (!/^[a-z][a-z0-9.-]{0,63}$/.test(l.name)) {
      problems.push(`listener name "${l.name}" is not lower-case letters, digits, dots and dashes`);
    } else if (registry.has(l.name)) problems.push(`two listeners are named "${l.name}"`);
    else registry.set(l.name, l);
    for (const type of l.events) {
      if (!(EVENT_TYPES as readonly string[]).includes(type)) {
        problems.push(`listener "${l.name}" takes unknown event "${type}"`);
      }
    }
  }
  if (problems.length) {
    throw new ListenerRegistryError(`Listener registry is invalid: ${problems.join('; ')}`);
  }
  return registry;
}

/** The listeners that take an event type. */
export function listenersOf(listeners: Listeners, type: EventType): Listener[] {
  return [...listeners.values()].filter((l) => l.events.includes(type));
}
