// Handshake, server information and sessions: hello/isMaster (what the
// drivers ask first and then poll), ping, buildInfo, getParameter, the session
// commands (accepted, nothing to do: there are no server-side sessions), and
// the transaction commands, refused as a standalone mongod refuses them;
// serverStatus (the fields a client reads: version, uptime, connections) and
// setParameter (of the parameters getParameter reports).

import { hostname } from 'node:os';

import { Long } from 'bson';

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
  // The TTL monitor's period (ttl-monitor.ts).
  ttlMonitorSleepSecs: 60,
  ttlMonitorEnabled: true,
  notablescan: false,
  cursorTimeoutMillis: 600_000,
};

/** The TTL monitor's period (setParameter ttlMonitorSleepSecs). */
export function ttlMonitorSleepSecs(): number {
  const value = PARAMETERS.ttlMonitorSleepSecs;
  return typeof value === 'number' ? value : Number((value as { value?: unknown })?.value ?? 60);
}

/** Parameters setParameter may change (others are read-only or unknown). */
const SETTABLE = new Set([
  'logLevel',
  'quiet',
  'ttlMonitorSleepSecs',
  'ttlMonitorEnabled',
  'cursorTimeoutMillis',
]);

const COMMAND_ARGUMENTS = new Set([
  'lsid',
  '$db',
  '$clusterTime',
  '$readPreference',
  'comment',
  'apiVersion',
  'apiStrict',
  'apiDeprecationErrors',
]);

export const setParameter: CommandHandler = (ctx) => {
  const reply: Doc = {};
  const fields = Object.keys(ctx.command).filter(
    (field) => field !== 'setParameter' && !COMMAND_ARGUMENTS.has(field),
  );
  if (fields.length === 0) {
    throw new MongoCommandError(
      'InvalidOptions',
      'no option found to set, use help:true to see options ',
    );
  }
  for (const field of fields) {
    if (!Object.hasOwn(PARAMETERS, field)) {
      throw new MongoCommandError(
        'InvalidOptions',
        `attempted to set unrecognized parameter [${field}], use help:true to see options `,
      );
    }
    if (!SETTABLE.has(field)) {
      throw new MongoCommandError(
        'IllegalOperation',
        `not allowed to change [${field}] at runtime`,
      );
    }
  }
  for (const field of fields) {
    if (!('was' in reply)) reply.was = PARAMETERS[field];
    PARAMETERS[field] = ctx.command[field];
  }
  return reply;
};

const startedAt = Date.now();

export const serverStatus: CommandHandler = (ctx) => {
  const uptimeMillis = Date.now() - startedAt;
  const memory = process.memoryUsage();
  return {
    host: `${hostname()}`,
    version: SERVER_VERSION,
    process: 'mongod',
    pid: Long.fromNumber(process.pid),
    uptime: Math.floor(uptimeMillis / 1000),
    uptimeMillis: Long.fromNumber(uptimeMillis),
    uptimeEstimate: Long.fromNumber(Math.floor(uptimeMillis / 1000)),
    localTime: new Date(),
    connections: { current: 1, available: 1_000_000, totalCreated: ctx.connectionId, active: 1 },
    mem: {
      bits: 64,
      resident: Math.round(memory.rss / 1048576),
      virtual: Math.round(memory.rss / 1048576),
      supported: true,
    },
    storageEngine: {
      name: 'mongo-standin',
      supportsCommittedReads: false,
      persistent: false,
      readOnly: false,
    },
  };
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
