/**
 * The PDF adapter as the worker uses it: merging (merge.ts), counting pages,
 * repairing a damaged PDF before it is read (`repairForReading`, open.ts),
 * and the limits with their defaults. The other files of worker/pdf/ are its
 * parts: opening an input (open.ts), the page tree (page-tree.ts), the decode
 * budget (decode-budget.ts), qpdf repair (qpdf.ts) and refusals (refusals.ts).
 */
export { countPages, mergePdfs } from './merge';
export { repairForReading } from './open';
export {
  PDF_MERGE_DEFAULTS,
  type MergeLimits,
  type MergeOptions,
  type MergeResult,
  type PdfInput,
} from './options';
export { MAX_PAGE_TREE_DEPTH, RECOVERED_PAGE_MEDIA_BOX } from './page-tree';
