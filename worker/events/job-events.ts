/**
 * The events of jobs (`job.completed`, `job.failed`), derived from BullMQ's
 * own record of each job's end: its `completed` and `failed` sets, scored by
 * when the job ended. Each sweep reads the jobs that ended since the last
 * one (a watermark in Redis, with an overlap for workers whose clocks
 * differ), records the events not recorded yet (by their stable ids), and
 * moves the watermark on. Nothing is written twice and nothing can split:
 * BullMQ wrote the job's end atomically, and the event is derived from it as
 * often as needed. A job trimmed from its set before any sweep saw it (a
 * completed job is kept an hour) has no event.
 *
 * Renders (shared and internal), event deliveries, webhook deliveries and
 * malware scans (their outcome is the record's `scanStatus`, and
 * `media.infected`) have none.
 */
import { eventId, type DomainEvent } from '@shared/events/events';
import type { EventOutbox } from '@shared/events/outbox';
import { JOB_NAMES, JOB_QUEUES, type JobName } from '@shared/jobs';
import type { Logger } from '@shared/logger';
import { errorOfFailure } from '@shared/queue/job-types';
import type { RedisConnection } from '@shared/queue/redis';
import type { MediaRepository } from '@shared/repositories/media.repository';

/** Jobs that have no events. */
const SILENT: readonly JobName[] = [
  'image.render',
  'event.deliver',
  'webhook.deliver',
  'media.scan',
];

/** Whether any job of the queue has events. */
function hasEvents(queue: string): boolean {
  return JOB_NAMES.some((n) => JOB_QUEUES[n] === queue && !SILENT.includes(n));
}

/** Re-read before the watermark: jobs another worker recorded as ended with an earlier clock. */
const OVERLAP_MS = 5_000;
/** Jobs read per set and sweep. */
const PAGE = 1_000;

export class JobEvents {
  constructor(
    private readonly deps: {
      redis: () => RedisConnection;
      prefix: string;
      queues: readonly string[];
      outbox: Pick<EventOutbox, 'recordedIds' | 'record'>;
      media: Pick<MediaRepository, 'findAnyById'>;
      logger: Logger;
    },
  ) {}

  /** Records the events of jobs that ended since the last sweep; answers how many. */
  async sweep(): Promise<number> {
    let recorded = 0;
    for (const queue of this.deps.queues) {
      // A queue whose every job is silent (webhook deliveries) has nothing to read.
      if (!hasEvents(queue)) continue;
      for (const state of ['completed', 'failed'] as const) {
        recorded += await this.sweepSet(queue, state);
      }
    }
    return recorded;
  }

  private async sweepSet(queue: string, state: 'completed' | 'failed'): Promise<number> {
    const redis = this.deps.redis();
    const { prefix } = this.deps;
    const watermarkKey = `${prefix}:events:jobs:${queue}:${state}`;
    const since = Number((await redis.get(watermarkKey)) ?? 0);
    const flat = await redis.zrangebyscore(
      `${prefix}:${queue}:${state}`,
      Math.max(0, since - OVERLAP_MS),
      '+inf',
      'WITHSCORES',
      'LIMIT',
      0,
      PAGE,
    );
    if (flat.length === 0) return 0;
    const ended: { id: string; at: number }[] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) {
      ended.push({ id: flat[i]!, at: Number(flat[i + 1]) });
    }
    const type = state === 'completed' ? 'job.completed' : 'job.failed';
    // Names first (one round trip to Redis): the outbox is asked only about jobs that have
    // events, not about the many silent ones (a queue shared with event deliveries).
    const names = redis.pipeline();
    for (const j of ended) names.hget(`${prefix}:${queue}:${j.id}`, 'name');
    const named = (await names.exec()) ?? [];
    const eventful = ended.filter((_j, i) => {
      const [err, name] = named[i] ?? [];
      return !err && typeof name === 'string' && !SILENT.includes(name as JobName);
    });
    const known = await this.deps.outbox.recordedIds(eventful.map((j) => eventId(type, j.id)));
    const missing = eventful.filter((j) => !known.has(eventId(type, j.id)));
    const pipeline = redis.pipeline();
    for (const j of missing) {
      pipeline.hmget(`${prefix}:${queue}:${j.id}`, 'name', 'data', 'returnvalue', 'failedReason');
    }
    const fields = missing.length ? ((await pipeline.exec()) ?? []) : [];
    const events: DomainEvent[] = [];
    for (const [i, j] of missing.entries()) {
      const [err, values] = fields[i] ?? [];
      if (err || !Array.isArray(values)) continue;
      const [name, data, returnvalue, failedReason] = values as (string | null)[];
      if (!name || SILENT.includes(name as JobName)) continue;
      const organizationId = parse<{ organizationId?: number }>(data)?.organizationId;
      if (typeof organizationId !== 'number') continue;
      const occurredAt = new Date(j.at);
      if (state === 'completed') {
        const mediaId = parse<{ mediaId?: number }>(returnvalue)?.mediaId;
        const record =
          typeof mediaId === 'number' ? await this.deps.media.findAnyById(mediaId) : null;
        events.push({
          id: eventId('job.completed', j.id),
          type: 'job.completed',
          organizationId,
          occurredAt,
          data: {
            job: {
              id: j.id,
              name,
              status: 'completed',
              ...(typeof mediaId === 'number' ? { mediaId } : {}),
              ...(record ? { resultKey: record.key } : {}),
            },
          },
        });
      } else {
        const error = errorOfFailure(failedReason ?? undefined);
        events.push({
          id: eventId('job.failed', j.id),
          type: 'job.failed',
          organizationId,
          occurredAt,
          data: {
            job: {
              id: j.id,
              name,
              status: 'failed',
              error: { code: error.code, status: error.status, message: error.message },
            },
          },
        });
      }
    }
    const recorded = await this.deps.outbox.record(events);
    // Past what was read, unless a full page was read (the rest is read next time).
    const last = ended[ended.length - 1]!.at;
    if (last > since) await redis.set(watermarkKey, String(last), 'PX', 7 * 24 * 3_600_000);
    return recorded;
  }
}

function parse<T>(json: string | null | undefined): T | undefined {
  if (!json) return undefined;
  try {
    return JSON.parse(json) as T;
  } catch {
    return undefined;
  }
}
