/**
 * The MongoDB connection (mongoose). One dedicated connection per process,
 * created with `createConnection` so models are bound to it explicitly and a
 * test can hold several side by side.
 */
import mongoose, { type Connection } from 'mongoose';
import type { Logger } from '../logger';

export interface MongoOptions {
  /** How long to wait for a reachable server before an operation fails. */
  serverSelectionTimeoutMS?: number;
  /** Build declared indexes at start (on by default; unique indexes depend on it). */
  autoIndex?: boolean;
}

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
  });
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
