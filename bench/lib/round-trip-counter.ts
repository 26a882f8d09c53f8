/**
 * Counts a process's MongoDB commands (the driver's command monitoring on a
 * mongoose connection) and Redis commands (every ioredis client of the process,
 * by wrapping `Redis.prototype.sendCommand`), for the round-trip benchmark.
 * A Redis pipeline or MULTI sends several commands in one round trip; each
 * still counts here, so the Redis figure is an upper bound on round trips.
 */
import { Redis } from 'ioredis';
import type { Connection } from 'mongoose';

export interface Counts {
  mongodb: number;
  redis: number;
  /** Per command name, for the curious. */
  byName: Record<string, number>;
}

export class RoundTripCounter {
  private counts: Counts = { mongodb: 0, redis: 0, byName: {} };

  constructor() {
    const original = Redis.prototype.sendCommand;
    const count = (name: string) => this.count('redis', name);
    Redis.prototype.sendCommand = function (this: Redis, ...args) {
      const command = args[0] as { name?: string } | undefined;
      count(command?.name ?? '?');
      return original.apply(this, args);
    };
  }

  /** Counts the commands sent on `connection` (opened with `monitorCommands: true`). */
  watch(connection: Connection): void {
    connection.getClient().on('commandStarted', (e) => this.count('mongodb', e.commandName));
  }

  private count(kind: 'mongodb' | 'redis', name: string): void {
    this.counts[kind]++;
    const key = `${kind}.${name}`;
    this.counts.byName[key] = (this.counts.byName[key] ?? 0) + 1;
  }

  /** What was counted since the last call. */
  take(): Counts {
    const taken = this.counts;
    this.counts = { mongodb: 0, redis: 0, byName: {} };
    return taken;
  }
}
