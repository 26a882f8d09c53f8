/**
 * Graceful shutdown: on SIGTERM or SIGINT run the registered steps in order
 * (stop accepting, finish in-flight work, close connections), bounded by a
 * timeout after which the process exits anyway. A second signal exits at once.
 */
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
