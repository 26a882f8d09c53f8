/**
 * The MongoDB connection (mongoose). One dedicated connection per process,
 * created with `createConnection` so models are bound to it explicitly and a
 * test can hold several side by side.
 */
import mongoose, { type Connection } from 'mongoose';
import type { Logger } from '../logger';
import type { DependencyMetrics } from '../metrics';
import { setPoolChecks } from './pool-checks';

export interface MongoOptions {
  /** How long to wait for a reachable server before an operation fails. */
  serverSelectionTimeoutMS?: number;
  /** Build declared indexes at start (on by default; unique indexes depend on it). */
  autoIndex?: boolean;
  /**
   * Times every command (the driver's command monitoring) for the dependency
   * metrics, by command name; a failed command counts as an error, except a
   * duplicate key (code 11000), which is an answer the repositories expect.
   */
  metrics?: DependencyMetrics;
}

const DUPLICATE_KEY = 11000;

export async function connectMongo(
  uri: string,
  logger: Logger,
  options: MongoOptions = {},
): Promise<Connection> {
  const connection = mongoose.createConnection(uri, {
    serverSelectionTimeoutMS: options.serverSelectionTimeoutMS ?? 5_000,
    autoIndex: options.autoIndex ?? true,
    // Fail fast instead of queueing operations while disconnected: a request
    // should get a 503, not hang.
    bufferCommands: false,
    monitorCommands: options.metrics !== undefined,
  });
  const { metrics } = options;
  if (metrics) {
    const client = connection.getClient();
    client.on('commandSucceeded', (e) =>
      metrics.observeDependency('mongodb', e.commandName, e.duration / 1000, true),
    );
    client.on('commandFailed', (e) => {
      const code = (e.failure as { code?: unknown } | undefined)?.code;
      metrics.observeDependency(
        'mongodb',
        e.commandName,
        e.duration / 1000,
        code === DUPLICATE_KEY,
      );
    });
  }
  const log = logger.child({ component: 'mongodb' });
  // 'disconnecting' only precedes a close() of our own: that one is no news.
  let closing = false;
  connection.on('disconnecting', () => (closing = true));
  connection.on('disconnected', () =>
    closing ? log.debug('MongoDB connection closed') : log.warn('MongoDB disconnected'),
  );
  connection.on('reconnected', () => log.info('MongoDB reconnected'));
  connection.on('error', (err: unknown) => log.error({ err }, 'MongoDB connection error'));
  await connection.asPromise();
  // The pools' upkeep every 10 s instead of every 100 ms (shared/db/pool-checks.ts).
  if (!setPoolChecks(connection.getClient())) {
    log.debug('the driver’s connection pools were not found: their upkeep stays at 100 ms');
  }
  log.info(
    { host: connection.host, port: connection.port, db: connection.name },
    'MongoDB connected',
  );
  return connection;
}

/** Sends `ping` on the connection (readiness probes); rejects when MongoDB does not answer. */
export async function pingMongo(connection: Connection): Promise<void> {
  if (!connection.db) throw new Error('not connected');
  await connection.db.command({ ping: 1 });
}
