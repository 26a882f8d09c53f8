/**
 * PDF adapter: merges PDFs with pdf-lib and repairs damaged inputs with qpdf.
 * The worker's merge job is its caller; it knows nothing of HTTP or queues and
 * reports every failure as an `AppError` that names the input at fault.
 *
 * How a merge goes:
 *  1. Cheap checks on the whole request before any parsing: at least one
 *     input, total bytes within `maxInputBytes` (413), every input starts like
 *     a PDF (`%PDF-` within its first 1024 bytes, as readers accept; 415 that
 *     lists every input that does not), and an estimate of the objects pdf-lib
 *     would build within `maxObjects` (413).
 *  2. Identical inputs (same bytes) are parsed once; each occurrence still gets
 *     its own copy of the pages, so [A, B, A] gives A's pages, B's, A's again.
 *  3. Each distinct input is loaded strictly (`throwOnInvalidObject`), with the
 *     streams pdf-lib inflates while loading (object streams, cross-reference
 *     streams) bounded by `maxStructureBytes` (decompression bombs: 422; see
 *     `boundPdfLibDecoding`), checked for encryption (422 ENCRYPTED_PDF;
 *     passwords are never tried, and permission-only encryption is refused
 *     too: removing it would override the author's restrictions), and its
 *     page tree is walked iteratively with
 *     a page budget, a depth limit and cycle detection before pdf-lib's own
 *     recursive traversal ever runs (page bombs: 413; deep or cyclic trees:
 *     422).
 *  4. An input pdf-lib cannot parse is rewritten by qpdf (exit 0, or 3 for
 *     "succeeded with warnings") and parsed again; its index is reported in
 *     `repaired`. If qpdf fails, times out or is not installed, the input is
 *     unreadable (422); the log says why, the client message does not.
 *  5. Last resort, on the input as parsed (directly or after qpdf): when its
 *     catalog has no page tree (no /Pages, or /Pages null or lost) or an empty
 *     one while `/Type /Page` objects survive in the file, a new page tree is
 *     built from those pages (`rebuildPageTree`), and every check of step 3 runs
 *     again on it. The input is reported in `repaired` and a warning is logged.
 *     qpdf keeps unreferenced objects (`--preserve-unreferenced`) for this: by
 *     default it drops whatever the trailer no longer reaches, orphaned pages
 *     included. With no page object left, the input stays unreadable (422).
 *  6. The pages are copied into a new document in input order and saved with
 *     object streams: 7% smaller than a classic xref table on the corpus, for a
 *     few milliseconds more. The new document gets pdf-lib's default metadata
 *     (Producer, Creator, CreationDate, ModDate); sources are loaded with
 *     `updateMetadata: false`, since their Info dictionaries are not copied.
 *
 * Messages name an input 1-based and quoted ("Input 3 (\"scan.pdf\") is
 * encrypted"), for a person; `details` carry the 0-based `index` (the position
 * in the `inputs` array, which is the order of the request) and the `name`, one
 * item per occurrence when the same bytes appear more than once.
 *
 * Memory: inputs stay Buffers owned by the caller. Given a Buffer, pdf-lib's
 * parser and copier keep stream data as views into it (Buffer#slice does not
 * copy), so the merged document shares those bytes until it is saved into one
 * new buffer. Peak memory is about the inputs plus the output (roughly twice
 * the total input size: a 50 MB input measured +52 MB over the inputs) plus
 * about 2 KB per PDF object parsed or copied. Files of many small objects cost
 * far more than their size (500 small corpus files, 16 MB: +79 MB), which is
 * what `maxObjects` bounds. One source document is parsed at a time; a repaired
 * input adds qpdf's output as one more buffer.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  decodePDFRawStream,
  PDFArray,
  PDFDict,
  PDFDocument,
  PDFName,
  PDFNumber,
  PDFObjectStreamParser,
  PDFPageLeaf,
  PDFPageTree,
  PDFXRefStreamParser,
  type PDFObject,
  type PDFPage,
  type PDFRawStream,
  type PDFRef,
} from 'pdf-lib';
import { Errors, type AppError, type ErrorDetail } from '@shared/errors';
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
  /** Wall-clock limit of one qpdf repair, in milliseconds (the input is unreadable past it). */
  timeoutMs?: number;
}

export interface MergeOptions {
  /** Where repairs and qpdf failures are logged (a pino child logger of the job). */
  logger?: Pick<Logger, 'warn' | 'info'>;
  /** The qpdf executable, looked up on the PATH unless absolute. */
  qpdfCommand?: string;
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
};

/**
 * Deepest page tree accepted (root = depth 1). Real files stay under ten levels;
 * pdf-lib's traversal is recursive and overflows the stack near 10,000.
 */
export const MAX_PAGE_TREE_DEPTH = 256;

/** pdf-lib yields to the event loop after this many objects when parsing and saving. */
const OBJECTS_PER_TICK = 2_000;
/** qpdf's stderr kept for the log (warnings can be many; the rest is dropped). */
const MAX_QPDF_STDERR = 16 * 1024;
/** Readers accept a PDF header anywhere in the first 1024 bytes. */
const HEADER_WINDOW = 1024;
const PDF_HEADER = Buffer.from('%PDF-', 'latin1');
/**
 * The page size given to a recovered page that has no usable /MediaBox of its
 * own (it was inherited from the lost page-tree root): A4 in points, the size
 * pdf-lib itself gives a new page and the most common paper size worldwide.
 */
export const RECOVERED_PAGE_MEDIA_BOX: readonly number[] = [0, 0, 595.28, 841.89];

// ---------------------------------------------------------------------------
// Merge

export async function mergePdfs(
  inputs: PdfInput[],
  limits: MergeLimits = {},
  options: MergeOptions = {},
): Promise<MergeResult> {
  const lim = { ...PDF_MERGE_DEFAULTS, ...withoutUndefined(limits) };
  if (inputs.length === 0) throw Errors.badRequest('At least one PDF is needed for a merge');

  const totalBytes = inputs.reduce((n, input) => n + input.data.length, 0);
  if (totalBytes > lim.maxInputBytes) {
    throw Errors.payloadTooLarge(
      `The PDFs to merge total ${formatBytes(totalBytes)}, over the limit of ${formatBytes(lim.maxInputBytes)}`,
    );
  }

  const notPdf = inputs.flatMap((input, index) =>
    looksLikePdf(input.data) ? [] : [detail(inputs, index, 'not a PDF')],
  );
  const firstNotPdf = notPdf[0];
  if (firstNotPdf?.index !== undefined) {
    const more = notPdf.length > 1 ? ` (and ${notPdf.length - 1} more)` : '';
    throw Errors.unsupportedType(`${label(inputs, firstNotPdf.index)} is not a PDF${more}`, notPdf);
  }

  const occurrencesOf = groupIdentical(inputs);

  let objects = 0;
  for (const [index, occurrences] of occurrencesOf) {
    if (occurrences[0] !== index) continue;
    objects += estimateObjectCount(inputs[index]!.data);
    if (objects > lim.maxObjects) {
      throw Errors.payloadTooLarge(
        `${label(inputs, index)} brings the merge to about ${objects.toLocaleString('en')} PDF objects, over the limit of ${lim.maxObjects.toLocaleString('en')}`,
      );
    }
  }

  const merged = await PDFDocument.create();
  const copied: PDFPage[][] = [];
  const repaired: number[] = [];
  let pageTotal = 0;

  for (const [index, input] of inputs.entries()) {
    const occurrences = occurrencesOf.get(index)!;
    if (occurrences[0] !== index) continue; // parsed with its first occurrence

    const opened = await openInput(input.data, lim.maxPages - pageTotal, lim, options, () =>
      describe(inputs, occurrences),
    ).catch((e: unknown) => {
      throw e instanceof Refusal ? toAppError(e, inputs, occurrences, lim) : e;
    });

    pageTotal += opened.pages * occurrences.length;
    if (pageTotal > lim.maxPages) {
      throw toAppError(new Refusal('too-many-pages'), inputs, occurrences, lim);
    }
    if (opened.repaired) repaired.push(...occurrences);

    try {
      for (const i of occurrences) {
        // One copyPages call per occurrence: each copy of the pages gets its own
        // annotations (an annotation belongs to exactly one page).
        copied[i] = await merged.copyPages(opened.doc, opened.doc.getPageIndices());
      }
    } catch (e) {
      // Checked trees make this rare; a RangeError (stack overflow on a deep
      // resource graph) lands here too and leaves the process unharmed.
      throw toAppError(
        new Refusal('unreadable', 'pdf-lib could not copy its pages', e),
        inputs,
        occurrences,
        lim,
      );
    }
  }

  for (const pages of copied) for (const page of pages) merged.addPage(page);
  const bytes = await merged.save({
    useObjectStreams: true,
    addDefaultPage: false,
    updateFieldAppearances: false,
    objectsPerTick: OBJECTS_PER_TICK,
  });
  return {
    data: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength),
    pages: merged.getPageCount(),
    repaired: repaired.sort((a, b) => a - b),
  };
}

/**
 * Pages of one PDF, with the same checks as a merge (encryption, page tree,
 * `maxPages`) but no repair. Throws 422/413 `AppError`s for "The PDF".
 */
export async function countPages(data: Buffer, limits: MergeLimits = {}): Promise<number> {
  const lim = { ...PDF_MERGE_DEFAULTS, ...withoutUndefined(limits) };
  const inputs = [{ name: 'PDF', data }];
  try {
    if (!looksLikePdf(data)) throw new Refusal('unreadable', 'no PDF header');
    return (await parseChecked(data, lim.maxPages, lim.maxStructureBytes)).pages;
  } catch (e) {
    throw e instanceof Refusal ? toAppError(e, inputs, [0], lim) : e;
  }
}

// ---------------------------------------------------------------------------
// Opening one input: parse, check, repair

interface Opened {
  doc: PDFDocument;
  pages: number;
  repaired: boolean;
}

async function openInput(
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

  const repair = await repairWithQpdf(data, options.qpdfCommand ?? 'qpdf', lim.timeoutMs);
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
async function parseChecked(
  data: Buffer,
  pageBudget: number,
  structureBudget: number,
  recover = false,
): Promise<Parsed> {
  boundPdfLibDecoding();
  const decoding: DecodingBudget = { limit: structureBudget, left: structureBudget };
  let doc: PDFDocument | undefined;
  let loadError: unknown;
  try {
    doc = await decodingBudget.run(decoding, () =>
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
 * The catalog's /Pages, or `undefined` when there is none to walk: the entry is
 * missing, null, or points at an object that is lost or not a dictionary. A
 * dictionary that is not a page tree node is returned as is (the walk fails on
 * it, as pdf-lib would).
 */
function pageTreeRoot(doc: PDFDocument): PDFPageTree | undefined {
  const entry = doc.catalog.get(PDFName.of('Pages'));
  const root = entry === undefined ? undefined : doc.context.lookup(entry);
  return root instanceof PDFDict ? (root as PDFPageTree) : undefined;
}

/**
 * Counts the pages the way pdf-lib's `PDFPageTree.traverse` finds them, but
 * iteratively and within limits, so that pdf-lib's recursive traversal (and the
 * recursive `/Parent` ascent it does when copying) only ever runs on trees known
 * to be shallow, acyclic and within the page budget.
 */
function walkPageTree(doc: PDFDocument, root: PDFPageTree, pageBudget: number): number {
  const context = doc.context;
  const parentsChecked = new Set<PDFObject>();
  // Internal nodes a tree needs are fewer than its leaves; shared subtrees are
  // counted each time they are reached, so this also bounds a DAG's blow-up.
  const maxVisits = 2 * Math.max(pageBudget, 0) + 1_024;

  let pages = 0;
  let visits = 0;
  const stack: { node: PDFPageTree; kids: PDFArray; next: number }[] = [
    { node: root, kids: root.Kids(), next: 0 },
  ];
  const onPath = new Set<PDFPageTree>([root]);

  while (stack.length > 0) {
    const top = stack[stack.length - 1]!;
    if (top.next >= top.kids.size()) {
      stack.pop();
      onPath.delete(top.node);
      continue;
    }
    const kid = context.lookup(top.kids.get(top.next++));
    if (++visits > maxVisits) throw new Refusal('tree-too-large');
    if (kid instanceof PDFPageTree) {
      if (onPath.has(kid)) throw new Refusal('tree-cycle');
      if (stack.length >= MAX_PAGE_TREE_DEPTH) throw new Refusal('tree-too-deep');
      stack.push({ node: kid, kids: kid.Kids(), next: 0 });
      onPath.add(kid);
    } else if (kid instanceof PDFPageLeaf) {
      if (++pages > pageBudget) throw new Refusal('too-many-pages');
      checkParentChain(kid, parentsChecked);
    }
  }
  return pages;
}

/** pdf-lib climbs `/Parent` recursively when copying a page: the chain must end, soon. */
function checkParentChain(leaf: PDFPageLeaf, checked: Set<PDFObject>): void {
  const chain: PDFObject[] = [];
  let node: PDFObject | undefined = leaf.Parent();
  while (node !== undefined && !checked.has(node)) {
    if (!(node instanceof PDFPageTree || node instanceof PDFPageLeaf)) {
      throw new Error('a /Parent is not a page tree node');
    }
    if (chain.length >= MAX_PAGE_TREE_DEPTH) throw new Refusal('tree-too-deep');
    chain.push(node);
    node = node.Parent();
  }
  for (const n of chain) checked.add(n);
}

/** Attributes a page inherits from its ancestors in the page tree (ISO 32000-1, 7.7.3.4). */
const INHERITABLE = ['MediaBox', 'CropBox', 'Resources', 'Rotate'].map((key) => PDFName.of(key));

/**
 * Gives a document whose page tree is lost (or empty) a new one made of the
 * `/Type /Page` dictionaries that survive in it, and returns how many there
 * are (0: none survive and nothing is changed). Meant for damaged files whose
 * page-tree root was destroyed while the pages themselves were not.
 *
 * - Order: the pages go in object-number order. The real order lived in the
 *   lost tree and cannot be known; producers usually number page objects in
 *   reading order, so object order is the best guess. (qpdf renumbers the
 *   objects it writes but keeps these in their original order: the corpus's
 *   unreadablemetadata.pdf has its pages in objects 1, 43 and 178, 1, 43 and
 *   117 after qpdf.)
 * - Structure: one new /Pages node, every page a direct kid (/Kids, /Count,
 *   each page's /Parent rewritten). It is the catalog's /Pages from then on.
 * - Inherited attributes (/MediaBox, /CropBox, /Resources, /Rotate): a page
 *   lacking one takes it from its old ancestors if some of them survive.
 *   What lived on the lost root is gone, so a page without a usable /MediaBox
 *   gets `RECOVERED_PAGE_MEDIA_BOX` (A4) and one without /Resources an empty
 *   dictionary; a missing /Rotate means 0, the default, and is left out.
 * - Limits: collecting stops past `pageBudget` (413); the caller walks the
 *   new tree with every check an original tree gets.
 */
function rebuildPageTree(doc: PDFDocument, pageBudget: number): number {
  const context = doc.context;
  const typeKey = PDFName.of('Type');
  const pageType = PDFName.of('Page');

  const leaves: [PDFRef, PDFPageLeaf][] = [];
  // Sorted by object number (pdf-lib's enumerateIndirectObjects sorts).
  for (const [ref, object] of context.enumerateIndirectObjects()) {
    if (!(object instanceof PDFDict) || object.get(typeKey) !== pageType) continue;
    if (leaves.length >= pageBudget) throw new Refusal('too-many-pages');
    let leaf: PDFPageLeaf;
    if (object instanceof PDFPageLeaf) {
      leaf = object;
    } else {
      // pdf-lib's parser makes every /Type /Page dictionary a PDFPageLeaf; just in case.
      leaf = PDFPageLeaf.fromMapWithContext(new Map(object.entries()), context);
      context.assign(ref, leaf);
    }
    leaves.push([ref, leaf]);
  }
  if (leaves.length === 0) return 0;

  const root = PDFPageTree.withContext(context);
  const rootRef = context.register(root);
  const kids = root.Kids();
  for (const [ref, leaf] of leaves) {
    for (const key of INHERITABLE) {
      if (leaf.get(key) !== undefined) continue;
      const value = inheritedFromOldAncestors(doc, leaf, key);
      if (value !== undefined) leaf.set(key, value);
    }
    if (!isUsableBox(doc, leaf.get(PDFName.of('MediaBox')))) {
      leaf.set(PDFName.of('MediaBox'), context.obj([...RECOVERED_PAGE_MEDIA_BOX]));
    }
    if (!(context.lookup(leaf.get(PDFName.of('Resources'))) instanceof PDFDict)) {
      leaf.set(PDFName.of('Resources'), context.obj({}));
    }
    leaf.setParent(rootRef);
    kids.push(ref);
  }
  root.set(PDFName.of('Count'), PDFNumber.of(leaves.length));
  doc.catalog.set(PDFName.of('Pages'), rootRef);
  return leaves.length;
}

/**
 * `key` from the nearest surviving ancestor of `leaf` in its old tree, climbing
 * /Parent iteratively, at most `MAX_PAGE_TREE_DEPTH` nodes and never in a loop.
 */
function inheritedFromOldAncestors(
  doc: PDFDocument,
  leaf: PDFDict,
  key: PDFName,
): PDFObject | undefined {
  const parentKey = PDFName.of('Parent');
  const seen = new Set<PDFDict>();
  let node = doc.context.lookup(leaf.get(parentKey));
  while (node instanceof PDFDict && !seen.has(node) && seen.size < MAX_PAGE_TREE_DEPTH) {
    seen.add(node);
    const value = node.get(key);
    if (value !== undefined) return value;
    node = doc.context.lookup(node.get(parentKey));
  }
  return undefined;
}

/** A rectangle of four numbers with a positive width and height. */
function isUsableBox(doc: PDFDocument, value: PDFObject | undefined): boolean {
  const box = doc.context.lookup(value);
  if (!(box instanceof PDFArray) || box.size() !== 4) return false;
  const items = box.asArray().map((item) => doc.context.lookup(item));
  if (!items.every((item): item is PDFNumber => item instanceof PDFNumber)) return false;
  const [x1, y1, x2, y2] = items.map((item) => item.asNumber());
  const width = Math.abs(x2! - x1!);
  const height = Math.abs(y2! - y1!);
  return Number.isFinite(width) && Number.isFinite(height) && width > 0 && height > 0;
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

// ---------------------------------------------------------------------------
// pdf-lib's decoding, bounded

/** What one load may still inflate; set once a stream is refused. */
interface DecodingBudget {
  limit: number;
  left: number;
  refused?: string;
}

/** The budget of the load in progress (pdf-lib's parse awaits; loads may overlap). */
const decodingBudget = new AsyncLocalStorage<DecodingBudget>();

/**
 * pdf-lib's decoders (`DecodeStream` and its filters) as the check drives
 * them: one block at a time into the decoder's own buffer, which grows as
 * pdf-lib grows it. (Its `getBytes(n)` first sizes the buffer for `pos + n`
 * bytes, so reading in chunks of n allocated about 3n bytes per stream,
 * however small the stream: with n = 1 MiB, a merge of 50 small PDFs
 * allocated hundreds of MiB of zeroed buffers and spent most of its time on
 * them.) These members are protected in pdf-lib's typings.
 */
interface BlockDecoder {
  eof: boolean;
  bufferLength: number;
  readBlock(): void;
}

function isBlockDecoder(stream: object): stream is BlockDecoder {
  return 'readBlock' in stream && 'bufferLength' in stream && 'eof' in stream;
}

let decodingBounded = false;

/**
 * While it loads a file, pdf-lib decodes two kinds of streams in full, in
 * memory: object streams (`/Type /ObjStm`, which hold other objects) and
 * cross-reference streams (`/Type /XRef`). A few KB of Flate inflate to a
 * gigabyte (a filter chain such as `[/FlateDecode /FlateDecode]` to far more),
 * and pdf-lib reads as many cross-reference entries as `/Size` or `/Index`
 * claim, whatever the stream holds: measured before this guard, a 2.3 KB file
 * took 1 GB and 7.7 s, and a 308-byte file with `/Size 20000000` 3.3 GB and
 * 77 s. pdf-lib has no option for this, so its two factories
 * (`PDFObjectStreamParser.forStream`, `PDFXRefStreamParser.forStream`, which
 * its parser looks up at each call) are wrapped, once, to check the stream
 * first: its decoded length, read with pdf-lib's own decoders a megabyte at a
 * time, must fit in what is left of the load's `maxStructureBytes`, and a
 * cross-reference stream's data must hold the entries it claims. A refused
 * stream is recorded in the load's budget (pdf-lib swallows the exception and
 * reports a generic parse error) and `parseChecked` refuses the file.
 * Outside `parseChecked` (no budget) the factories behave as pdf-lib's own.
 */
function boundPdfLibDecoding(): void {
  if (decodingBounded) return;
  decodingBounded = true;
  const objectStream = PDFObjectStreamParser.forStream;
  PDFObjectStreamParser.forStream = (raw, shouldWaitForTick) => {
    checkStructureStream(raw, 'an object stream');
    return objectStream(raw, shouldWaitForTick);
  };
  const xrefStream = PDFXRefStreamParser.forStream;
  PDFXRefStreamParser.forStream = (raw) => {
    const decoded = checkStructureStream(raw, 'a cross-reference stream');
    if (decoded !== undefined) checkXrefEntries(raw, decoded);
    return xrefStream(raw);
  };
}

/** Decoded length of a stream pdf-lib is about to inflate, charged to the load's budget. */
function checkStructureStream(raw: PDFRawStream, what: string): number | undefined {
  const budget = decodingBudget.getStore();
  if (!budget) return undefined;
  const refuse = (reason: string): never => {
    budget.refused ??= reason;
    throw new Error(`refused: ${reason}`);
  };
  if (budget.refused) refuse(budget.refused);
  const stream = decodePDFRawStream(raw);
  let length: number;
  if (isBlockDecoder(stream)) {
    // A block at a time, so the check stops soon past its budget.
    while (!stream.eof && stream.bufferLength <= budget.left) stream.readBlock();
    length = stream.bufferLength;
  } else {
    length = stream.getBytes(0).length; // no filter: the bytes as stored
  }
  if (length > budget.left) {
    refuse(`${what} inflates past the limit of ${formatBytes(budget.limit)} of decoded structure`);
  }
  budget.left -= length;
  return length;
}

/** A cross-reference stream's entries (its /Index or /Size) must fit in its data. */
function checkXrefEntries(raw: PDFRawStream, decoded: number): void {
  const budget = decodingBudget.getStore();
  if (!budget) return;
  const dict = raw.dict;
  const numbers = (value: PDFObject | undefined): number[] | undefined => {
    const array = dict.context.lookup(value);
    if (!(array instanceof PDFArray)) return undefined;
    const items = array.asArray().map((item) => dict.context.lookup(item));
    return items.every((item): item is PDFNumber => item instanceof PDFNumber)
      ? items.map((item) => item.asNumber())
      : undefined;
  };
  const widths = numbers(dict.get(PDFName.of('W')));
  const index = numbers(dict.get(PDFName.of('Index')));
  const size = dict.context.lookup(dict.get(PDFName.of('Size')));
  // Malformed dictionaries are left to pdf-lib, which refuses them.
  if (!widths) return;
  const entries = index
    ? index.filter((_, i) => i % 2 === 1).reduce((a, b) => a + b, 0)
    : size instanceof PDFNumber
      ? size.asNumber()
      : undefined;
  if (entries === undefined) return;
  const width = Math.max(
    1,
    widths.reduce((a, b) => a + b, 0),
  );
  if (!(entries * width <= decoded)) {
    const reason = `a cross-reference stream claims ${entries.toLocaleString('en')} entries but holds data for ${Math.floor(decoded / width).toLocaleString('en')}`;
    budget.refused ??= reason;
    throw new Error(`refused: ${reason}`);
  }
}

// ---------------------------------------------------------------------------
// qpdf

type RepairOutcome =
  | { ok: true; data: Buffer; warnings: string }
  | {
      ok: false;
      reason: 'not-installed' | 'encrypted' | 'failed' | 'timeout' | 'output-too-large';
      detail: string;
    };

/**
 * Rewrites `data` with qpdf, which reconstructs damaged cross-reference tables
 * and stream lengths. Stream data is copied as is (`--stream-data=preserve`):
 * faster, and no decompression of possibly hostile streams. Objects nothing
 * refers to are kept (`--preserve-unreferenced`): when the page-tree root is
 * what the damage destroyed, the orphaned pages are all that is left to
 * rebuild a tree from (they are only read, never copied unless they become
 * pages). qpdf needs a
 * seekable input, so the bytes go through a private temporary directory that
 * is always removed. No shell is involved.
 */
async function repairWithQpdf(
  data: Buffer,
  command: string,
  timeoutMs: number,
): Promise<RepairOutcome> {
  const dir = await mkdtemp(join(tmpdir(), 'pdf-repair-'));
  try {
    const source = join(dir, 'in.pdf');
    const target = join(dir, 'out.pdf');
    await writeFile(source, data, { mode: 0o600 });
    const run = await runQpdf(
      command,
      ['--stream-data=preserve', '--preserve-unreferenced', source, target],
      timeoutMs,
    );

    if (run.spawnError === 'ENOENT') {
      return { ok: false, reason: 'not-installed', detail: `${command} not found` };
    }
    if (run.spawnError) return { ok: false, reason: 'failed', detail: run.spawnError };
    if (run.timedOut) {
      return { ok: false, reason: 'timeout', detail: `no result within ${timeoutMs} ms` };
    }
    // 0: success; 3: succeeded with warnings (the usual outcome of a repair).
    if (run.code !== 0 && run.code !== 3) {
      const encrypted = /invalid password/i.test(run.stderr);
      return {
        ok: false,
        reason: encrypted ? 'encrypted' : 'failed',
        detail: run.stderr || `exit ${run.code ?? run.signal}`,
      };
    }
    const size = (await stat(target)).size;
    if (size > 2 * data.length + 1024 * 1024) {
      return { ok: false, reason: 'output-too-large', detail: `${size} bytes from ${data.length}` };
    }
    return { ok: true, data: await readFile(target), warnings: run.stderr };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

interface QpdfRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
  timedOut: boolean;
  spawnError?: string;
}

function runQpdf(command: string, args: string[], timeoutMs: number): Promise<QpdfRun> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'], windowsHide: true });
    let stderr = '';
    let timedOut = false;
    let spawnError: string | undefined;
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => {
      if (stderr.length < MAX_QPDF_STDERR)
        stderr += chunk.slice(0, MAX_QPDF_STDERR - stderr.length);
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    const done = (code: number | null, signal: NodeJS.Signals | null) => {
      clearTimeout(timer);
      resolve({ code, signal, stderr: stderr.trim(), timedOut, spawnError });
    };
    child.on('error', (e: NodeJS.ErrnoException) => {
      spawnError = e.code ?? e.message;
      if (child.pid === undefined) done(null, null); // never started (no 'close' guaranteed)
    });
    // After the process exits and its stderr is drained, so the temporary
    // directory is removed only once qpdf is gone.
    child.on('close', done);
  });
}

// ---------------------------------------------------------------------------
// Refusals and how they reach the client

type RefusalKind =
  | 'unparseable' // pdf-lib failed: try qpdf
  | 'unreadable' // final: damaged beyond repair
  | 'encrypted'
  | 'no-pages'
  | 'too-many-pages'
  | 'tree-too-deep'
  | 'tree-cycle'
  | 'tree-too-large'
  | 'structure-too-large';

/** Internal signal; never leaves this module (`toAppError` maps it). */
class Refusal extends Error {
  override readonly name = 'PdfRefusal';

  constructor(
    readonly kind: RefusalKind,
    readonly reasonText: string = kind,
    cause?: unknown,
  ) {
    super(reasonText, cause === undefined ? undefined : { cause });
  }
}

function toAppError(
  refusal: Refusal,
  inputs: PdfInput[],
  occurrences: number[],
  lim: Required<MergeLimits>,
): AppError {
  const first = occurrences[0]!;
  const who = label(inputs, first);
  const details = (message: string) => occurrences.map((i) => detail(inputs, i, message));
  switch (refusal.kind) {
    case 'encrypted':
      return Errors.encryptedPdf(
        `${who} is encrypted or password-protected; encrypted PDFs cannot be merged`,
        details('encrypted'),
      );
    case 'no-pages':
      return Errors.unreadable(`${who} has no pages`, details('no pages'));
    case 'tree-too-deep':
    case 'tree-cycle':
    case 'tree-too-large':
      return Errors.unreadable(
        `${who} is not a readable PDF: its page tree is malformed`,
        details(`malformed page tree (${refusal.kind})`),
      );
    case 'structure-too-large':
      // 422, like an image over the pixel limit: the request and the file are
      // small; the file is of an accepted type that this service declines to
      // decode.
      return Errors.unreadable(
        `${who} is refused as a decompression bomb: ${refusal.reasonText}`,
        details('compressed structure over the limit'),
      );
    case 'too-many-pages':
      // 413, like every other "over its limit"; the factory takes no details,
      // so the input is named in the message only.
      return Errors.payloadTooLarge(
        `${who} takes the merged PDF over the limit of ${lim.maxPages.toLocaleString('en')} pages`,
      );
    case 'unparseable':
    case 'unreadable':
      return Errors.unreadable(
        `${who} is damaged and could not be read`,
        details('damaged PDF'),
        refusal,
      );
  }
}

/** `Input 3 ("scan.pdf")`: 1-based, for a person. */
function label(inputs: PdfInput[], index: number): string {
  return `Input ${index + 1} (${JSON.stringify(inputs[index]?.name ?? '')})`;
}

function detail(inputs: PdfInput[], index: number, message: string): ErrorDetail {
  return { index, name: inputs[index]?.name ?? '', message };
}

function describe(inputs: PdfInput[], occurrences: number[]): Record<string, unknown> {
  const first = occurrences[0]!;
  return { index: first, name: inputs[first]?.name, occurrences };
}

// ---------------------------------------------------------------------------
// Helpers

function looksLikePdf(data: Buffer): boolean {
  const at = data.subarray(0, HEADER_WINDOW + PDF_HEADER.length).indexOf(PDF_HEADER);
  return at !== -1 && at <= HEADER_WINDOW;
}

/** input index → indexes of every input with the same bytes (ascending; shared arrays). */
function groupIdentical(inputs: PdfInput[]): Map<number, number[]> {
  const byHash = new Map<string, number[]>();
  const result = new Map<number, number[]>();
  inputs.forEach((input, index) => {
    const hash = createHash('sha256').update(input.data).digest('base64');
    let group = byHash.get(hash);
    if (!group) byHash.set(hash, (group = []));
    group.push(index);
    result.set(index, group);
  });
  return result;
}

const WHITESPACE = new Set([0x00, 0x09, 0x0a, 0x0c, 0x0d, 0x20]);
const OBJ = Buffer.from('obj', 'latin1');
const OBJSTM = Buffer.from('/ObjStm', 'latin1');

/**
 * About how many objects pdf-lib would build from `data`, without parsing it:
 * indirect object headers (`12 0 obj`: "obj" after whitespace, which "endobj"
 * is not) plus the `/N` of every object stream. An estimate, good enough to
 * refuse files of millions of tiny objects before they cost gigabytes.
 */
function estimateObjectCount(data: Buffer): number {
  let count = 0;
  for (let at = data.indexOf(OBJ); at !== -1; at = data.indexOf(OBJ, at + OBJ.length)) {
    if (at > 0 && WHITESPACE.has(data[at - 1]!)) count++;
  }
  for (let at = data.indexOf(OBJSTM); at !== -1; at = data.indexOf(OBJSTM, at + OBJSTM.length)) {
    const around = data.toString('latin1', Math.max(0, at - 256), at + 256);
    const n = /\/N\s+(\d{1,9})\b/.exec(around);
    if (n) count += Number(n[1]);
  }
  return count;
}

function withoutUndefined(limits: MergeLimits): MergeLimits {
  return Object.fromEntries(Object.entries(limits).filter(([, v]) => v !== undefined));
}

function errorText(e: unknown): string {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}

function formatBytes(n: number): string {
  const MB = 1024 * 1024;
  return n >= MB ? `${+(n / MB).toFixed(1)} MB` : `${+(n / 1024).toFixed(1)} KB`;
}
