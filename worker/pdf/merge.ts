/**
 * The merge itself: checks on the whole request, each distinct input opened
 * once (open.ts), its pages copied once per occurrence in input order, and the
 * result saved. The worker's merge job is its caller; it knows nothing of HTTP
 * or queues and reports every failure as an `AppError` that names the input
 * at fault (refusals.ts).
 *
 *  1. Cheap checks before any parsing: at least one input, total bytes within
 *     `maxInputBytes` (413), every input starts like a PDF (`%PDF-` within its
 *     first 1024 bytes, as readers accept; 415 that lists every input that
 *     does not), and an estimate of the objects pdf-lib would build within
 *     `maxObjects` (413).
 *  2. Identical inputs (same bytes) are parsed once; each occurrence still gets
 *     its own copy of the pages, so [A, B, A] gives A's pages, B's, A's again.
 *     Inputs that were repaired are reported in `repaired`.
 *  3. The pages are copied into a new document in input order and saved with
 *     object streams (smaller than a classic cross-reference table). The new
 *     document gets pdf-lib's default metadata (Producer, Creator,
 *     CreationDate, ModDate); sources are loaded with `updateMetadata: false`,
 *     since their Info dictionaries are not copied.
 *
 * Memory: inputs stay Buffers owned by the caller. Given a Buffer, pdf-lib's
 * parser and copier keep stream data as views into it, so the merged document
 * shares those bytes until it is saved into one new buffer. One source
 * document is parsed at a time; files of many small objects cost far more
 * than their size, which is what `maxObjects` bounds. Measured figures:
 * docs/performance.md, "PDF adapter".
 */
import { createHash } from 'node:crypto';
import { PDFDocument, type PDFPage } from 'pdf-lib';
import { Errors } from '@shared/errors';
import { estimateObjectCount } from './object-count';
import { openInput, parseChecked } from './open';
import {
  OBJECTS_PER_TICK,
  resolveLimits,
  type MergeLimits,
  type MergeOptions,
  type MergeResult,
  type PdfInput,
} from './options';
import { describe, detail, formatBytes, label, Refusal, toAppError } from './refusals';

/** Readers accept a PDF header anywhere in the first 1024 bytes. */
const HEADER_WINDOW = 1024;
const PDF_HEADER = Buffer.from('%PDF-', 'latin1');

export async function mergePdfs(
  inputs: PdfInput[],
  limits: MergeLimits = {},
  options: MergeOptions = {},
): Promise<MergeResult> {
  const lim = resolveLimits(limits);
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
  const lim = resolveLimits(limits);
  const inputs = [{ name: 'PDF', data }];
  try {
    if (!looksLikePdf(data)) throw new Refusal('unreadable', 'no PDF header');
    return (await parseChecked(data, lim.maxPages, lim.maxStructureBytes)).pages;
  } catch (e) {
    throw e instanceof Refusal ? toAppError(e, inputs, [0], lim) : e;
  }
}

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
