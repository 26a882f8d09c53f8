/**
 * A route's multipart form, declared: the names its file parts may have, its
 * text fields, an optional list field whose entries come in form order among
 * the files (a merge's stored keys), its limits, and how a part the form does
 * not take is refused. `streamedForm` reads a request by its declaration
 * (with api/forms/multipart-form.ts, still streaming) and hands the service a
 * `StreamedForm`: typed text fields and each file as a stream, no field name.
 */
import type { Request } from 'express';
import { Errors } from '@shared/errors';
import type { FormHandlers, StreamedForm } from '../domain/streamed-form';
import { lastField, readMultipart, type FormFields, type PartHandlers } from './multipart-form';

export interface FormSpec<Name extends string = string, Item = unknown> {
  files: {
    /** The names a file part may have; messages name the first. */
    names: readonly [string, ...string[]];
    /** What the files are, as a part under another name is told (`send PDFs as "files"`); default "files". */
    are?: string;
    /** At most this many file parts (413 TOO_MANY_FILES, naming them as `noun`: default "files"). */
    max: number;
    noun?: string;
    /** The largest file, bytes (413 FILE_TOO_LARGE). */
    maxBytes: number;
    /** The 400 when the form has no file (nor list entry); default `a file part named "<name>" is required`. */
    required?: string;
  };
  /** The text fields, each read as its last value (a field sent twice counts once). */
  fields: readonly Name[];
  /** A field whose every value is read, as it arrives, into entries (`read` throws an AppError to refuse one). */
  list?: { name: string; aliases?: readonly string[]; read(value: string): Item[] };
  /** At most this many text fields (413 TOO_MANY_PARTS). */
  maxFields: number;
  /**
   * When a text field's name is checked: `first`, before its value is read
   * (a name the form does not take is refused as such even when its value is
   * over the size limit, and a text part under the file's name is told to be
   * a file part; the message lists the text fields), or `in-order`, with its
   * value, as one of the form's inputs (the message lists every field).
   */
  names: 'first' | 'in-order';
}

/** The typed text fields of a form declared with these names. */
export type FormFieldsOf<Name extends string> = { [K in Name]?: string | undefined };

/** A declaration, typed by its field names and list entries (a helper for `const` inference). */
export function formSpec<const Name extends string, Item = never>(
  spec: FormSpec<Name, Item>,
): FormSpec<Name, Item> {
  return spec;
}

/**
 * The form of `req` as its route declared it; `idleTimeoutMs` cuts a body
 * that sends nothing for that long (408). Nothing is read before the service
 * calls `read`.
 */
export function streamedForm<Name extends string, Item>(
  req: Request,
  spec: FormSpec<Name, Item>,
  options: { idleTimeoutMs?: number | undefined } = {},
): StreamedForm<FormFieldsOf<Name>, Item> {
  const { files, fields: names, list } = spec;
  const [fileName] = files.names;
  const isList = (name: string) =>
    list !== undefined && [list.name, ...(list.aliases ?? [])].includes(name);
  const typed = (form: FormFields): FormFieldsOf<Name> => {
    const out: FormFieldsOf<Name> = {};
    for (const name of names) if (form.has(name)) out[name] = lastField(form, name);
    return out;
  };
  const unknown = (name: string) => {
    const accepted =
      spec.names === 'first' ? names : [fileName, ...(list ? [list.name] : []), ...names];
    return Errors.validation([
      { field: name, message: `unknown field "${name}" (accepted: ${accepted.join(', ')})` },
    ]);
  };
  return {
    read: async <T>(handlers: FormHandlers<FormFieldsOf<Name>, Item, T>) => {
      // File parts and list entries taken: a form needs one of either.
      let inputs = 0;
      const partHandlers: PartHandlers<T> = {
        onFile: (part, fieldsSoFar) => {
          if (!files.names.includes(part.field)) {
            throw Errors.validation([
              {
                field: part.field,
                message: `unexpected file field "${part.field}" (send ${files.are ?? 'files'} as "${fileName}")`,
              },
            ]);
          }
          inputs++;
          const { filename, declaredType, stream } = part;
          return handlers.onFile({ filename, declaredType, stream }, typed(fieldsSoFar));
        },
        acceptField:
          spec.names === 'first'
            ? (name) => {
                if (name === fileName) {
                  throw Errors.validation([
                    { field: name, message: `"${name}" must be a file part (with a filename)` },
                  ]);
                }
                if (!isList(name) && !(names as readonly string[]).includes(name)) {
                  throw unknown(name);
                }
              }
            : undefined,
        onField: (name, value) => {
          if (isList(name)) {
            for (const item of list!.read(value)) {
              inputs++;
              handlers.onItem?.(item);
            }
          } else if (!(names as readonly string[]).includes(name)) {
            throw unknown(name);
          }
        },
      };
      const read = await readMultipart(
        req,
        {
          maxFileSize: files.maxBytes,
          maxFiles: files.max,
          filesNoun: files.noun,
          maxFields: spec.maxFields,
          idleTimeoutMs: options.idleTimeoutMs,
        },
        partHandlers,
      );
      if (inputs === 0) {
        throw Errors.validation([
          {
            field: fileName,
            message: files.required ?? `a file part named "${fileName}" is required`,
          },
        ]);
      }
      return { fields: typed(read.fields), files: read.files };
    },
  };
}
