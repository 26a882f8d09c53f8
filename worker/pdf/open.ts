/**
 * Opening one input: parse it with pdf-lib and check it, repair it with qpdf
 * if pdf-lib cannot parse it, and rebuild its page tree as a last resort.
 * Failures are `Refusal`s (refusals.ts).
 *
 *  1. The input is loaded strictly (`throwOnInvalidObject`), with the streams
 *     pdf-lib inflates while loading bounded by `maxStructureBytes`
 *     (decompression bombs: 422, final; decode-budget.ts), checked for
 *     encryption (422 ENCRYPTED_PDF; passwords are never tried, and
 *     permission-only encryption is refused too: removing it would override
 *     the author's restrictions), and its page tree is walked within limits
 *     (page bombs: 413; deep or cyclic trees: 422; page-tree.ts).
 *  2. An input pdf-lib cannot parse is loaded again leniently within the same
 *     decode budget (streams past the damage are measured: a bomb is refused
 *     before qpdf sees it), then rewritten by qpdf (qpdf.ts, bounded in memory
 *     and CPU) and parsed again. If qpdf fails, times out or is not installed, the input is
 *     unreadable (422); the log says why, the client message does not.
 *  3. Last resort, on the input as parsed (directly or after qpdf): when its
 *     catalog has no page tree (no /Pages, or /Pages null or lost) or an empty
 *     one while `/Type /Page` objects survive, a new page tree is built from
 *     those pages and every check of step 1 runs again on it; a warning is
 *     logged. With no page object left, the input stays unreadable (422).
 */
import { PDFDict, PDFDocument, PDFName } from 'pdf-lib';
import { loadWithinBudget, type DecodingBudget } from './decode-budget';
import {
  OBJECTS_PER_TICK,
  PDF_MERGE_DEFAULTS,
  type MergeLimits,
  type MergeOptions,
} from './options';
import { pageTreeRoot, rebuildPageTree, walkPageTree } from './page-tree';
import { repairWithQpdf } from './qpdf';
import { Refusal } from './refusals';

export interface Opened {
  doc: PDFDocument;
  pages: number;
  repaired: boolean;
}

export async function openInput(
  data: Buffer,
  pageBudget: number,
  lim: Required<MergeLimits>,
  options: MergeOptions,
  who: () => Record<string, unknown>,
): Promise<Opened> {
  const log = options.logger;
  const logRecovery = (parsed: Parsed, fields: Record<string, unknown> = {}) => {
    if (parsed.recovered === 0) return;
    log?.warn(
      { ...who(), ...fields, recoveredPages: parsed.recovered },
      `the page tree of a damaged PDF was lost: recovered ${parsed.recovered} page(s) from orphaned page objects, in object order (the original order is unknown)`,
    );
  };

  let parseFailure: Refusal;
  try {
    const parsed = await parseChecked(data, pageBudget, lim.maxStructureBytes, true);
    logRecovery(parsed);
    return { doc: parsed.doc, pages: parsed.pages, repaired: parsed.recovered > 0 };
  } catch (e) {
    if (!(e instanceof Refusal) || e.kind !== 'unparseable') throw e;
    parseFailure = e;
  }

  // qpdf would inflate the object streams pdf-lib never reached (it stopped at the
  // damage): a lenient load within the same decode budget sees them first.
  await refuseBombsBeforeRepair(data, lim.maxStructureBytes);
  const repair = await repairWithQpdf(
    data,
    options.qpdfCommand ?? 'qpdf',
    lim.timeoutMs,
    {
      memoryBytes: lim.qpdfMemoryBytes,
      ...(options.prlimitCommand === undefined ? {} : { prlimitCommand: options.prlimitCommand }),
    },
    () => warnUnbounded(log),
  );
  if (!repair.ok) {
    if (repair.reason === 'encrypted') throw new Refusal('encrypted');
    log?.warn(
      { ...who(), reason: repair.reason, qpdf: repair.detail, parseError: parseFailure.reasonText },
      repair.reason === 'not-installed'
        ? 'qpdf is not installed: a damaged PDF cannot be repaired and is refused as unreadable'
        : 'qpdf could not repair a damaged PDF',
    );
    throw new Refusal(
      'unreadable',
      `${parseFailure.reasonText}; qpdf: ${repair.reason}`,
      parseFailure.cause,
    );
  }

  try {
    const parsed = await parseChecked(repair.data, pageBudget, lim.maxStructureBytes, true);
    log?.info({ ...who(), qpdf: repair.warnings }, 'repaired a damaged PDF with qpdf');
    logRecovery(parsed, { qpdf: repair.warnings });
    return { doc: parsed.doc, pages: parsed.pages, repaired: true };
  } catch (e) {
    if (!(e instanceof Refusal)) throw e;
    if (e.kind !== 'unparseable' && e.kind !== 'no-pages') throw e;
    log?.warn(
      { ...who(), qpdf: repair.warnings, repairedError: e.reasonText },
      'a PDF repaired by qpdf is still unusable',
    );
    throw new Refusal('unreadable', `after qpdf: ${e.reasonText}`, e.cause);
  }
}

/**
 * For a PDF a reader (PDFium) refused as unreadable: the file rewritten as a
 * merge opens a damaged input (`openInput`: pdf-lib within the merge's
 * limits, qpdf's repair after the bomb check when pdf-lib cannot parse it,
 * and a page tree rebuilt from the surviving page objects when the damage
 * took it), saved by pdf-lib; null when that fails (a bomb, qpdf missing or
 * failing, no pages), and the caller keeps its refusal.
 */
export async function repairForReading(
  data: Buffer,
  options: { timeoutMs: number; logger?: MergeOptions['logger'] },
): Promise<Buffer | null> {
  const lim = { ...PDF_MERGE_DEFAULTS, timeoutMs: options.timeoutMs };
  const mergeOptions: MergeOptions = options.logger ? { logger: options.logger } : {};
  try {
    const opened = await openInput(data, lim.maxPages, lim, mergeOptions, () => ({}));
    if (!opened.repaired) return null;
    return Buffer.from(await opened.doc.save({ objectsPerTick: OBJECTS_PER_TICK }));
  } catch (e) {
    if (e instanceof Refusal) return null;
    throw e;
  }
}

let warnedUnbounded = false;
function warnUnbounded(log: MergeOptions['logger']): void {
  if (warnedUnbounded) return;
  warnedUnbounded = true;
  log?.warn(
    'prlimit (util-linux) is not installed: qpdf repairs run without a memory or CPU limit',
  );
}

/**
 * A lenient load (invalid objects skipped, not fatal) within the decode
 * budget, for a file the strict load gave up on: the object and
 * cross-reference streams past the damage are measured before qpdf, which has
 * no budget, is given the file. The document is dropped.
 */
async function refuseBombsBeforeRepair(data: Buffer, structureBudget: number): Promise<void> {
  const decoding: DecodingBudget = { limit: structureBudget, left: structureBudget };
  await loadWithinBudget(decoding, () =>
    PDFDocument.load(data, {
      ignoreEncryption: true,
      throwOnInvalidObject: false,
      updateMetadata: false,
      parseSpeed: OBJECTS_PER_TICK,
    }),
  ).catch(() => undefined);
  if (decoding.refused) throw new Refusal('structure-too-large', decoding.refused);
}

interface Parsed {
  doc: PDFDocument;
  pages: number;
  /** Pages put in a rebuilt page tree (0: the file's own tree was used). */
  recovered: number;
}

/**
 * Load with pdf-lib and run every check; failures are `Refusal`s. With
 * `recover`, a lost or empty page tree is rebuilt from the page objects that
 * survive (`rebuildPageTree`) and checked like any other.
 */
export async function parseChecked(
  data: Buffer,
  pageBudget: number,
  structureBudget: number,
  recover = false,
): Promise<Parsed> {
  const decoding: DecodingBudget = { limit: structureBudget, left: structureBudget };
  let doc: PDFDocument | undefined;
  let loadError: unknown;
  try {
    doc = await loadWithinBudget(decoding, () =>
      PDFDocument.load(data, {
        ignoreEncryption: true, // detected below, reliably, instead of pdf-lib's exception
        throwOnInvalidObject: true, // anything pdf-lib would patch over goes to qpdf instead
        updateMetadata: false,
        parseSpeed: OBJECTS_PER_TICK,
      }),
    );
  } catch (e) {
    loadError = e;
  }
  // pdf-lib catches errors thrown while it parses an object (and reports another),
  // so a refused stream is known from the budget, whatever the load did next. It
  // is final: qpdf would inflate the same streams.
  if (decoding.refused) throw new Refusal('structure-too-large', decoding.refused);
  if (!doc) throw new Refusal('unparseable', `pdf-lib: ${errorText(loadError)}`, loadError);
  if (doc.isEncrypted) throw new Refusal('encrypted');

  const pageTree = (work: () => number) => {
    try {
      return work();
    } catch (e) {
      if (e instanceof Refusal) throw e;
      throw new Refusal('unparseable', `page tree: ${errorText(e)}`, e);
    }
  };

  const root = pageTreeRoot(doc);
  let pages = root === undefined ? 0 : pageTree(() => walkPageTree(doc, root, pageBudget));
  if (hasOrphanEncryptionDictionary(doc)) throw new Refusal('encrypted');

  let recovered = 0;
  if (pages === 0 && recover) {
    recovered = pageTree(() => rebuildPageTree(doc, pageBudget));
    // The rebuilt tree goes through the same walk: page budget, depth, /Parent chains.
    if (recovered > 0) pages = pageTree(() => walkPageTree(doc, pageTreeRoot(doc)!, pageBudget));
  }
  if (pages === 0) {
    throw root === undefined
      ? new Refusal('unparseable', 'page tree: the catalog has no /Pages')
      : new Refusal('no-pages');
  }
  return { doc, pages, recovered };
}

/**
 * pdf-lib knows a file is encrypted from the trailer's /Encrypt. A damaged file
 * can lose that entry while its strings and streams stay encrypted; copying them
 * would produce garbage, so an encryption dictionary anywhere counts too.
 */
function hasOrphanEncryptionDictionary(doc: PDFDocument): boolean {
  const has = (dict: PDFDict, key: string) => dict.has(PDFName.of(key));
  for (const [, object] of doc.context.enumerateIndirectObjects()) {
    if (!(object instanceof PDFDict)) continue;
    if (!(object.get(PDFName.of('Filter')) instanceof PDFName)) continue;
    if ((has(object, 'O') && has(object, 'U')) || has(object, 'Recipients')) return true;
  }
  return false;
}

function errorText(e: unknown): string {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}
