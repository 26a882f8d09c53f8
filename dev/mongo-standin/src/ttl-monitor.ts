// MongoDB's TTL monitor: every `ttlMonitorSleepSecs` (60 s unless setParameter
// changed it) it deletes the documents whose date in a TTL index's field
// (`expireAfterSeconds`, one field) is older than that many seconds, and, in a
// time-series collection with `expireAfterSeconds`, those whose time field is.
// As in MongoDB a document whose field is not a date (or an array without
// one) never expires; an array expires by its earliest date.

import type { Doc } from './bson-values';
import { isPlainObject, numericValue, valuesAtPath } from './bson-values';
import type { CollectionStore, StorageEngine } from './storage-engine';

function earliestDate(doc: Doc, path: string): number | undefined {
  let earliest: number | undefined;
  for (const value of valuesAtPath(doc, path.split('.'))) {
    for (const item of Array.isArray(value) ? (value as unknown[]) : [value]) {
      if (item instanceof Date && (earliest === undefined || item.getTime() < earliest)) {
        earliest = item.getTime();
      }
    }
  }
  return earliest;
}

function expiryRules(store: CollectionStore): Array<{ path: string; seconds: number }> {
  const rules: Array<{ path: string; seconds: number }> = [];
  for (const spec of store.indexSpecs()) {
    const seconds = numericValue(spec.expireAfterSeconds);
    const key = isPlainObject(spec.key) ? Object.keys(spec.key) : [];
    if (seconds !== undefined && key.length === 1 && key[0] !== '_id') {
      rules.push({ path: key[0]!, seconds });
    }
  }
  const timeseries = store.options.timeseries;
  const seconds = numericValue(store.options.expireAfterSeconds);
  if (
    isPlainObject(timeseries) &&
    typeof timeseries.timeField === 'string' &&
    seconds !== undefined
  ) {
    rules.push({ path: timeseries.timeField, seconds });
  }
  return rules;
}

/** One pass of the monitor; answers how many documents it deleted. */
export function removeExpired(engine: StorageEngine, now = Date.now()): number {
  let removed = 0;
  for (const db of engine.databaseNames()) {
    for (const store of engine.collections(db)) {
      const rules = expiryRules(store);
      if (rules.length === 0) continue;
      for (const entry of store.allEntries()) {
        const expired = rules.some(({ path, seconds }) => {
          const date = earliestDate(entry.doc, path);
          return date !== undefined && date + seconds * 1000 <= now;
        });
        if (expired) {
          store.remove(entry);
          removed++;
        }
      }
    }
  }
  return removed;
}

/**
 * Runs the monitor until stopped: a pass every `sleepSeconds()` (read each
 * second, so that a setParameter takes effect at once); the timer never keeps
 * the process alive.
 */
export function startTtlMonitor(
  engine: StorageEngine,
  sleepSeconds: () => number,
  afterPass: () => void = () => {},
): () => void {
  let last = Date.now();
  const timer = setInterval(() => {
    if (Date.now() - last < Math.max(1, sleepSeconds()) * 1000) return;
    last = Date.now();
    if (removeExpired(engine) > 0) afterPass();
  }, 1000);
  timer.unref();
  return () => clearInterval(timer);
}
