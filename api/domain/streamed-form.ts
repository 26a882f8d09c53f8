/**
 * What services see of a form (a multipart request): file parts as streams,
 * in form order, and text fields. The transport implements `FormReader`
 * (api/forms/multipart-form.ts); services decide the limits and what each
 * part means, and never touch the request itself.
 */
import type { Readable } from 'node:stream';

export interface FormLimits {
  /** Largest file, bytes. */
  maxFileSize: number;
  maxFiles: number;
  /** What the files are, in the 413 message when there are too many ("merge inputs"); default "files". */
  filesNoun?: string;
  maxFields?: number;
  maxFieldSize?: number;
  /** Parts of any kind (files, fields, parts the parser skips); default maxFiles + maxFields. */
  maxParts?: number;
  maxHeaderPairs?: number;
}

export interface FormFile {
  field: string;
  /** The client's filename, decoded as UTF-8; empty when the part had none. */
  filename: string;
  declaredType: string;
  stream: Readable;
}

/** Field name → every value sent under it, in order. */
export type FormFields = Map<string, string[]>;

export interface FormHandlers<T> {
  /** Called for each file part, with the fields seen so far. Must consume the stream or reject. */
  onFile(part: FormFile, fieldsSoFar: FormFields): Promise<T>;
  /**
   * Called with the name of each field before its value is looked at (so an
   * unknown or misplaced field is refused as such even when its value is over
   * the size limit); throw an AppError to refuse the request.
   */
  acceptField?(name: string): void;
  /** Called for each field within the size limit; throw an AppError to refuse the request. */
  onField?(name: string, value: string): void;
}

/**
 * Reads a form, calling the handlers in form order, and resolves with its
 * fields and what the file handlers returned. The first failure (a limit, a
 * malformed body, a handler that rejects, the client going away) stops the
 * read and rejects with that AppError once every handler has settled.
 */
export type FormReader = <T>(
  limits: FormLimits,
  handlers: FormHandlers<T>,
) => Promise<{ fields: FormFields; files: T[] }>;

/** The last value of a field (fields are taken as sent). */
export function lastField(fields: FormFields, name: string): string | undefined {
  const values = fields.get(name);
  return values?.[values.length - 1];
}
