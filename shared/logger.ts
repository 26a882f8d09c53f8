/**
 * The one pino root logger. Everything else logs through `logger.child(...)`
 * with a request id or job id bound. Credentials never reach the log.
 */
import pino, { type Logger } from 'pino';
import type { Config } from './config';

export type { Logger };

/** Paths pino blanks out wherever they occur in a log line. */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'authorization',
  '*.authorization',
  'token',
  '*.token',
  'password',
  '*.password',
  'secretKey',
  '*.secretKey',
];

export function createLogger(
  options: { level?: Config['logLevel']; name?: string } = {},
  destination?: pino.DestinationStream,
): Logger {
  return pino(
    {
      level: options.level ?? 'info',
      base: { service: options.name ?? 'media', pid: process.pid },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      serializers: { err: pino.stdSerializers.err, error: pino.stdSerializers.err },
    },
    destination,
  );
}
