/**
 * Graceful shutdown: on SIGTERM or SIGINT run the registered steps in order
 * (stop accepting, finish in-flight work, close connections), bounded by a
 * timeout after which the process exits anyway. A second signal exits at once.
 */
import type { Server, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from './logger';

export type ShutdownStep = { name: string; run: () => Promise<void> };

export function onShutdown(
  logger: Logger,
  timeoutMs: number,
  steps: () => ShutdownStep[],
  exit: (code: number) => void = (code) => process.exit(code),
): () => Promise<void> {
  let shuttingDown: Promise<void> | undefined;
  const shutdown = (signal: string): Promise<void> => {
    if (shuttingDown) {
      logger.warn({ signal }, 'second signal: exiting now');
      exit(1);
      return shuttingDown;
    }
    logger.info({ signal, timeoutMs }, 'shutting down');
    const timer = setTimeout(() => {
      logger.error({ timeoutMs }, 'shutdown timed out; exiting');
      exit(1);
    }, timeoutMs);
    timer.unref();
    shuttingDown = (async () => {
      let code = 0;
      for (const step of steps()) {
        try {
          await step.run();
          logger.debug({ step: step.name }, 'shutdown step done');
        } catch (err) {
          code = 1;
          logger.error({ err, step: step.name }, 'shutdown step failed');
        }
      }
      clearTimeout(timer);
      logger.info('shutdown complete');
      exit(code);
    })();
    return shuttingDown;
  };
  process.once('SIGTERM', () => void shutdown('SIGTERM'));
  process.once('SIGINT', () => void shutdown('SIGINT'));
  return () => shutdown('manual');
}

/**
 * How a shutdown budget (SHUTDOWN_TIMEOUT_MS) is shared by an HTTP server's
 * phases: most of it to let requests finish, a fifth (at most 5 s) to abort
 * the stragglers and let them clean up, a tenth (at most 2 s) kept for closing
 * connections to the services afterwards.
 */
export function httpShutdownBudget(timeoutMs: number): { drainMs: number; abortMs: number } {
  const clamp = (n: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, Math.round(n)));
  const abortMs = clamp(timeoutMs * 0.2, 50, 5_000);
  const reserveMs = clamp(timeoutMs * 0.1, 25, 2_000);
  return { drainMs: Math.max(0, timeoutMs - abortMs - reserveMs), abortMs };
}

/**
 * What an HTTP server does on shutdown, in two phases within one budget:
 *
 * 1. drain (until `drainMs`): stop listening (new connections are refused),
 *    close idle keep-alive connections, answer the requests in flight with
 *    `Connection: close`, and wait for them to finish;
 * 2. abort (until `drainMs + abortMs`): requests still running then (an upload
 *    still streaming, say) have their connections destroyed; their handlers
 *    clean up as for a client that went away (an open multipart upload is
 *    aborted, nothing is recorded), and this waits for them to end their
 *    responses.
 *
 * Resolves with how many requests were aborted. Requests are tracked from the
 * moment this is called, so call it before the server takes any.
 */
export function gracefulHttpServer(
  server: Server,
  logger: Logger,
): { close(options: { drainMs: number; abortMs: number }): Promise<{ aborted: number }> } {
  const inFlight = new Set<ServerResponse>();
  let closing = false;
  server.on('request', (_req, res: ServerResponse) => {
    inFlight.add(res);
    if (closing && !res.headersSent) res.setHeader('Connection', 'close');
    res.once('finish', () => inFlight.delete(res));
  });
  // A request whose handler has ended its response (even on a destroyed socket) is done.
  const settled = () => {
    for (const res of inFlight) if (res.writableEnded) inFlight.delete(res);
    return inFlight.size === 0;
  };

  return {
    async close({ drainMs, abortMs }) {
      closing = true;
      for (const res of inFlight) if (!res.headersSent) res.setHeader('Connection', 'close');
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const drained = await Promise.race([
        closed.then(() => true),
        sleep(Math.max(0, drainMs), false, { ref: false }),
      ]);
      let aborted = 0;
      if (!drained) {
        settled();
        aborted = inFlight.size;
        logger.warn(
          { requests: aborted, drainMs },
          'requests still running at the shutdown deadline: aborting them',
        );
        server.closeAllConnections();
      }
      // Handlers of aborted requests (or of clients that went away) may still be cleaning up.
      const deadline = Date.now() + abortMs;
      while (!settled() && Date.now() < deadline) await sleep(20);
      if (!settled()) {
        logger.warn({ requests: inFlight.size }, 'requests did not end within the shutdown budget');
      }
      if (!drained) await Promise.race([closed, sleep(Math.max(0, deadline - Date.now()))]);
      return { aborted };
    },
  };
}

/**
 * Last-resort handlers: an uncaught exception leaves the process in an unknown
 * state, so it is logged and the process exits (the orchestrator restarts it);
 * an unhandled rejection is a bug to fix but not a reason to drop every
 * in-flight request, so it is logged loudly and the process goes on.
 */
export function installCrashHandlers(logger: Logger): void {
  process.on('uncaughtException', (err) => {
    logger.fatal({ err }, 'uncaught exception; exiting');
    process.exit(1);
  });
  process.on('unhandledRejection', (reason) => {
    logger.error({ err: reason }, 'unhandled promise rejection');
  });
}
