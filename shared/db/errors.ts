/**
 * Translates MongoDB driver failures into the service's errors: anything that
 * means "the database cannot be reached right now" becomes a 503
 * (`Errors.unavailable('MongoDB')`); everything else passes through.
 */
import { Errors, isAppError } from '../errors';

const UNAVAILABLE = new Set([
  'MongoNetworkError',
  'MongoNetworkTimeoutError',
  'MongoServerSelectionError',
  'MongooseServerSelectionError',
  'MongoNotConnectedError',
  'MongoTopologyClosedError',
  'MongoPoolClosedError',
  'PoolClosedError',
  'PoolClearedError',
  'MongoPoolClearedError',
]);

export function isMongoUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (UNAVAILABLE.has(err.name)) return true;
  // mongoose with bufferCommands off, while disconnected
  return (
    err.name === 'MongooseError' && /buffering|not connected|initial connection/i.test(err.message)
  );
}

export function isDuplicateKey(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === 11000;
}

/** Runs a database call, turning connectivity failures into a 503 AppError. */
export async function db<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (!isAppError(err) && isMongoUnavailable(err)) throw Errors.unavailable('MongoDB', err);
    throw err;
  }
}
