/**
 * The fair gate: which queued jobs the workers may take, so that one
 * organization's flood never stands before another organization's job, and
 * one organization's jobs run in the order they came.
 *
 * Every job is in BullMQ from the start (the dashboard, job status and
 * clean-ups see it), but a job beyond its organization's share waits as a
 * *held* job (BullMQ's delayed state, with a long delay as a safety net)
 * until the gate releases it (`promote`: to the end of the wait list). Per
 * queue and organization the gate keeps:
 *
 * - `held:<org>`: the held job ids, first come first out (FIFO within an
 *   organization);
 * - `out:<org>`: the released jobs not yet ended (waiting or running), and
 *   `outheavy:<org>` the heavy ones among them.
 *
 * A job is released while its organization has fewer than `queuedPerSlot` ×
 * the queue's live slots released, and, for a heavy job (one whose
 * estimated work is long: shared/queue/job-cost.ts), fewer than the live
 * slots less `reservedSlots` heavy ones released: nothing preempts a running
 * job, so slots are kept for other organizations' work. The live slots are
 * the concurrency the running workers announce (`workers`/`slots`, renewed
 * every few seconds; a worker that stops renewing drops out).
 *
 * Since each organization has a bounded number of jobs in the wait list,
 * another organization's job waits behind at most that many of each, never
 * behind a backlog; since a held job is released only after the ones held
 * before it, an organization's jobs start in their order.
 *
 * When a job ends for good, `finish` forgets it and releases what its
 * organization may now run. `sweep` (every few seconds on the workers)
 * releases what a change of slots allows and drops the entries of jobs that
 * ended without `finish` (a killed process).
 */
import type { RedisConnection } from './redis';

/** How long a held job stays delayed if the gate never releases it (a safety net). */
export const HOLD_DELAY_MS = 6 * 3_600_000;

/** How long a worker's slots count after its last announcement. */
export const SLOTS_TTL_MS = 15_000;

export interface FairGateOptions {
  /** Slots one organization's heavy jobs leave free for others (per queue). */
  reservedSlots: number;
  /** Jobs an organization may have released per live slot (waiting or running). */
  queuedPerSlot: number;
}

/** The live slots of the queue, at least 1 (`KEYS[1]` workers zset, `KEYS[2]` slots hash, `ARGV[1]` now). */
const SLOTS_LUA = `
local function live_slots(workers, slots, now)
  redis.call('ZREMRANGEBYSCORE', workers, '-inf', now)
  local ids = redis.call('ZRANGE', workers, 0, -1)
  local total = 0
  for _, id in ipairs(ids) do
    total = total + (tonumber(redis.call('HGET', slots, id)) or 0)
  end
  if total < 1 then total = 1 end
  return total
end
local function may_release(base, org, heavy, slots, reserved, per_slot)
  if redis.call('ZCARD', base .. 'out:' .. org) >= per_slot * slots then return false end
  if heavy == '1' then
    local heavy_cap = math.max(1, slots - reserved)
    if redis.call('ZCARD', base .. 'outheavy:' .. org) >= heavy_cap then return false end
  end
  return true
end
local function release(base, org, id, heavy, now)
  redis.call('ZADD', base .. 'out:' .. org, now, id)
  if heavy == '1' then redis.call('ZADD', base .. 'outheavy:' .. org, now, id) end
end
-- Releases the held jobs of org that may run now, in their order; answers their ids.
local function release_held(base, org, slots, reserved, per_slot, now)
  local released = {}
  local held = base .. 'held:' .. org
  while true do
    local id = redis.call('LINDEX', held, 0)
    if not id then break end
    local heavy = redis.call('HGET', base .. 'heavy', id) or '0'
    if not may_release(base, org, heavy, slots, reserved, per_slot) then break end
    redis.call('LPOP', held)
    redis.call('HDEL', base .. 'heavy', id)
    release(base, org, id, heavy, now)
    table.insert(released, id)
  end
  if redis.call('LLEN', held) == 0 then redis.call('SREM', base .. 'orgs', org) end
  return released
end
`;

/**
 * Enters a job: `1` released (the caller adds it to run), `0` held (the caller
 * adds it delayed, then calls `confirm`).
 * KEYS: workers, slots. ARGV: base, org, id, heavy, now, reserved, perSlot.
 */
const ENTER = `${SLOTS_LUA}
local base, org, id, heavy, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local slots = live_slots(KEYS[1], KEYS[2], now)
if redis.call('LLEN', base .. 'held:' .. org) == 0
  and may_release(base, org, heavy, slots, tonumber(ARGV[6]), tonumber(ARGV[7])) then
  release(base, org, id, heavy, now)
  return 1
end
redis.call('RPUSH', base .. 'held:' .. org, id)
redis.call('HSET', base .. 'heavy', id, heavy)
redis.call('SADD', base .. 'orgs', org)
return 0
`;

/**
 * A held job is in BullMQ now: `1` if it was released meanwhile (the caller
 * promotes it), else `0`. KEYS: none. ARGV: base, id.
 */
const CONFIRM = `
local base, id = ARGV[1], ARGV[2]
redis.call('SADD', base .. 'added', id)
if redis.call('SREM', base .. 'early', id) == 1 then return 1 end
return 0
`;

/**
 * A released job could not be promoted because it is not in BullMQ yet (its
 * producer is between `enter` and `confirm`): `1` if it has been added since
 * (promote again), else `0` (its `confirm` will promote it). ARGV: base, id.
 */
const EARLY = `
local base, id = ARGV[1], ARGV[2]
if redis.call('SISMEMBER', base .. 'added', id) == 1 then return 1 end
redis.call('SADD', base .. 'early', id)
return 0
`;

/**
 * A job has ended for good: forgotten, and its organization's held jobs that
 * may run now are released (answered, to promote). KEYS: workers, slots.
 * ARGV: base, org, id, now, reserved, perSlot.
 */
const FINISH = `${SLOTS_LUA}
local base, org, id, now = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
redis.call('ZREM', base .. 'out:' .. org, id)
redis.call('ZREM', base .. 'outheavy:' .. org, id)
redis.call('SREM', base .. 'added', id)
redis.call('SREM', base .. 'early', id)
if redis.call('LREM', base .. 'held:' .. org, 0, id) > 0 then redis.call('HDEL', base .. 'heavy', id) end
local slots = live_slots(KEYS[1], KEYS[2], now)
return release_held(base, org, slots, tonumber(ARGV[5]), tonumber(ARGV[6]), now)
`;

/**
 * Releases what every organization with held jobs may run now (after a change
 * of slots, or `forget`s). Answers a flat list: org, id, org, id...
 * KEYS: workers, slots. ARGV: base, now, reserved, perSlot.
 */
const SWEEP = `${SLOTS_LUA}
local base, now = ARGV[1], tonumber(ARGV[2])
local slots = live_slots(KEYS[1], KEYS[2], now)
local out = {}
for _, org in ipairs(redis.call('SMEMBERS', base .. 'orgs')) do
  for _, id in ipairs(release_held(base, org, slots, tonumber(ARGV[3]), tonumber(ARGV[4]), now)) do
    table.insert(out, org)
    table.insert(out, id)
  end
end
return out
`;

type Scripts = {
  fairGateEnter(...args: string[]): Promise<number>;
  fairGateConfirm(...args: string[]): Promise<number>;
  fairGateEarly(...args: string[]): Promise<number>;
  fairGateFinish(...args: string[]): Promise<string[]>;
  fairGateSweep(...args: string[]): Promise<string[]>;
};

/** A released job, to promote. */
export interface Released {
  organizationId: number;
  jobId: string;
}

export class FairGate {
  /** Connections the scripts are defined on (once each). */
  private readonly defined = new WeakSet<RedisConnection>();

  constructor(
    private readonly redis: () => RedisConnection,
    /** The queue prefix (a hash tag on a cluster: the gate's keys live in the queues' slot). */
    private readonly prefix: string,
    private readonly options: FairGateOptions,
  ) {}

  private base(queue: string): string {
    return `${this.prefix}:gate:${queue}:`;
  }

  private slotKeys(queue: string): [string, string] {
    return [`${this.base(queue)}workers`, `${this.base(queue)}slots`];
  }

  private scripts(): Scripts {
    const redis = this.redis();
    if (!this.defined.has(redis)) {
      redis.defineCommand('fairGateEnter', { numberOfKeys: 2, lua: ENTER });
      redis.defineCommand('fairGateConfirm', { numberOfKeys: 0, lua: CONFIRM });
      redis.defineCommand('fairGateEarly', { numberOfKeys: 0, lua: EARLY });
      redis.defineCommand('fairGateFinish', { numberOfKeys: 2, lua: FINISH });
      redis.defineCommand('fairGateSweep', { numberOfKeys: 2, lua: SWEEP });
      this.defined.add(redis);
    }
    return redis as unknown as Scripts;
  }

  private limits(): [string, string] {
    return [String(this.options.reservedSlots), String(this.options.queuedPerSlot)];
  }

  /** Enters a job: `true` when it may run at once, `false` when it is held. */
  async enter(queue: string, organizationId: number, jobId: string, heavy: boolean) {
    const released = await this.scripts().fairGateEnter(
      ...this.slotKeys(queue),
      this.base(queue),
      String(organizationId),
      jobId,
      heavy ? '1' : '0',
      String(Date.now()),
      ...this.limits(),
    );
    return released === 1;
  }

  /** A held job has been added (delayed): `true` when it was released meanwhile (promote it). */
  async confirm(queue: string, jobId: string): Promise<boolean> {
    return (await this.scripts().fairGateConfirm(this.base(queue), jobId)) === 1;
  }

  /**
   * A released job was not found delayed in BullMQ: `true` when it has been
   * added since (promote it again), `false` when its producer will promote it.
   */
  async early(queue: string, jobId: string): Promise<boolean> {
    return (await this.scripts().fairGateEarly(this.base(queue), jobId)) === 1;
  }

  /** A job has ended for good (or was removed): the jobs it lets run. */
  async finish(queue: string, organizationId: number, jobId: string): Promise<Released[]> {
    const ids = await this.scripts().fairGateFinish(
      ...this.slotKeys(queue),
      this.base(queue),
      String(organizationId),
      jobId,
      String(Date.now()),
      ...this.limits(),
    );
    return ids.map((id) => ({ organizationId, jobId: id }));
  }

  /** Releases what every organization may run now. */
  async sweep(queue: string): Promise<Released[]> {
    const flat = await this.scripts().fairGateSweep(
      ...this.slotKeys(queue),
      this.base(queue),
      String(Date.now()),
      ...this.limits(),
    );
    const out: Released[] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) {
      out.push({ organizationId: Number(flat[i]), jobId: flat[i + 1]! });
    }
    return out;
  }

  /** The released jobs of each organization that entered before `before` (ms): to check they still run. */
  async releasedBefore(queue: string, before: number): Promise<Released[]> {
    const redis = this.redis();
    const base = this.base(queue);
    const orgs = new Set<string>();
    // Organizations with released jobs: out:<org> keys. SCAN would cross slots on a
    // cluster; the held set names those with held jobs, the ones that matter here.
    for (const org of await redis.smembers(`${base}orgs`)) orgs.add(org);
    const out: Released[] = [];
    for (const org of orgs) {
      const ids = await redis.zrangebyscore(`${base}out:${org}`, '-inf', before);
      for (const id of ids) out.push({ organizationId: Number(org), jobId: id });
    }
    return out;
  }

  /** A worker's slots on a queue, for `SLOTS_TTL_MS` (renewed by calling again). */
  async announce(queue: string, workerId: string, concurrency: number): Promise<void> {
    const [workers, slots] = this.slotKeys(queue);
    await this.redis()
      .multi()
      .zadd(workers, Date.now() + SLOTS_TTL_MS, workerId)
      .hset(slots, workerId, concurrency)
      .exec();
  }

  /** A worker stops taking jobs from a queue. */
  async withdraw(queue: string, workerId: string): Promise<void> {
    const [workers, slots] = this.slotKeys(queue);
    await this.redis().multi().zrem(workers, workerId).hdel(slots, workerId).exec();
  }

  /** Jobs held on a queue, every organization's (the queue's backlog beside its waiting jobs). */
  async heldCount(queue: string): Promise<number> {
    const redis = this.redis();
    const base = this.base(queue);
    const orgs = await redis.smembers(`${base}orgs`);
    if (orgs.length === 0) return 0;
    const pipeline = redis.pipeline();
    for (const org of orgs) pipeline.llen(`${base}held:${org}`);
    const lengths = (await pipeline.exec()) ?? [];
    return lengths.reduce((n, [err, len]) => n + (err ? 0 : Number(len)), 0);
  }

  /** What the gate holds for an organization on a queue (metrics, tests). */
  async state(queue: string, organizationId: number) {
    const base = this.base(queue);
    const redis = this.redis();
    const [held, released, heavy] = await Promise.all([
      redis.llen(`${base}held:${organizationId}`),
      redis.zcard(`${base}out:${organizationId}`),
      redis.zcard(`${base}outheavy:${organizationId}`),
    ]);
    return { held, released, heavy };
  }
}
