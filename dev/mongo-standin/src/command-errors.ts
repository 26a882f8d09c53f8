// Errors a command handler can raise, shaped like MongoDB's own: a numeric code,
// its codeName, a message, and any extra reply fields (keyPattern/keyValue for
// duplicate keys). The server turns every one of them into an `{ ok: 0, ... }`
// reply; nothing here ever reaches the socket as an exception.

import type { Doc } from './bson-values';

/** MongoDB error codes the stand-in answers with, and their codeNames. */
export const ERROR_CODES = {
  InternalError: 1,
  BadValue: 2,
  FailedToParse: 9,
  Unauthorized: 13,
  TypeMismatch: 14,
  IllegalOperation: 20,
  NamespaceNotFound: 26,
  PathNotViable: 28,
  IndexNotFound: 27,
  ConflictingUpdateOperators: 40,
  DocumentValidationFailure: 121,
  CursorNotFound: 43,
  NamespaceExists: 48,
  DollarPrefixedFieldName: 52,
  EmptyFieldName: 56,
  CommandNotFound: 59,
  ImmutableField: 66,
  CannotCreateIndex: 67,
  InvalidOptions: 72,
  InvalidNamespace: 73,
  IndexOptionsConflict: 85,
  IndexKeySpecsConflict: 86,
  CommandNotSupported: 115,
  NotImplemented: 238,
  UnsupportedOpQueryCommand: 352,
  DuplicateKey: 11000,
  BSONObjectTooLarge: 10334,
  Location40571: 40571,
  Location40573: 40573,
  Location40324: 40324,
} as const;

export type ErrorCodeName = keyof typeof ERROR_CODES;

export class MongoCommandError extends Error {
  readonly code: number;
  readonly codeName: string;
  /** Extra fields copied into the error reply or write error (e.g. keyPattern, keyValue). */
  readonly extra: Doc;

  constructor(codeName: ErrorCodeName, message: string, extra: Doc = {}) {
    super(message);
    this.name = 'MongoCommandError';
    this.codeName = codeName;
    this.code = ERROR_CODES[codeName];
    this.extra = extra;
  }

  /** The reply document for a failed command. */
  toReply(): Doc {
    return { ok: 0, errmsg: this.message, code: this.code, codeName: this.codeName, ...this.extra };
  }

  /** The entry for a `writeErrors` array of a write command. */
  toWriteError(index: number): Doc {
    return { index, code: this.code, errmsg: this.message, ...this.extra };
  }
}

/** Named factories for the errors raised in more than one place. */
export const ERRORS = {
  commandNotFound: (name: string) =>
    new MongoCommandError('CommandNotFound', `no such command: '${name}'`),
  badValue: (message: string) => new MongoCommandError('BadValue', message),
  failedToParse: (message: string) => new MongoCommandError('FailedToParse', message),
  typeMismatch: (field: string, expected: string) =>
    new MongoCommandError(
      'TypeMismatch',
      `BSON field '${field}' is the wrong type, expected ${expected}`,
    ),
  namespaceNotFound: (ns: string) =>
    new MongoCommandError('NamespaceNotFound', `ns does not exist: ${ns}`),
  invalidNamespace: (message: string) => new MongoCommandError('InvalidNamespace', message),
  notImplemented: (what: string) =>
    new MongoCommandError('NotImplemented', `${what} is not supported by the MongoDB stand-in`),
  immutableId: () =>
    new MongoCommandError(
      'ImmutableField',
      "Performing an update on the path '_id' would modify the immutable field '_id'",
    ),
} as const;

/** Turns any thrown value into a command error (unknown failures become InternalError/BadValue). */
export function toCommandError(error: unknown): MongoCommandError {
  if (error instanceof MongoCommandError) return error;
  if (error instanceof Error) {
    // mingo raises MingoError for invalid queries, operators and update paths:
    // MongoDB reports those as BadValue.
    if (error.constructor.name === 'MingoError')
      return new MongoCommandError('BadValue', error.message);
    return new MongoCommandError('InternalError', error.message);
  }
  return new MongoCommandError('InternalError', String(error));
}
