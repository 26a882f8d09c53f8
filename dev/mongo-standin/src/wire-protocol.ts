// MongoDB wire protocol: message framing, parsing of the two request opcodes a
// current driver sends (OP_QUERY for the first handshake, OP_MSG for the rest)
// and encoding of their replies (OP_REPLY, OP_MSG).
// Reference: https://www.mongodb.com/docs/manual/reference/mongodb-wire-protocol/
//
// Anything malformed raises ProtocolError; the server closes that connection.

import { BSON } from 'bson';

import type { Doc } from './bson-values';
import { setOwn } from './bson-values';

export const OP_REPLY = 1;
export const OP_QUERY = 2004;
export const OP_COMPRESSED = 2012;
export const OP_MSG = 2013;

/** The largest message accepted or advertised (`maxMessageSizeBytes`), as MongoDB's 48 MB. */
export const MAX_MESSAGE_SIZE = 48_000_000;

const HEADER_SIZE = 16;

const MSG_CHECKSUM_PRESENT = 1 << 0;
const MSG_MORE_TO_COME = 1 << 1;
const MSG_EXHAUST_ALLOWED = 1 << 16;
/** Bits 0-15 are "required": a receiver must fail on one it does not know. */
const MSG_KNOWN_REQUIRED_BITS = MSG_CHECKSUM_PRESENT | MSG_MORE_TO_COME;

/**
 * How request documents are deserialised: numbers keep their BSON types
 * (Int32 / Double / Long wrappers), binaries stay Binary, so what is stored
 * serialises back to the same bytes.
 */
const TYPED_DESERIALIZE_OPTIONS = {
  promoteValues: false,
  promoteLongs: false,
  promoteBuffers: false,
  bsonRegExp: false,
  useBigInt64: false,
} as const;

export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ProtocolError';
  }
}

export interface MessageHeader {
  length: number;
  requestId: number;
  responseTo: number;
  opCode: number;
}

export interface OpMsgRequest {
  opCode: typeof OP_MSG;
  header: MessageHeader;
  /** The body document with every document sequence merged in as an array field. */
  command: Doc;
  /** The client expects no reply. */
  moreToCome: boolean;
  exhaustAllowed: boolean;
}

export interface OpQueryRequest {
  opCode: typeof OP_QUERY;
  header: MessageHeader;
  /** `<db>.$cmd` for commands. */
  collectionName: string;
  /** The query document, unwrapped from `$query` when wrapped. */
  command: Doc;
}

export type WireRequest = OpMsgRequest | OpQueryRequest;

/**
 * Cuts a byte stream into whole messages. Validates each message length before
 * buffering its body, so an absurd length fails at once.
 */
export class MessageFramer {
  private chunks: Buffer[] = [];
  private buffered = 0;

  constructor(private readonly maxMessageSize = MAX_MESSAGE_SIZE) {}

  /** Adds received bytes; returns the messages now complete. Throws ProtocolError on a bad length. */
  push(chunk: Buffer): Buffer[] {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const messages: Buffer[] = [];
    while (this.buffered >= 4) {
      if (this.chunks[0]!.length < 4) this.compact();
      const length = this.chunks[0]!.readInt32LE(0);
      if (length < HEADER_SIZE || length > this.maxMessageSize) {
        throw new ProtocolError(`invalid message length ${length}`);
      }
      if (this.buffered < length) break;
      this.compact();
      const all = this.chunks[0]!;
      messages.push(all.subarray(0, length));
      const rest = all.subarray(length);
      this.chunks = rest.length ? [rest] : [];
      this.buffered = rest.length;
    }
    return messages;
  }

  private compact(): void {
    if (this.chunks.length > 1) this.chunks = [Buffer.concat(this.chunks, this.buffered)];
  }
}

function readHeader(message: Buffer): MessageHeader {
  if (message.length < HEADER_SIZE) throw new ProtocolError('message shorter than its header');
  return {
    length: message.readInt32LE(0),
    requestId: message.readInt32LE(4),
    responseTo: message.readInt32LE(8),
    opCode: message.readInt32LE(12),
  };
}

/** Reads one BSON document at `offset`, not going past `end`. */
function readDocument(message: Buffer, offset: number, end: number): { doc: Doc; next: number } {
  if (offset + 5 > end) throw new ProtocolError('truncated BSON document');
  const size = message.readInt32LE(offset);
  if (size < 5 || offset + size > end)
    throw new ProtocolError(`invalid BSON document size ${size}`);
  try {
    const doc = BSON.deserialize(
      message.subarray(offset, offset + size),
      TYPED_DESERIALIZE_OPTIONS,
    );
    return { doc, next: offset + size };
  } catch (error) {
    throw new ProtocolError(
      `invalid BSON: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
}

function readCString(
  message: Buffer,
  offset: number,
  end: number,
): { value: string; next: number } {
  const zero = message.indexOf(0, offset);
  if (zero < 0 || zero >= end) throw new ProtocolError('unterminated C string');
  return { value: message.toString('utf8', offset, zero), next: zero + 1 };
}

function parseOpMsg(message: Buffer, header: MessageHeader): OpMsgRequest {
  if (message.length < HEADER_SIZE + 5) throw new ProtocolError('OP_MSG too short');
  const flags = message.readUInt32LE(HEADER_SIZE);
  const unknownRequired = flags & 0xffff & ~MSG_KNOWN_REQUIRED_BITS;
  if (unknownRequired)
    throw new ProtocolError(`unknown required OP_MSG flag bits ${unknownRequired}`);
  // A CRC-32C trails the sections when checksumPresent; TCP already checksums, so it is skipped.
  const end = flags & MSG_CHECKSUM_PRESENT ? message.length - 4 : message.length;
  let offset = HEADER_SIZE + 4;
  let body: Doc | undefined;
  const sequences: Array<{ identifier: string; documents: Doc[] }> = [];
  while (offset < end) {
    const kind = message[offset++];
    if (kind === 0) {
      if (body) throw new ProtocolError('OP_MSG has more than one body section');
      const read = readDocument(message, offset, end);
      body = read.doc;
      offset = read.next;
    } else if (kind === 1) {
      if (offset + 4 > end) throw new ProtocolError('truncated document sequence');
      const size = message.readInt32LE(offset);
      const sectionEnd = offset + size;
      if (size < 5 || sectionEnd > end)
        throw new ProtocolError(`invalid document sequence size ${size}`);
      const identifier = readCString(message, offset + 4, sectionEnd);
      const documents: Doc[] = [];
      let cursor = identifier.next;
      while (cursor < sectionEnd) {
        const read = readDocument(message, cursor, sectionEnd);
        documents.push(read.doc);
        cursor = read.next;
      }
      sequences.push({ identifier: identifier.value, documents });
      offset = sectionEnd;
    } else {
      throw new ProtocolError(`unknown OP_MSG section kind ${String(kind)}`);
    }
  }
  if (offset !== end) throw new ProtocolError('OP_MSG sections overrun the message');
  if (!body) throw new ProtocolError('OP_MSG has no body section');
  for (const { identifier, documents } of sequences) {
    if (Object.prototype.hasOwnProperty.call(body, identifier)) {
      throw new ProtocolError(`duplicate field '${identifier}' in body and document sequence`);
    }
    setOwn(body, identifier, documents);
  }
  return {
    opCode: OP_MSG,
    header,
    command: body,
    moreToCome: (flags & MSG_MORE_TO_COME) !== 0,
    exhaustAllowed: (flags & MSG_EXHAUST_ALLOWED) !== 0,
  };
}

function parseOpQuery(message: Buffer, header: MessageHeader): OpQueryRequest {
  let offset = HEADER_SIZE + 4; // flags are irrelevant for commands
  const collection = readCString(message, offset, message.length);
  offset = collection.next + 8; // numberToSkip, numberToReturn
  const query = readDocument(message, offset, message.length);
  offset = query.next;
  if (offset < message.length) offset = readDocument(message, offset, message.length).next;
  if (offset !== message.length) throw new ProtocolError('OP_QUERY has trailing bytes');
  const wrapped = query.doc.$query ?? query.doc.query;
  const command =
    wrapped && typeof wrapped === 'object' && !Array.isArray(wrapped)
      ? (wrapped as Doc)
      : query.doc;
  return { opCode: OP_QUERY, header, collectionName: collection.value, command };
}

/** Parses one whole message. Throws ProtocolError on anything malformed or unsupported. */
export function parseMessage(message: Buffer): WireRequest {
  const header = readHeader(message);
  if (header.length !== message.length) throw new ProtocolError('message length mismatch');
  switch (header.opCode) {
    case OP_MSG:
      return parseOpMsg(message, header);
    case OP_QUERY:
      return parseOpQuery(message, header);
    default:
      throw new ProtocolError(`unsupported opCode ${header.opCode}`);
  }
}

const SERIALIZE_OPTIONS = { ignoreUndefined: true } as const;

function writeHeader(buffer: Buffer, requestId: number, responseTo: number, opCode: number): void {
  buffer.writeInt32LE(buffer.length, 0);
  buffer.writeInt32LE(requestId, 4);
  buffer.writeInt32LE(responseTo, 8);
  buffer.writeInt32LE(opCode, 12);
}

/** An OP_MSG reply with a single body section. */
export function encodeOpMsg(requestId: number, responseTo: number, body: Doc): Buffer {
  const bson = BSON.serialize(body, SERIALIZE_OPTIONS);
  const buffer = Buffer.alloc(HEADER_SIZE + 4 + 1 + bson.length);
  writeHeader(buffer, requestId, responseTo, OP_MSG);
  buffer.writeUInt32LE(0, HEADER_SIZE); // flags
  buffer[HEADER_SIZE + 4] = 0; // section kind 0
  buffer.set(bson, HEADER_SIZE + 5);
  return buffer;
}

/** An OP_REPLY carrying one document (the answer to an OP_QUERY command). */
export function encodeOpReply(requestId: number, responseTo: number, doc: Doc): Buffer {
  const bson = BSON.serialize(doc, SERIALIZE_OPTIONS);
  const buffer = Buffer.alloc(HEADER_SIZE + 20 + bson.length);
  writeHeader(buffer, requestId, responseTo, OP_REPLY);
  buffer.writeInt32LE(0, HEADER_SIZE); // responseFlags
  buffer.writeBigInt64LE(0n, HEADER_SIZE + 4); // cursorID
  buffer.writeInt32LE(0, HEADER_SIZE + 12); // startingFrom
  buffer.writeInt32LE(1, HEADER_SIZE + 16); // numberReturned
  buffer.set(bson, HEADER_SIZE + 20);
  return buffer;
}
