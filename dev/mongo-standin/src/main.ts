// Runs the MongoDB stand-in on its own, like a `mongod`:
//
//   npm run --silent mongo-standin -- [--port <p>] [--host <h>] [--data-dir <dir>]
//
// With --data-dir the collections are kept on disk there (persistence.ts) and
// loaded back at the next start; without it they live in memory only.
// The first line on stdout is the URI (`mongodb://127.0.0.1:27017`), nothing
// before it; logs go to stderr. Serves until SIGINT or SIGTERM (or, when its
// parent started it with an IPC channel, until that channel closes).

import { pino } from 'pino';

import { startMongoStandin } from './server';

const USAGE =
  'usage: mongo-standin [--port <port>] [--host <host>] [--data-dir <dir>]   (defaults: 27017, 127.0.0.1, in memory)';

interface CliOptions {
  port: number;
  host: string;
  dataDir?: string;
}

function fail(message: string): never {
  process.stderr.write(`mongo-standin: ${message}\n${USAGE}\n`);
  process.exit(2);
}

function parseArgs(argv: readonly string[]): CliOptions {
  const options: CliOptions = { port: 27017, host: '127.0.0.1' };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const [flag, inline] = arg.includes('=')
      ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)]
      : [arg, undefined];
    const value = (): string => {
      const next = inline ?? argv[++i];
      if (next === undefined || next === '') fail(`${flag} needs a value`);
      return next;
    };
    switch (flag) {
      case '--port': {
        const text = value();
        const port = Number(text);
        if (!/^\d+$/.test(text) || port > 65535) fail(`invalid port '${text}'`);
        options.port = port;
        break;
      }
      case '--host':
        options.host = value();
        break;
      case '--data-dir':
        options.dataDir = value();
        break;
      case '--help':
      case '-h':
        process.stdout.write(`${USAGE}\n`);
        process.exit(0);
        break;
      default:
        fail(`unknown argument '${arg}'`);
    }
  }
  return options;
}

async function main(): Promise<void> {
  const options = parseArgs(process.argv.slice(2));
  const logger = pino(
    { name: 'mongo-standin', level: process.env.LOG_LEVEL ?? 'info' },
    pino.destination(2),
  );
  const standin = await startMongoStandin({ ...options, logger });
  process.stdout.write(`${standin.uri}\n`);

  let stopping = false;
  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'mongo stand-in: shutting down');
    standin.close().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, 'mongo stand-in: shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  // Started by another process with an IPC channel (the benchmarks): stop when it goes away,
  // even if it died without stopping us.
  if (process.connected) process.on('disconnect', () => stop('SIGTERM'));
}

main().catch((error: unknown) => {
  process.stderr.write(
    `mongo-standin: ${error instanceof Error ? error.message : String(error)}\n`,
  );
  process.exit(1);
});
