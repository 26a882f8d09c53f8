/**
 * What services see of a multipart form: its file parts as streams, in form
 * order, then its text fields, typed. The route declares the form (which
 * names its file parts and text fields have, their limits, what is refused:
 * api/forms/form-spec.ts) and the transport reads it; the service decides
 * what each file becomes and never sees a field name or the request.
 */
import type { Readable } from 'node:stream';

export interface FormFile {
  /** The client's filename, decoded as UTF-8; empty when the part had none. */
  filename: string;
  declaredType: string;
  stream: Readable;
}

export interface FormHandlers<Fields, Item, T> {
  /**
   * Called for each file part, in form order, with the text fields read so
   * far (only those sent before it). Must consume the stream or reject.
   */
  onFile(file: FormFile, fieldsSoFar: Partial<Fields>): Promise<T>;
  /**
   * Called for each entry of the form's list field, in form order among the
   * files (a merge's stored keys); throw an AppError to refuse the request.
   */
  onItem?(item: Item): void;
}

/**
 * A form as it streams, read once by the service it is handed to: resolves
 * with its text fields and what `onFile` returned for each file. The first
 * failure (a limit, a malformed body, a refused field, a handler that
 * rejects, the client going away) stops the read and rejects with that
 * AppError once every handler has settled, so the service can clean up what
 * was stored.
 */
export interface StreamedForm<Fields, Item = never> {
  read<T>(handlers: FormHandlers<Fields, Item, T>): Promise<{ fields: Fields; files: T[] }>;
}
