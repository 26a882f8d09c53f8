/**
 * The load test's check behind the API (bench/load.ts): once the load is
 * over and the queues are idle, MongoDB's records, the bucket's objects and
 * its open multipart uploads are held against every answer the clients got,
 * and every broken invariant is listed.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Models } from '../shared/db/models';
import type { JobQueue } from '../shared/queue/job-queue';
import type { ObjectStore } from '../shared/storage/object-store';
import type { LoadResult, StoredMedia } from './load-types';

export interface LoadVerification {
  records: number;
  objects: number;
  storedUploads: number;
  refusedUploads: number;
  storedConversions: number;
  /** Jobs that ended failed in the queues. */
  failedJobs: number;
  /** Every broken invariant, one line each (empty when all hold). */
  violations: string[];
}

/**
 * Looks behind the API once the load is over (after the queues are idle):
 *  - every upload answered 201 has exactly one record (its name, size and
 *    checksum) and one object of that size, at a key in its folder when it
 *    named one;
 *  - every upload not answered 201 has no record and no object;
 *  - every conversion answered 201 has one record and one object (one
 *    answered without its result but with a job id, e.g. a 504, may still
 *    have stored one, and at most one);
 *  - there is no other record, no object without a record, no record
 *    without its object, and no multipart upload left open in the bucket.
 */
export async function verifyLoad(
  behind: {
    models: Pick<Models, 'Media'>;
    store: Pick<ObjectStore, 'list' | 'listIncompleteUploads'>;
    queue: Pick<JobQueue, 'counts'>;
  },
  result: Pick<LoadResult, 'uploads' | 'conversions'>,
  options: { idleTimeoutMs?: number } = {},
): Promise<LoadVerification> {
  const violations: string[] = [];
  // Jobs whose caller stopped waiting still finish and store; wait for them.
  const idleBy = Date.now() + (options.idleTimeoutMs ?? 60_000);
  let failedJobs: number;
  for (;;) {
    const counts = await behind.queue.counts();
    const busy = Object.values(counts).reduce(
      (n, c) => n + (c.waiting ?? 0) + (c.active ?? 0) + (c.delayed ?? 0) + (c.prioritized ?? 0),
      0,
    );
    failedJobs = Object.values(counts).reduce((n, c) => n + (c.failed ?? 0), 0);
    if (busy === 0) break;
    if (Date.now() > idleBy) {
      violations.push(`queues still busy after the load: ${JSON.stringify(counts)}`);
      break;
    }
    await sleep(200);
  }

  const records = await behind.models.Media.find({}).lean();
  const recordsByKey = new Map<string, typeof records>();
  for (const r of records) recordsByKey.set(r.key, [...(recordsByKey.get(r.key) ?? []), r]);
  const objects = new Map<string, number>();
  for await (const o of behind.store.list('')) objects.set(o.key, o.size);
  const expectedKeys = new Set<string>();

  const checkStored = (what: string, stored: StoredMedia, bytes?: number, checksum?: string) => {
    expectedKeys.add(stored.key);
    const found = recordsByKey.get(stored.key) ?? [];
    if (found.length !== 1) {
      violations.push(`${what}: ${found.length} records for ${stored.key}`);
      return;
    }
    const record = found[0]!;
    if (record.id !== stored.id) violations.push(`${what}: record id ${record.id} ≠ ${stored.id}`);
    if (bytes !== undefined && record.bytes !== bytes)
      violations.push(`${what}: record says ${record.bytes} bytes, ${bytes} were sent`);
    if (checksum !== undefined && record.checksum !== checksum)
      violations.push(`${what}: record checksum ${record.checksum} ≠ ${checksum}`);
    const size = objects.get(stored.key);
    if (size === undefined) violations.push(`${what}: no object at ${stored.key}`);
    else if (size !== record.bytes)
      violations.push(`${what}: object ${stored.key} is ${size} bytes, record ${record.bytes}`);
  };

  let storedUploads = 0;
  let refusedUploads = 0;
  for (const u of result.uploads) {
    const what = `upload ${u.name} (${u.status ?? u.error})`;
    if (u.status === 201 && u.stored) {
      storedUploads++;
      checkStored(what, u.stored, u.bytes, u.checksum);
      if (u.stored.name !== u.name) violations.push(`${what}: record name ${u.stored.name}`);
      if (u.folder && !u.stored.key.includes(`/${u.folder.name}/`))
        violations.push(`${what}: key ${u.stored.key} is not in folder ${u.folder.name}`);
    } else {
      refusedUploads++;
      const base = u.name.slice(0, u.name.lastIndexOf('.'));
      const leftRecords = records.filter((r) => r.name === u.name);
      const leftObjects = [...objects.keys()].filter((k) => k.includes(`/${base}-`));
      if (leftRecords.length > 0)
        violations.push(`${what}: refused, yet ${leftRecords.length} record(s) exist`);
      if (leftObjects.length > 0)
        violations.push(`${what}: refused, yet objects exist: ${leftObjects.join(', ')}`);
    }
  }
  let storedConversions = 0;
  for (const c of result.conversions) {
    if (c.status === 201 && c.stored) {
      storedConversions++;
      checkStored(`conversion of ${c.source}`, c.stored);
    } else if (c.jobId) {
      // Answered without a result (e.g. 504) but the job went on: at most one result.
      const made = records.filter((r) => r.jobId === c.jobId);
      if (made.length > 1) violations.push(`job ${c.jobId}: ${made.length} records`);
      for (const r of made) checkStored(`late result of job ${c.jobId}`, { ...r, folderId: null });
    }
  }

  for (const r of records) {
    if (!expectedKeys.has(r.key))
      violations.push(`record ${r.id} (${r.key}) answers no successful request`);
    if (!objects.has(r.key)) violations.push(`record ${r.id} (${r.key}) has no object`);
  }
  for (const key of objects.keys()) {
    if (!recordsByKey.has(key)) violations.push(`object ${key} has no record`);
  }
  for (const key of await behind.store.listIncompleteUploads('')) {
    violations.push(`multipart upload left open: ${key}`);
  }
  return {
    records: records.length,
    objects: objects.size,
    storedUploads,
    refusedUploads,
    storedConversions,
    failedJobs,
    violations,
  };
}
