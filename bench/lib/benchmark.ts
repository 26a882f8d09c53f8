/** What every benchmark module exports, and what the runner hands it. */
import { join } from 'node:path';
import type { MachineInfo } from './proc';
import type { BenchmarkResult } from './report';
import type { Stack } from './stack';

export interface BenchContext {
  /** Reduced sizes and rounds: proves the benchmark runs (npm test), figures not published. */
  quick: boolean;
  stack: Stack;
  machine: MachineInfo;
  /** Progress for the person running it (stderr). */
  log(line: string): void;
}

export interface Benchmark {
  id: string;
  title: string;
  run(ctx: BenchContext): Promise<BenchmarkResult>;
}

/** The team's sample files: ../shared/corpus beside the repository, or MEDIA_CORPUS_DIR (as the tests). */
export const CORPUS =
  process.env.MEDIA_CORPUS_DIR ?? join(__dirname, '..', '..', '..', 'shared', 'corpus');

export const MiB = 1024 * 1024;
