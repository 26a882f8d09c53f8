/**
 * The worker transport: one BullMQ Worker per queue this process takes
 * (WORKER_QUEUES), each with its own concurrency (WORKER_CONCURRENCY), every
 * job dispatched to its processor from the registry.
 *
 * Failures are told apart on purpose: a refusal (a 4xx AppError: bad input,
 * a missing record) fails at once with UnrecoverableError; anything else is
 * retried with backoff (JOB_OPTIONS). Either way the error travels encoded so
 * the API answers with the right status. When a job has failed for good, the
 * temporary inputs it owned are removed before the failure is reported.
 * Each worker also sweeps stored job results past their expiry; those taking
 * the maintenance queue schedule the trash's purge (media.purge-trash) and the
 * resumable uploads' cleanup (media.expire-resumable).
 */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { UnrecoverableError, Worker, type Job } from 'bullmq';
import { Errors, isAppError } from '@shared/errors';
import { encodeJobError, JOB_QUEUES, type JobName, type JobPayloads } from '@shared/jobs';
import { QUEUE_NAMES, type QueueName } from '@shared/config';
import { pingMongo } from '@shared/db/connection';
import { createWorkerMetrics, type WorkerMetrics } from '@shared/metrics';
import { BullJobQueue } from '@shared/queue/job-queue';
import { createRedis, type RedisConnection } from '@shared/queue/redis';
import { inSpan, jobContext, SpanKind, type JobTrace } from '@shared/tracing';
import { observeChecks, type ReadinessChecks } from '@shared/readiness';
import type { JobContext, WorkerContext } from './context';
import { EventDispatcher } from './events/dispatcher';
import { JobEvents } from './events/job-events';
import { ownTemporaryKeys } from './processors/inputs';
import type { ProcessorJob, Registry } from './registry';

/** How often a worker renews its slots in the fair gate and sweeps it (shared/queue/fair-gate.ts). */
const GATE_TEND_MS = 5_000;
/** How often direct uploads past their expiry are looked for (upload.expire-direct). */
const DIRECT_UPLOAD_CLEANUP_MS = 60_000;

export interface RunningWorker {
  workers: Worker[];
  /** Job durations by queue, name and outcome (served by the ops server). */
  metrics: WorkerMetrics;
  /** MongoDB, Redis (every BullMQ worker running, not closing, its connection answering) and storage. */
  readiness: ReadinessChecks;
  /** Stops taking jobs, lets active ones finish, then closes connections. */
  close(): Promise<void>;
}

export function createWorker(
  ctx: WorkerContext,
  registry: Registry,
  metrics: WorkerMetrics = createWorkerMetrics(),
): RunningWorker {
  const { config, logger, scans } = ctx;
  if (!config.redisUrl) throw new Error('REDIS_URL is not set');
  const connections: RedisConnection[] = [];
  // A job that has ended for good no longer counts against its organization's cap, and
  // the fair gate releases what it held back of the organization's jobs.
  const queues = new BullJobQueue(
    { redisUrl: config.redisUrl, queuePrefix: config.queuePrefix, fairQueues: config.fairQueues },
    logger,
  );
  const releasing = new Set<Promise<void>>();
  const release = (job: Job) => {
    const org = (job.data as { organizationId?: number }).organizationId;
    if (org === undefined || !job.id) return;
    const done = queues
      .ended(job.queueName as QueueName, org, job.id)
      .catch((err: unknown) =>
        logger.warn({ err, jobId: job.id }, 'could not release the job from its organization'),
      )
      .finally(() => releasing.delete(done));
    releasing.add(done);
  };

  // One `process` span per attempt, a child of the API's `send` span (its context is in the job).
  const processJob = (job: Job) =>
    inSpan(
      `process ${job.queueName}`,
      SpanKind.CONSUMER,
      {
        'messaging.system': 'bullmq',
        'messaging.operation.type': 'process',
        'messaging.destination.name': job.queueName,
        'messaging.message.id': job.id ?? '',
        'media.job.name': job.name,
        'media.job.attempt': job.attemptsMade + 1,
      },
      () => runJob(job),
      jobContext((job.data as { trace?: JobTrace }).trace),
    );

  const runJob = async (job: Job) => {
    // Queue wait: added → first attempt started (BullMQ's timestamps; a retry's wait includes its backoff).
    if (job.attemptsMade === 0 && job.attemptsStarted <= 1 && job.processedOn) {
      metrics.observeWait(job.queueName, job.name, (job.processedOn - job.timestamp) / 1000);
    }
    const processor = registry.get(job.name as JobName);
    const log = logger.child({
      jobId: job.id,
      job: job.name,
      requestId: (job.data as { requestId?: string }).requestId,
      attempt: job.attemptsMade + 1,
    });
    if (!processor || !job.id) {
      const unknown = Errors.badRequest(`unknown job "${job.name}"`);
      metrics.jobFailed(job.queueName, job.name, unknown.code, 'failed');
      throw new UnrecoverableError(encodeJobError(unknown));
    }
    const started = performance.now();
    const observe = (outcome: 'completed' | 'failed' | 'retried') =>
      metrics.observeJob(job.queueName, job.name, outcome, (performance.now() - started) / 1000);
    // The job's time limit: past it the job fails for good (422) and its slot is freed at
    // once; the signal stops what can be stopped (sharp's own timeout, a HEIC decoding
    // thread) and every write of a result or a variant (what landed as it ran out is undone).
    const limitMs = config.worker.jobTimeoutMs;
    const deadline = Date.now() + limitMs;
    const controller = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => {
        const err = Errors.processingTimeout(limitMs);
        controller.abort(err);
        reject(err);
      }, limitMs);
    });
    try {
      const view: ProcessorJob<JobName> = {
        id: job.id,
        name: processor.name,
        data: job.data as JobPayloads[JobName],
        timestamp: job.timestamp,
        attemptsMade: job.attemptsMade,
        log,
        progress: (progress) => job.updateProgress(progress),
        signal: controller.signal,
        remainingMs: () => Math.max(0, deadline - Date.now()),
      };
      // The registry guarantees the processor matches the job's name.
      const processing = (processor.process as (j: typeof view, c: JobContext) => Promise<unknown>)(
        view,
        ctx,
      );
      // Still running when the time is up: its outcome no longer matters.
      processing.catch(() => undefined);
      const result = await Promise.race([processing, timedOut]);
      log.info({ ms: Math.round(performance.now() - started) }, 'job completed');
      observe('completed');
      return result;
    } catch (err) {
      const ms = Math.round(performance.now() - started);
      const refused = isAppError(err) && err.status < 500;
      const final = refused || job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
      observe(final ? 'failed' : 'retried');
      metrics.jobFailed(
        job.queueName,
        job.name,
        isAppError(err) ? err.code : 'INTERNAL',
        final ? 'failed' : 'retried',
      );
      // A job that has failed for good removes the temporary inputs it owned,
      // before its failure is reported (the client then finds nothing left).
      if (final) await removeTemporaryInputs(job);
      if (refused) {
        log.info({ ms, code: err.code }, 'job refused its input');
        throw new UnrecoverableError(encodeJobError(err));
      }
      const appError = isAppError(err) ? err : Errors.internal(err);
      log.warn({ ms, err, final }, final ? 'job failed' : 'job failed; it will be retried');
      throw new Error(encodeJobError(appError), { cause: err });
    } finally {
      clearTimeout(timer);
    }
  };

  // Only the keys under the job's organization's temporary prefix: a job written
  // into Redis by hand must not remove another organization's objects.
  const removeTemporaryInputs = async (job: Job) => {
    const data = job.data as { organizationId?: number; temporaryKeys?: unknown };
    const listed = Array.isArray(data.temporaryKeys) ? data.temporaryKeys : [];
    const temporaryKeys = listed.filter((k): k is string => typeof k === 'string');
    if (temporaryKeys.length === 0) return;
    try {
      const { own, foreign } = await ownTemporaryKeys(ctx, data.organizationId, temporaryKeys);
      if (foreign.length) {
        logger.warn({ jobId: job.id, foreign }, 'job named temporary keys not of its organization');
      }
      if (own.length) await ctx.store.removeMany(own);
    } catch (removeErr) {
      logger.error(
        { err: removeErr, jobId: job.id, temporaryKeys },
        'could not remove temporary inputs',
      );
    }
  };

  const workers = config.worker.queues.map((queue: QueueName) => {
    const connection = createRedis(config.redisUrl!, 'worker', logger);
    connections.push(connection);
    const worker = new Worker(queue, processJob, {
      connection,
      prefix: config.queuePrefix,
      concurrency: config.worker.concurrency[queue],
      // A job whose lock is lost twice (its worker died or froze) is failed, not retried forever.
      maxStalledCount: 2,
      lockDuration: config.worker.lockMs,
      stalledInterval: config.worker.lockMs,
    });
    worker.on('error', (err) => logger.error({ err, queue }, 'worker error'));
    // Once a job has ended for good (recorded so in BullMQ: the slot is free), it no
    // longer counts. A failure retried later has not ended (no finishedOn); one failed
    // for good may come from the stalled-job check, without passing through runJob.
    worker.on('completed', (job) => release(job));
    worker.on('failed', (job) => {
      if (job?.finishedOn) release(job);
    });
    logger.info({ queue, concurrency: config.worker.concurrency[queue] }, 'taking jobs');
    return worker;
  });

  // This worker's slots count in the fair gate's shares while it renews them; each
  // renewal also releases what the gate may now release (slots came or went, a process
  // died between releasing a job and handing it over).
  const workerId = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  const tend = async () => {
    try {
      await queues.ready();
    } catch (err) {
      logger.warn({ err }, 'could not tend the fair gate: Redis is not ready');
      return;
    }
    for (const queue of config.worker.queues) {
      try {
        await queues.gate.announce(queue, workerId, config.worker.concurrency[queue]);
        await queues.sweepGate(queue);
      } catch (err) {
        logger.warn({ err, queue }, 'could not tend the fair gate');
      }
    }
  };
  let tending = tend();
  const tender = setInterval(() => {
    tending = tending.then(tend);
  }, GATE_TEND_MS);
  tender.unref();
  // Stored job results past their expiry, removed by every worker (shared/stored-results.ts).
  const sweeping = ctx.storedResults.startSweeping();
  // Domain events to their listeners, on the workers that run the deliveries.
  const dispatcher = config.worker.queues.includes(JOB_QUEUES['event.deliver'])
    ? new EventDispatcher({
        outbox: ctx.events,
        queue: queues,
        listeners: ctx.listeners,
        context: ctx,
        jobEvents: new JobEvents({
          redis: () => queues.redis(),
          prefix: config.queuePrefix,
          queues: QUEUE_NAMES,
          outbox: ctx.events,
          media: ctx.media,
          logger,
        }),
        logger,
      })
    : undefined;
  // From when the queues' connection is up (its first tick reads the queues' keys), not before.
  void queues
    .ready(60_000)
    .then(() => dispatcher?.start())
    .catch((err: unknown) => {
      logger.warn({ err }, 'Redis not ready: the event dispatcher starts anyway, retrying');
      dispatcher?.start();
    });
  // The trash's purge, every TRASH_PURGE_INTERVAL_MS, scheduled by the workers of its queue
  // (a BullMQ job scheduler kept in Redis: scheduling it again only updates it).
  const scheduling = config.worker.queues.includes(JOB_QUEUES['media.purge-trash'])
    ? queues
        .repeat(
          'media.purge-trash',
          { organizationId: 0, requestId: 'trash-purge' },
          config.trash.purgeIntervalMs,
        )
        .catch((err: unknown) => logger.warn({ err }, 'could not schedule the trash purge'))
    : Promise.resolve();
  // Direct uploads never completed, removed every minute past their expiry (same workers).
  const directScheduling = config.worker.queues.includes(JOB_QUEUES['upload.expire-direct'])
    ? queues
        .repeat(
          'upload.expire-direct',
          { organizationId: 0, requestId: 'direct-upload-expiry' },
          DIRECT_UPLOAD_CLEANUP_MS,
        )
        .catch((err: unknown) =>
          logger.warn({ err }, 'could not schedule the direct uploads cleanup'),
        )
    : Promise.resolve();
  // The resumable uploads' cleanup, every RESUMABLE_CLEANUP_INTERVAL_MS, the same way.
  const schedulingExpiry = config.worker.queues.includes(JOB_QUEUES['media.expire-resumable'])
    ? queues
        .repeat(
          'media.expire-resumable',
          { organizationId: 0, requestId: 'resumable-expiry' },
          config.limits.resumable.cleanupIntervalMs,
        )
        .catch((err: unknown) =>
          logger.warn({ err }, 'could not schedule the resumable uploads’ cleanup'),
        )
    : Promise.resolve();
  // Webhook attempts waiting for a slot of their endpoint, and hand-overs a crash cut short.
  const webhookSweep = config.worker.queues.includes(JOB_QUEUES['webhook.deliver'])
    ? ctx.webhooks.startSweeping()
    : undefined;

  return {
    workers,
    metrics,
    readiness: {
      ...observeChecks(
        {
          mongodb: () => pingMongo(ctx.connection),
          redis: async () => {
            const stopped = workers.filter((w) => !w.isRunning() || w.closing !== undefined);
            if (stopped.length) {
              throw new Error(`not taking jobs from ${stopped.map((w) => w.name).join(', ')}`);
            }
            await Promise.all(connections.map((c) => c.ping()));
          },
          storage: () => ctx.store.ping(),
        },
        metrics,
      ),
      // A worker that scans is not ready while clamd does not answer (files stay pending).
      ...(scans && config.worker.queues.includes(JOB_QUEUES['media.scan'])
        ? { clamd: () => scans.ping() }
        : {}),
    },
    async close() {
      clearInterval(tender);
      await tending;
      await scheduling;
      await directScheduling;
      await schedulingExpiry;
      await dispatcher?.stop();
      await Promise.allSettled(
        config.worker.queues.map((queue) => queues.gate.withdraw(queue, workerId)),
      );
      await Promise.all([...workers.map((w) => w.close()), sweeping.stop(), webhookSweep?.stop()]);
      await Promise.all(releasing);
      await queues.close();
      for (const c of connections) c.disconnect();
    },
  };
}
