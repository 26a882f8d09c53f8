import { Redis } from 'ioredis';
import { MongoClient } from 'mongodb';

// Runs in every integration test worker before the test file.
process.env.NODE_ENV = 'test';
process.env.LOG_LEVEL ??= 'silent';

// Every Redis and MongoDB client a test file makes is recorded with where it was
// made, so environment.ts can name the file that leaves one open.
{
  const clients = new Map<object, { kind: string; stack: string; isOpen(): boolean }>();
  (globalThis as Record<string, unknown>).__MEDIA_TEST_OPEN_CLIENTS__ = clients;
  const record = (client: object, kind: string, isOpen: () => boolean) => {
    if (clients.has(client)) return;
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 50;
    const stack = new Error().stack ?? '';
    Error.stackTraceLimit = limit;
    clients.set(client, { kind, stack, isOpen });
  };
  const redisConnect = Redis.prototype.connect;
  Redis.prototype.connect = function (this: InstanceType<typeof Redis>, ...args) {
    // Closed once it ends, or from the moment disconnect() or quit() was asked.
    const self = this as unknown as { status: string; manuallyClosing?: boolean };
    record(this, 'Redis', () => self.status !== 'end' && !self.manuallyClosing);
    return redisConnect.apply(this, args);
  };
  const mongoConnect = MongoClient.prototype.connect;
  MongoClient.prototype.connect = function (this: InstanceType<typeof MongoClient>) {
    record(
      this,
      'MongoDB',
      () => (this as unknown as { topology?: unknown }).topology !== undefined,
    );
    return mongoConnect.apply(this);
  };
}
