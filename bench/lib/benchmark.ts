/** What every benchmark module exports, and what the runner hands it. */
import { readFileSync } from 'node:fs';
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

/** The team's sample files, copied into the repository (test/fixtures/README.md), as the tests read them. */
export const CORPUS = join(__dirname, '..', '..', 'test', 'fixtures', 'corpus');

export const MiB = 1024 * 1024;

/**
 * One MiB that every way in accepts as a JPEG when it starts a file: a real
 * JPEG's head (the corpus's Canon_40D.jpg), then random-looking bytes.
 */
export function jpegLikeBlock(): Buffer {
  const block = Buffer.alloc(MiB);
  for (let i = 0; i < block.length; i += 4) block.writeUInt32LE((i * 2654435761) >>> 0, i);
  block.set(readFileSync(join(CORPUS, 'images', 'Canon_40D.jpg')).subarray(0, 4096));
  return block;
}
