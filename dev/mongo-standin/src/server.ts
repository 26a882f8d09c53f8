// The MongoDB stand-in: an in-process TCP server speaking the MongoDB wire
// protocol over an in-memory storage engine, so that mongoose and the driver
// connect to it with an ordinary `mongodb://host:port/db` URI. Development and
// test infrastructure only: there is no authentication, no replication and no
// transactions. Without `dataDir` records vanish with the process; with it,
// every command's changes are written through to disk before its reply
// (persistence.ts) and loaded back at the next start.

import net from 'node:net';
import type { AddressInfo, Socket } from 'node:net';

import type { Logger } from 'pino';

import type { Doc } from './bson-values';
import { OP_QUERY_COMMANDS, runCommand } from './command-handlers';
import { MongoCommandError } from './command-errors';
import { CursorRegistry } from './cursor-registry';
import { Persistence } from './persistence';
import { StorageEngine } from './storage-engine';
import { ttlMonitorSleepSecs } from './admin-commands';
import { startTtlMonitor } from './ttl-monitor';
import type { WireRequest } from './wire-protocol';
import {
  MessageFramer,
  OP_QUERY,
  ProtocolError,
  encodeOpMsg,
  encodeOpReply,
  parseMessage,
} from './wire-protocol';

export interface MongoStandin {
  /** `mongodb://<host>:<port>`, without a database: callers append `/<db>`. */
  uri: string;
  host: string;
  port: number;
  /** Where the records are kept, or undefined (in memory only). */
  dataDir: string | undefined;
  /** Destroys open connections, stops listening and forgets the data in memory (what is on disk stays). */
  close(): Promise<void>;
}

export interface MongoStandinOptions {
  /** TCP port; default 0 (an ephemeral port). */
  port?: number;
  /** Interface to listen on; default 127.0.0.1. */
  host?: string;
  /** Where the start-up warning, connection events and unexpected errors go. */
  logger?: Logger;
  /**
   * Keep the collections on disk in this directory (created if missing),
   * loaded back at start; default: in memory only.
   */
  dataDir?: string;
}

interface ConnectionState {
  id: number;
  socket: Socket;
  framer: MessageFramer;
}

function formatHost(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}

class StandinServer {
  readonly engine = new StorageEngine();
  readonly cursors = new CursorRegistry();
  readonly sockets = new Set<Socket>();
  private nextConnectionId = 0;
  private nextRequestId = 0;

  constructor(
    private readonly logger: Logger | undefined,
    readonly persistence?: Persistence,
  ) {}

  /** Writes the changes made since the last call through to disk (when persistent). */
  persist(): void {
    this.persistence?.flush(this.engine);
  }

  accept(socket: Socket): void {
    const connection: ConnectionState = {
      id: ++this.nextConnectionId,
      socket,
      framer: new MessageFramer(),
    };
    this.sockets.add(socket);
    socket.setNoDelay(true);
    this.logger?.debug(
      { connectionId: connection.id, remote: socket.remoteAddress },
      'mongo stand-in: connection accepted',
    );
    socket.on('data', (chunk: Buffer) => this.receive(connection, chunk));
    socket.on('error', (error) => {
      this.logger?.debug(
        { connectionId: connection.id, err: error },
        'mongo stand-in: connection error',
      );
    });
    socket.on('close', () => {
      this.sockets.delete(socket);
      this.logger?.debug({ connectionId: connection.id }, 'mongo stand-in: connection closed');
    });
  }

  private receive(connection: ConnectionState, chunk: Buffer): void {
    try {
      for (const message of connection.framer.push(chunk)) {
        if (connection.socket.destroyed) return;
        const reply = this.handle(connection, parseMessage(message));
        if (reply) connection.socket.write(reply);
      }
    } catch (error) {
      // Malformed input: drop this connection only; everything else keeps serving.
      const reason = error instanceof ProtocolError ? error.message : String(error);
      this.logger?.warn(
        { connectionId: connection.id, reason },
        'mongo stand-in: closing connection after a malformed message',
      );
      connection.socket.destroy();
    }
  }

  private handle(connection: ConnectionState, request: WireRequest): Buffer | undefined {
    const requestId = ++this.nextRequestId;
    const responseTo = request.header.requestId;
    if (request.opCode === OP_QUERY) {
      const reply = this.runOpQuery(connection, request.collectionName, request.command);
      return this.encode(reply, (doc) => encodeOpReply(requestId, responseTo, doc));
    }
    const db = request.command.$db;
    const reply =
      typeof db === 'string' && db.length > 0
        ? this.run(connection, db, request.command)
        : new MongoCommandError(
            'Location40571',
            'OP_MSG requests require a $db argument',
          ).toReply();
    if (request.moreToCome) return undefined;
    return this.encode(reply, (doc) => encodeOpMsg(requestId, responseTo, doc));
  }

  private runOpQuery(connection: ConnectionState, collectionName: string, command: Doc): Doc {
    const name = Object.keys(command)[0] ?? '';
    if (!collectionName.endsWith('.$cmd') || !OP_QUERY_COMMANDS.has(name)) {
      return new MongoCommandError(
        'UnsupportedOpQueryCommand',
        `Unsupported OP_QUERY command: ${name}. The client driver may require an upgrade. For more details see https://dochub.mongodb.org/core/legacy-opcode-removal`,
      ).toReply();
    }
    return this.run(connection, collectionName.slice(0, -'.$cmd'.length), command);
  }

  private run(connection: ConnectionState, db: string, command: Doc): Doc {
    const reply = runCommand({
      db,
      command,
      engine: this.engine,
      cursors: this.cursors,
      connectionId: connection.id,
      logger: this.logger,
    });
    try {
      // Before the reply: an acknowledged write is on disk.
      this.persist();
    } catch (error) {
      this.logger?.error(
        { err: error, command: Object.keys(command)[0], db },
        'mongo stand-in: could not write a change to disk',
      );
      return new MongoCommandError(
        'InternalError',
        `the change was made in memory but could not be written to disk: ${error instanceof Error ? error.message : String(error)}`,
      ).toReply();
    }
    return reply;
  }

  private encode(reply: Doc, encode: (doc: Doc) => Buffer): Buffer {
    try {
      return encode(reply);
    } catch (error) {
      return encode(
        new MongoCommandError(
          'BSONObjectTooLarge',
          `reply could not be encoded: ${error instanceof Error ? error.message : String(error)}`,
        ).toReply(),
      );
    }
  }
}

/**
 * Starts a stand-in listening on `host:port` (default 127.0.0.1, ephemeral port).
 * Refuses to start when NODE_ENV is `production`.
 */
export async function startMongoStandin(opts: MongoStandinOptions = {}): Promise<MongoStandin> {
  if (process.env.NODE_ENV === 'production') {
    throw new Error(
      'The MongoDB stand-in is development and test infrastructure and refuses to run with NODE_ENV=production; configure MONGODB_URI to a real MongoDB.',
    );
  }
  const host = opts.host ?? '127.0.0.1';
  const logger = opts.logger;
  const persistence = opts.dataDir ? new Persistence(opts.dataDir) : undefined;
  const standin = new StandinServer(logger, persistence);
  if (persistence) {
    try {
      const loaded = persistence.load(standin.engine);
      logger?.info({ dataDir: opts.dataDir, ...loaded }, 'mongo stand-in: loaded its collections');
    } catch (error) {
      persistence.close();
      throw error;
    }
  }
  const server = net.createServer((socket) => standin.accept(socket));

  await new Promise<void>((resolve, reject) => {
    server.once('error', (error) => {
      persistence?.close();
      reject(error);
    });
    server.listen(opts.port ?? 0, host, () => {
      server.removeAllListeners('error');
      resolve();
    });
  });
  server.on('error', (error) => logger?.error({ err: error }, 'mongo stand-in: server error'));

  const port = (server.address() as AddressInfo).port;
  const uri = `mongodb://${formatHost(host)}:${port}`;
  if (persistence) {
    logger?.warn(
      { uri, dataDir: opts.dataDir },
      'MongoDB STAND-IN in use: records kept on disk in dataDir. Development and tests only, never production.',
    );
  } else {
    logger?.warn(
      { uri },
      "MongoDB STAND-IN in use: records live only in this process's memory and VANISH when it exits. Development and tests only, never production.",
    );
  }

  const stopTtlMonitor = startTtlMonitor(standin.engine, ttlMonitorSleepSecs, () => {
    try {
      standin.persist();
    } catch (error) {
      logger?.error({ err: error }, 'mongo stand-in: could not write expired documents to disk');
    }
  });
  let closing: Promise<void> | undefined;
  return {
    uri,
    host,
    port,
    dataDir: opts.dataDir,
    close() {
      closing ??= new Promise<void>((resolve) => {
        stopTtlMonitor();
        for (const socket of standin.sockets) socket.destroy();
        server.close(() => resolve());
      }).then(() => {
        standin.cursors.clear();
        try {
          standin.persist();
        } finally {
          persistence?.close();
        }
        standin.engine.clear();
        logger?.info({ uri }, 'mongo stand-in: stopped');
      });
      return closing;
    },
  };
}
