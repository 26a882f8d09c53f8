/**
 * What a merge takes and gives: its inputs, limits (with their defaults) and
 * options, and its result. The limits bound what a hostile or huge input can
 * cost; every one is checked before the work it bounds (see merge.ts).
 */
import type { Logger } from '@shared/logger';

/** One input of a merge; its position in the array is its position in the result. */
export interface PdfInput {
  /** Shown to the client in errors (the record's or upload's file name). */
  name: string;
  data: Buffer;
}

/** Limits of one merge. Every field is optional; defaults are in `PDF_MERGE_DEFAULTS`. */
export interface MergeLimits {
  /** Pages of the merged document, every occurrence of an input counted (413 over it). */
  maxPages?: number;
  /** Total bytes of all inputs (413 over it). */
  maxInputBytes?: number;
  /** Estimated PDF objects across the distinct inputs; bounds pdf-lib's memory (413 over it). */
  maxObjects?: number;
  /**
   * Decoded bytes of the object streams and cross-reference streams of one
   * input, which pdf-lib inflates in full while loading it (422 over it: a
   * decompression bomb). Content streams and images are copied compressed and
   * do not count.
   */
  maxStructureBytes?: number;
  /** Wall-clock limit of one qpdf repair, in milliseconds (the input is unreadable past it; also its CPU limit, rounded up to seconds). */
  timeoutMs?: number;
  /** Address space of one qpdf repair, bytes (through prlimit, where installed). */
  qpdfMemoryBytes?: number;
}

export interface MergeOptions {
  /** Where repairs and qpdf failures are logged (a pino child logger of the job). */
  logger?: Pick<Logger, 'warn' | 'info'>;
  /** The qpdf executable, looked up on the PATH unless absolute. */
  qpdfCommand?: string;
  /** The prlimit executable (default `prlimit` on the PATH); null runs qpdf without it. */
  prlimitCommand?: string | null;
}

export interface MergeResult {
  /** The merged PDF. */
  data: Buffer;
  /** Its page count. */
  pages: number;
  /**
   * Indexes of the inputs that were repaired, ascending: rewritten by qpdf,
   * given a rebuilt page tree, or both.
   */
  repaired: number[];
}

export const PDF_MERGE_DEFAULTS: Readonly<Required<MergeLimits>> = {
  maxPages: 10_000,
  maxInputBytes: 256 * 1024 * 1024,
  maxObjects: 500_000,
  // About 400,000 objects of ~160 bytes; real files stay far below. A refused
  // bomb costs about twice this while it is measured (pdf-lib's decoders grow
  // their buffer by doubling).
  maxStructureBytes: 64 * 1024 * 1024,
  timeoutMs: 15_000,
  // qpdf maps about 40 MB of libraries; stream data is copied, not held (--stream-data=preserve).
  qpdfMemoryBytes: 512 * 1024 * 1024,
};

/** pdf-lib yields to the event loop after this many objects when parsing and saving. */
export const OBJECTS_PER_TICK = 2_000;

/** `limits` over `PDF_MERGE_DEFAULTS` (a field left undefined keeps its default). */
export function resolveLimits(limits: MergeLimits): Required<MergeLimits> {
  return { ...PDF_MERGE_DEFAULTS, ...withoutUndefined(limits) };
}

function withoutUndefined(limits: MergeLimits): MergeLimits {
  return Object.fromEntries(Object.entries(limits).filter(([, v]) => v !== undefined));
}
