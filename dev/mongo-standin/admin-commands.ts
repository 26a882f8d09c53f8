// Handshake, server information and sessions: hello/isMaster (what the
// drivers ask first and then poll), ping, buildInfo, getParameter, the session
// commands (accepted, nothing to do: there are no server-side sessions), and
// the transaction commands, refused as a standalone mongod refuses them.

import type { Doc } from './bson-values';
import { MongoCommandError } from './command-errors';
import type { CommandContext, CommandHandler } from './command-context';
import { MAX_BSON_OBJECT_SIZE } from './storage-engine';
import { MAX_MESSAGE_SIZE } from './wire-protocol';

/** Wire version 21 = MongoDB 7.0 (driver 7.8 accepts 9 to 29, i.e. MongoDB 4.4 to 9.0). */
export const MAX_WIRE_VERSION = 21;
export const SERVER_VERSION = '7.0.0';
const MAX_WRITE_BATCH_SIZE = 100_000;
const LOGICAL_SESSION_TIMEOUT_MINUTES = 30;

export function helloReply(ctx: CommandContext, legacy: boolean): Doc {
  const reply: Doc = {};
  if (ctx.command.helloOk !== undefined) reply.helloOk = true;
  if (legacy) reply.ismaster = true;
  else reply.isWritablePrimary = true;
  // No setName (standalone), no compression, no topologyVersion (so drivers poll
  // instead of using the streaming hello protocol), no saslSupportedMechs (no auth).
  Object.assign(reply, {
    maxBsonObjectSize: MAX_BSON_OBJECT_SIZE,
    maxMessageSizeBytes: MAX_MESSAGE_SIZE,
    maxWriteBatchSize: MAX_WRITE_BATCH_SIZE,
    localTime: new Date(),
    logicalSessionTimeoutMinutes: LOGICAL_SESSION_TIMEOUT_MINUTES,
    connectionId: ctx.connectionId,
    minWireVersion: 0,
    maxWireVersion: MAX_WIRE_VERSION,
    readOnly: false,
  });
  return reply;
}

export const buildInfo: CommandHandler = () => ({
  version: SERVER_VERSION,
  gitVersion: 'mongo-standin',
  versionArray: SERVER_VERSION.split('.').map(Number).concat([0]),
  bits: 64,
  debug: false,
  maxBsonObjectSize: MAX_BSON_OBJECT_SIZE,
  storageEngines: ['mongo-standin'],
  javascriptEngine: 'none',
  modules: [],
  openssl: { running: 'disabled' },
});

const PARAMETERS: Doc = {
  featureCompatibilityVersion: { version: SERVER_VERSION.split('.').slice(0, 2).join('.') },
  authenticationMechanisms: [],
  logLevel: 0,
  quiet: false,
};

export const getParameter: CommandHandler = (ctx) => {
  if (ctx.command.getParameter === '*') return { ...PARAMETERS };
  const reply: Doc = {};
  for (const field of Object.keys(ctx.command)) {
    if (Object.hasOwn(PARAMETERS, field)) reply[field] = PARAMETERS[field];
  }
  if (Object.keys(reply).length === 0) {
    throw new MongoCommandError('InvalidOptions', 'no option found to get');
  }
  return reply;
};

export const notOnStandalone: CommandHandler = () => {
  throw new MongoCommandError(
    'IllegalOperation',
    'Transaction numbers are only allowed on a replica set member or mongos',
  );
};

export const ok: CommandHandler = () => ({});
