/**
 * The job registry of the worker: one processor per job name. At boot it
 * refuses to start when a job name of shared/jobs.ts has no processor, or two,
 * or when a processor names a job that does not exist.
 */
import {
  JOB_NAMES,
  type JobName,
  type JobPayloads,
  type JobProgress,
  type JobResults,
} from '@shared/jobs';
import type { Logger } from '@shared/logger';
import type { JobContext } from './context';

/** What a processor sees of a job (BullMQ stays in the transport). */
export interface ProcessorJob<N extends JobName> {
  id: string;
  name: N;
  data: JobPayloads[N];
  /** When the job was created (stable across retries). */
  timestamp: number;
  attemptsMade: number;
  log: Logger;
  /** Reports how far a long job has come (its status URL shows it). */
  progress(progress: JobProgress): Promise<void>;
  /** Aborted when the job runs past JOB_TIMEOUT_MS (its reason the PROCESSING_TIMEOUT error). */
  signal: AbortSignal;
  /** Milliseconds left before the job's time limit. */
  remainingMs(): number;
}

/**
 * A job's processor. `Needs` names the parts of the context it uses; it is
 * given only those (the worker holds the whole context).
 */
export interface Processor<N extends JobName, Needs extends keyof JobContext = keyof JobContext> {
  name: N;
  process(job: ProcessorJob<N>, ctx: Pick<JobContext, Needs>): Promise<JobResults[N]>;
}

export type AnyProcessor = { [N in JobName]: Processor<N, keyof JobContext> }[JobName];

export type Registry = ReadonlyMap<JobName, AnyProcessor>;

export class RegistryError extends Error {
  override readonly name = 'RegistryError';
}

export function buildRegistry(processors: readonly AnyProcessor[]): Registry {
  const registry = new Map<JobName, AnyProcessor>();
  const problems: string[] = [];
  for (const p of processors) {
    if (!(JOB_NAMES as readonly string[]).includes(p.name)) {
      problems.push(`a processor is registered for unknown job "${p.name}"`);
    } else if (registry.has(p.name)) {
      problems.push(`job "${p.name}" has two processors`);
    } else {
      registry.set(p.name, p);
    }
  }
  for (const name of JOB_NAMES) {
    if (!registry.has(name)) problems.push(`job "${name}" has no processor`);
  }
  if (problems.length) throw new RegistryError(`Job registry is invalid: ${problems.join('; ')}`);
  return registry;
}
