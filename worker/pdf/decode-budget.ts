/**
 * The decode budget: bounds what pdf-lib inflates while it loads a file.
 * pdf-lib decodes object streams and cross-reference streams in full, in
 * memory, with no option to limit them, so a file of a few KB could take
 * gigabytes (see `boundPdfLibDecoding`). Each load runs with a budget
 * (`loadWithinBudget`); a stream that would exceed it is refused and recorded
 * in the budget, which the caller turns into a refusal.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import {
  decodePDFRawStream,
  PDFArray,
  PDFName,
  PDFNumber,
  PDFObjectStreamParser,
  PDFXRefStreamParser,
  type PDFObject,
  type PDFRawStream,
} from 'pdf-lib';
import { formatBytes } from './refusals';

/** What one load may still inflate; set once a stream is refused. */
export interface DecodingBudget {
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
 * however small the stream; docs/performance.md has what that cost.) These
 * members are protected in pdf-lib's typings.
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
 * claim, whatever the stream holds (what that cost before this guard:
 * docs/performance.md). pdf-lib has no option for this, so its two factories
 * (`PDFObjectStreamParser.forStream`, `PDFXRefStreamParser.forStream`, which
 * its parser looks up at each call) are wrapped, once, to check the stream
 * first: its decoded length, read with pdf-lib's own decoders a block at a
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

/**
 * Runs `load` (a pdf-lib load) with `budget` as the decoding budget of that
 * load; pdf-lib's factories are wrapped first, once per process.
 */
export function loadWithinBudget<T>(budget: DecodingBudget, load: () => Promise<T>): Promise<T> {
  boundPdfLibDecoding();
  return decodingBudget.run(budget, load);
}
