// Every command the stand-in answers, in one table: command name → handler.
// A handler gets the (typed) command document and answers the reply fields;
// `runCommand` adds `ok: 1`, or turns any exception into MongoDB's error reply
// `{ ok: 0, errmsg, code, codeName }`. Handlers are synchronous, so each
// command's read-modify-write is atomic with respect to every other command.
//
// Fields every command may carry and the stand-in ignores: lsid, txnNumber,
// $clusterTime, $readPreference, readConcern, writeConcern, comment, maxTimeMS,
// hint, allowDiskUse, apiVersion/apiStrict/apiDeprecationErrors,
// bypassDocumentValidation.
//
// The handlers live by family: admin-commands.ts, write-commands.ts,
// read-commands.ts, index-commands.ts, collection-commands.ts; what they share
// (the context, option parsing, cursor replies) is command-context.ts.

import type { Doc } from './bson-values';
import { ERRORS, toCommandError } from './command-errors';
import {
  buildInfo,
  getParameter,
  helloReply,
  notOnStandalone,
  ok,
  serverStatus,
  setParameter,
} from './admin-commands';
import {
  collMod,
  create,
  drop,
  dropDatabase,
  listCollections,
  listDatabases,
} from './collection-commands';
import type { CommandContext, CommandHandler } from './command-context';
import { createIndexes, dropIndexes, listIndexes } from './index-commands';
import { aggregate, count, distinct, find, getMore, killCursors } from './read-commands';
import { findAndModify, insert, remove, update } from './write-commands';

export type { CommandContext, CommandHandler } from './command-context';

/** Command name → handler. Lookup is exact (MongoDB command names are case sensitive). */
export const COMMAND_HANDLERS: ReadonlyMap<string, CommandHandler> = new Map<
  string,
  CommandHandler
>([
  ['hello', (ctx) => helloReply(ctx, false)],
  ['isMaster', (ctx) => helloReply(ctx, true)],
  ['ismaster', (ctx) => helloReply(ctx, true)],
  ['ping', ok],
  ['buildInfo', buildInfo],
  ['buildinfo', buildInfo],
  ['getParameter', getParameter],
  ['setParameter', setParameter],
  ['serverStatus', serverStatus],
  ['endSessions', ok],
  ['refreshSessions', ok],
  ['killSessions', ok],
  ['killAllSessions', ok],
  ['commitTransaction', notOnStandalone],
  ['abortTransaction', notOnStandalone],
  ['insert', insert],
  ['update', update],
  ['delete', remove],
  ['findAndModify', findAndModify],
  ['findandmodify', findAndModify],
  ['find', find],
  ['getMore', getMore],
  ['killCursors', killCursors],
  ['aggregate', aggregate],
  ['count', count],
  ['distinct', distinct],
  ['createIndexes', createIndexes],
  ['listIndexes', listIndexes],
  ['dropIndexes', dropIndexes],
  ['deleteIndexes', dropIndexes],
  ['listCollections', listCollections],
  ['create', create],
  ['collMod', collMod],
  ['drop', drop],
  ['dropDatabase', dropDatabase],
  [
    'explain',
    () => {
      throw ERRORS.notImplemented('explain');
    },
  ],
  ['listDatabases', listDatabases],
]);

/** Commands a current server still accepts over legacy OP_QUERY. */
export const OP_QUERY_COMMANDS = new Set(['hello', 'isMaster', 'ismaster']);

/**
 * Runs one command and answers its reply document. Never throws: failures
 * become `{ ok: 0, errmsg, code, codeName }`.
 */
export function runCommand(ctx: CommandContext): Doc {
  const name = Object.keys(ctx.command)[0];
  try {
    if (name === undefined) throw ERRORS.failedToParse('empty command document');
    const handler = COMMAND_HANDLERS.get(name);
    if (!handler) throw ERRORS.commandNotFound(name);
    if (ctx.command.startTransaction !== undefined || ctx.command.autocommit !== undefined) {
      notOnStandalone(ctx);
    }
    const reply = handler(ctx);
    if (!('ok' in reply)) reply.ok = 1;
    return reply;
  } catch (error) {
    const commandError = toCommandError(error);
    if (commandError.codeName === 'InternalError') {
      ctx.logger?.error(
        { err: error, command: name, db: ctx.db },
        'mongo stand-in: command failed unexpectedly',
      );
    } else {
      ctx.logger?.debug(
        { command: name, db: ctx.db, code: commandError.code, errmsg: commandError.message },
        'mongo stand-in: command error',
      );
    }
    return commandError.toReply();
  }
}
