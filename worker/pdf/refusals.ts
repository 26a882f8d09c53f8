/**
 * Refusals and how they reach the client. Inside worker/pdf/ a failure is a
 * `Refusal` of a kind (some kinds are retried through qpdf, see open.ts);
 * `toAppError` turns it into the `AppError` the client sees.
 *
 * Messages name an input 1-based and quoted ("Input 3 (\"scan.pdf\") is
 * encrypted"), for a person; `details` carry the 0-based `index` (the position
 * in the `inputs` array, which is the order of the request) and the `name`, one
 * item per occurrence when the same bytes appear more than once.
 */
import { Errors, type AppError, type ErrorDetail } from '@shared/errors';
import type { MergeLimits, PdfInput } from './options';

export type RefusalKind =
  | 'unparseable' // pdf-lib failed: try qpdf
  | 'unreadable' // final: damaged beyond repair
  | 'encrypted'
  | 'no-pages'
  | 'too-many-pages'
  | 'tree-too-deep'
  | 'tree-cycle'
  | 'tree-too-large'
  | 'structure-too-large';

/** Internal signal; never leaves worker/pdf/ (`toAppError` maps it). */
export class Refusal extends Error {
  override readonly name = 'PdfRefusal';

  constructor(
    readonly kind: RefusalKind,
    readonly reasonText: string = kind,
    cause?: unknown,
  ) {
    super(reasonText, cause === undefined ? undefined : { cause });
  }
}

export function toAppError(
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
export function label(inputs: PdfInput[], index: number): string {
  return `Input ${index + 1} (${JSON.stringify(inputs[index]?.name ?? '')})`;
}

export function detail(inputs: PdfInput[], index: number, message: string): ErrorDetail {
  return { index, name: inputs[index]?.name ?? '', message };
}

export function describe(inputs: PdfInput[], occurrences: number[]): Record<string, unknown> {
  const first = occurrences[0]!;
  return { index: first, name: inputs[first]?.name, occurrences };
}

export function formatBytes(n: number): string {
  const MB = 1024 * 1024;
  return n >= MB ? `${+(n / MB).toFixed(1)} MB` : `${+(n / 1024).toFixed(1)} KB`;
}
