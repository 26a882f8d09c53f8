/**
 * MongoDB models (mongoose), bound to one connection. Integer ids come from
 * atomic counters (`counters` collection, `findOneAndUpdate` + `$inc` + upsert).
 */
import { Schema, type Connection, type Model } from 'mongoose';
import type { EventType, PendingEvent } from '../events/events';
import { SCAN_POLICIES, SCAN_STATUSES, type ScanPolicy, type ScanStatus } from '../scan/scan';

export interface CounterDoc {
  _id: string;
  seq: number;
}

export interface OrganizationDoc {
  id: number;
  slug: string;
  name: string;
  /** Bytes the organization may store; null: no quota. */
  quotaBytes: number | null;
  /**
   * The id of its root folder, which files in no folder belong to (taken from
   * the folders' counter, so no folder shares it); absent on organizations
   * made before it existed until they are next read.
   */
  rootFolderId?: number | null;
  /** Which files are served while scanning is on (shared/scan/scan.ts); absent: SCAN_POLICY. */
  scanPolicy?: ScanPolicy;
  /** Seconds a deleted file stays in the trash (0: deleted at once); absent: TRASH_RETENTION_S. */
  trashRetentionS?: number;
  createdAt: Date;
  updatedAt: Date;
}

export interface ApiTokenDoc {
  /** Public identifier, also embedded in the token itself (for lookup). */
  tokenId: string;
  organizationId: number;
  name: string | null;
  /** SHA-256 of the whole token, hex. The token itself is never stored. */
  hash: string;
  /** What the token may do; absent on tokens made before scopes existed (they may do everything). */
  scopes?: Scope[];
  expiresAt: Date | null;
  revokedAt: Date | null;
  lastUsedAt: Date | null;
  createdAt: Date;
}

export interface FolderDoc {
  id: number;
  organizationId: number;
  name: string;
  slug: string;
  /**
   * Set while a delete holds the folder (until then, it is gone for every
   * lookup and no record may stay in it); null, absent or past: a folder like
   * any other. A delete that died lets it go when this passes.
   */
  deletingUntil?: Date | null;
  /**
   * Set when its delete removed it: the document stays, renamed out of the
   * way of a new folder of the same name, only until its `folder.deleted`
   * event has left it (shared/events/outbox.ts). Gone for every lookup.
   */
  removedAt?: Date | null;
  /** Events of changes to it, waiting to be promoted to the events collection. */
  pendingEvents?: PendingEvent[];
  createdAt: Date;
  updatedAt: Date;
}

/**
 * What a token may do: read (download, metadata, list, get, usage), write
 * (uploads, jobs, folders), delete, webhooks (manage the organization's
 * webhook endpoints: they see its events and hold signing secrets).
 */
export const SCOPES = ['read', 'write', 'delete', 'webhooks'] as const;
export type Scope = (typeof SCOPES)[number];

/** Where the request that created a record came from (the record's `metaData`). */
export interface RequestOrigin {
  /** The client's address as the service saw it (the socket's, or a trusted proxy's forwarded one). */
  ipAddress: string;
  /** The User-Agent header as sent; empty when absent. */
  userAgent: string;
}

export interface MediaDoc {
  id: number;
  organizationId: number;
  folderId: number | null;
  key: string;
  name: string;
  mimetype: string;
  bytes: number;
  checksum: string;
  metaData: RequestOrigin;
  /** The API token whose request created the record (null for records made before it was kept). */
  createdBy: string | null;
  /** Set when a delete began (the object goes next, then the record); reconcile finishes cut-off deletes. */
  deletingAt: Date | null;
  /**
   * Set when the file went to the trash (shared/media-deletion.ts): gone for
   * every lookup but the trash's, its object kept until the purge.
   */
  deletedAt?: Date | null;
  /** In the trash: the token whose request put it there (null: a folder's job, or unknown). */
  deletedBy?: string | null;
  /** In the trash: the folder it was in (its id and name), re-created on restore if gone. */
  trashedFrom?: { id: number; name: string } | null;
  /** Set while a restore runs; reconcile finishes a restore cut off. */
  restoringAt?: Date | null;
  /** The job that produced this record (convert, merge), for idempotent retries. */
  jobId?: string;
  /** The malware scan's verdict (shared/scan/scan.ts); absent: stored while scanning was off. */
  scanStatus?: ScanStatus;
  /** Where the object lies once quarantined (infected): under `<org>/.quarantine/`, reached by no download. */
  quarantineKey?: string;
  /** The signature clamd named, for an infected file. */
  scanSignature?: string;
  /** An image's placeholder (ThumbHash, base64), set after the upload by a listener; absent until then. */
  thumbhash?: string;
  /** Renders stored beside the file (GET /media/render); absent until the first. */
  variants?: VariantDoc[];
  /** A PDF's page count, set by the worker when it first reads the PDF (a render, its metadata). */
  pages?: number;
  /** Where a URL import fetched it from (without userinfo, query or fragment); absent otherwise. */
  sourceUrl?: string;
  /**
   * Events of changes to it (`media.created` with the insert, `media.deleted`
   * with the delete's mark), waiting to be promoted to the events collection.
   */
  pendingEvents?: PendingEvent[];
  createdAt: Date;
  updatedAt: Date;
}

/** A rendered variant of a media file: its object under `.variants/<key>/` (shared/media/render-options.ts). */
export interface VariantDoc {
  /** The hash of the normalized render options. */
  id: string;
  key: string;
  mimetype: string;
  bytes: number;
  width: number;
  height: number;
  createdAt: Date;
  /**
   * Booked, not yet written: the render answered from its bytes and its
   * worker writes the object after (docs/renders.md, "The variant is written
   * after the answer"); until this instant the writer holds it. Absent once
   * the object is written. Counted in the bound and the quota; never served.
   */
  pendingUntil?: Date;
}

/**
 * What an organization has stored, kept as records, variants and job results
 * are written and removed (the quota's count, and the results' bound),
 * bookings in flight included.
 */
export interface UsageDoc {
  /** The organization's id. */
  _id: number;
  /** Bytes the quota counts: the files' and their rendered variants', booked ones (`pending`) included. */
  bytes: number;
  files: number;
  /** The variants' share of `bytes` (absent on counters made before variants were counted). */
  variantBytes?: number;
  /** Bytes of job results stored until read (not in `bytes`: bounded on their own). */
  resultBytes?: number;
  /**
   * Bookings whose record is not written yet: counted above, settled (removed
   * from here, still counted) once the record is in, given back when the
   * write fails, or past `until` when no record came (a process that died).
   */
  pending?: PendingBookingDoc[];
}

export interface PendingBookingDoc {
  /** The id the record will carry. */
  id: number;
  bytes: number;
  files: number;
  /** When it expires unless settled or renewed. */
  until: Date;
}

/**
 * A job result too large for Redis, stored at `_id` (`<org>/.results/<jobId>.json`)
 * until it is read or `expiresAt` passes (shared/stored-results.ts).
 */
export interface JobResultDoc {
  _id: string;
  jobId: string;
  organizationId: number;
  bytes: number;
  createdAt: Date;
  expiresAt: Date;
}

/**
 * A value the service makes once and keeps, by name: `token-check-key`, the
 * key of the check every API token carries (api/services/tokens.service.ts).
 */
export interface SettingDoc {
  _id: string;
  value: string;
  createdAt: Date;
}

/** A domain event, recorded (shared/events/outbox.ts): dispatched once to each of its listeners. */
export interface EventDoc {
  /** The event's stable id (`media.created:42`). */
  _id: string;
  type: EventType;
  organizationId: number;
  occurredAt: Date;
  data: Record<string, unknown>;
  /** Set once every listener of it has its delivery queued. */
  dispatchedAt: Date | null;
  /** A dispatcher at work on it until then (another takes it after). */
  lockedUntil: Date | null;
  /** The token of the dispatcher's claim that took it (shared/events/outbox.ts `claim`). */
  claim?: string | null;
  createdAt: Date;
}

/** A signing secret of a webhook endpoint (`whsec_…`); a rotated one signs until `expiresAt`. */
export interface WebhookSecretDoc {
  secret: string;
  /** Null for the current secret; set on the previous one when a rotation's overlap ends. */
  expiresAt: Date | null;
  createdAt: Date;
}

/** An organization's webhook endpoint: where its events are delivered, signed (shared/webhooks/). */
export interface WebhookEndpointDoc {
  id: number;
  organizationId: number;
  url: string;
  events: EventType[];
  description: string;
  enabled: boolean;
  /** Why it was disabled by the service (410 from it, failing too long); null when enabled or disabled by hand. */
  disabledReason: string | null;
  /** Newest first; never answered by the API after the create or rotate that made it. */
  secrets: WebhookSecretDoc[];
  /** Since when every delivery has failed (null: the last one succeeded). */
  failingSince: Date | null;
  createdAt: Date;
  updatedAt: Date;
}

/** One attempt to deliver a webhook message (the delivery log; kept 30 days). */
export interface WebhookDeliveryDoc {
  endpointId: number;
  organizationId: number;
  /** The `webhook-id` header: the same across retries and replays of one message. */
  messageId: string;
  eventId: string | null;
  eventType: string;
  /** 1 for a message's first attempt (a replay starts again at 1). */
  attempt: number;
  trigger: 'event' | 'replay' | 'test';
  at: Date;
  ok: boolean;
  /** The endpoint's HTTP status; null when none came (refused, timeout, connection). */
  status: number | null;
  latencyMs: number;
  /** Why it failed: `http_status`, `timeout`, `connect`, `tls`, `dns`, `url_not_allowed`, `protocol`; null when it succeeded. */
  errorClass: string | null;
  /** The start of the answer (at most 4 KiB, as text). */
  response: string;
  /** When the next attempt is due; null when none will be made. */
  nextAttemptAt: Date | null;
}

/**
 * A key taken at the bucket's root (merged PDFs' `merged_<ms>.pdf`) before
 * its object is written: the unique `_id` decides between two merges of the
 * same millisecond, the job id gives a retry its earlier key back, and the
 * organization attributes the object when its record is missing.
 */
export interface KeyClaimDoc {
  _id: string;
  jobId: string;
  organizationId: number;
  createdAt: Date;
}

const options = { versionKey: false, timestamps: true } as const;

const counterSchema = new Schema<CounterDoc>(
  { _id: { type: String, required: true }, seq: { type: Number, required: true } },
  { versionKey: false },
);

const organizationSchema = new Schema<OrganizationDoc>(
  {
    id: { type: Number, required: true, unique: true },
    slug: { type: String, required: true, unique: true },
    name: { type: String, required: true },
    quotaBytes: { type: Number, default: null },
    rootFolderId: { type: Number, default: null },
    scanPolicy: { type: String, enum: SCAN_POLICIES, required: false },
    trashRetentionS: { type: Number, required: false },
  },
  options,
);

const apiTokenSchema = new Schema<ApiTokenDoc>(
  {
    tokenId: { type: String, required: true, unique: true },
    organizationId: { type: Number, required: true, index: true },
    name: { type: String, default: null },
    hash: { type: String, required: true },
    scopes: { type: [String], default: undefined },
    expiresAt: { type: Date, default: null },
    revokedAt: { type: Date, default: null },
    lastUsedAt: { type: Date, default: null },
  },
  { versionKey: false, timestamps: { createdAt: true, updatedAt: false } },
);

const pendingEventSchema = new Schema<PendingEvent>(
  {
    id: { type: String, required: true },
    type: { type: String, required: true },
    at: { type: Date, required: true },
  },
  { _id: false },
);

const folderSchema = new Schema<FolderDoc>(
  {
    id: { type: Number, required: true, unique: true },
    organizationId: { type: Number, required: true },
    name: { type: String, required: true },
    slug: { type: String, required: true },
    deletingUntil: { type: Date, default: null },
    removedAt: { type: Date, default: null },
    pendingEvents: { type: [pendingEventSchema], default: undefined },
  },
  options,
);
folderSchema.index({ organizationId: 1, name: 1 }, { unique: true });
// The outbox finds documents with events waiting (sparse: most have none).
folderSchema.index({ 'pendingEvents.at': 1 }, { sparse: true });

const mediaSchema = new Schema<MediaDoc>(
  {
    id: { type: Number, required: true, unique: true },
    organizationId: { type: Number, required: true },
    folderId: { type: Number, default: null },
    key: { type: String, required: true, unique: true },
    name: { type: String, required: true },
    mimetype: { type: String, required: true },
    bytes: { type: Number, required: true },
    checksum: { type: String, required: true },
    metaData: {
      type: new Schema<RequestOrigin>(
        {
          ipAddress: { type: String, default: '' },
          userAgent: { type: String, default: '' },
        },
        { _id: false },
      ),
      default: () => ({ ipAddress: '', userAgent: '' }),
    },
    createdBy: { type: String, default: null },
    deletingAt: { type: Date, default: null },
    deletedAt: { type: Date, default: null },
    deletedBy: { type: String, default: null },
    trashedFrom: {
      type: new Schema<{ id: number; name: string }>(
        { id: { type: Number, required: true }, name: { type: String, required: true } },
        { _id: false },
      ),
      default: null,
    },
    restoringAt: { type: Date, default: null },
    // Absent (not null) unless a job made the record, so the sparse unique index skips it.
    jobId: { type: String, required: false },
    scanStatus: { type: String, enum: SCAN_STATUSES, required: false },
    quarantineKey: { type: String, required: false },
    scanSignature: { type: String, required: false },
    thumbhash: { type: String, required: false },
    sourceUrl: { type: String, required: false },
    variants: {
      type: [
        new Schema<VariantDoc>(
          {
            id: { type: String, required: true },
            key: { type: String, required: true },
            mimetype: { type: String, required: true },
            bytes: { type: Number, required: true },
            width: { type: Number, required: true },
            height: { type: Number, required: true },
            createdAt: { type: Date, required: true },
            pendingUntil: { type: Date, required: false },
          },
          { _id: false },
        ),
      ],
      default: undefined,
    },
    pendingEvents: { type: [pendingEventSchema], default: undefined },
    pages: { type: Number, required: false },
  },
  options,
);
mediaSchema.index({ 'pendingEvents.at': 1 }, { sparse: true });
// Every lookup and list filter starts with the organization (GET /media: newest first by id).
mediaSchema.index({ organizationId: 1, key: 1 });
// Reconcile knows a quarantined object by the record that moved it there.
mediaSchema.index({ quarantineKey: 1 }, { sparse: true });
mediaSchema.index({ organizationId: 1, id: -1 });
mediaSchema.index({ organizationId: 1, folderId: 1, id: -1 });
mediaSchema.index({ organizationId: 1, mimetype: 1, id: -1 });
mediaSchema.index({ organizationId: 1, name: 1, id: -1 });
// GET /media?sort=name and sort=size (either direction: ties broken by id the same way).
mediaSchema.index({ organizationId: 1, name: 1, id: 1 });
mediaSchema.index({ organizationId: 1, bytes: 1, id: 1 });
mediaSchema.index({ organizationId: 1, createdAt: -1, id: -1 });
mediaSchema.index({ jobId: 1 }, { unique: true, sparse: true });
// Duplicates of an upload (onDuplicate): the organization's records with the same bytes.
mediaSchema.index({ organizationId: 1, checksum: 1 });
// Deletes cut off half-way, for reconcile to finish (few at any time).
mediaSchema.index({ deletingAt: 1 }, { sparse: true });
// The trash: an organization's trashed records, newest first; the purge finds the oldest.
mediaSchema.index({ organizationId: 1, deletedAt: 1, id: -1 });
mediaSchema.index({ restoringAt: 1 }, { sparse: true });

const usageSchema = new Schema<UsageDoc>(
  {
    _id: { type: Number, required: true },
    bytes: { type: Number, required: true, default: 0 },
    files: { type: Number, required: true, default: 0 },
    pending: {
      type: [
        new Schema<PendingBookingDoc>(
          {
            id: { type: Number, required: true },
            bytes: { type: Number, required: true },
            files: { type: Number, required: true },
            until: { type: Date, required: true },
          },
          { _id: false },
        ),
      ],
      default: undefined,
    },
    variantBytes: { type: Number, default: 0 },
    resultBytes: { type: Number, default: 0 },
  },
  { versionKey: false },
);

const jobResultSchema = new Schema<JobResultDoc>(
  {
    _id: { type: String, required: true },
    jobId: { type: String, required: true },
    organizationId: { type: Number, required: true, index: true },
    bytes: { type: Number, required: true },
    createdAt: { type: Date, required: true },
    // The workers' sweep asks for those past it.
    expiresAt: { type: Date, required: true, index: true },
  },
  { versionKey: false },
);

const keyClaimSchema = new Schema<KeyClaimDoc>(
  {
    _id: { type: String, required: true },
    jobId: { type: String, required: true, unique: true },
    organizationId: { type: Number, required: true },
  },
  { versionKey: false, timestamps: { createdAt: true, updatedAt: false } },
);

const eventSchema = new Schema<EventDoc>(
  {
    _id: { type: String, required: true },
    type: { type: String, required: true },
    organizationId: { type: Number, required: true },
    occurredAt: { type: Date, required: true },
    data: { type: Schema.Types.Mixed, required: true },
    dispatchedAt: { type: Date, default: null },
    lockedUntil: { type: Date, default: null },
    claim: { type: String, default: null },
  },
  { versionKey: false, timestamps: { createdAt: true, updatedAt: false }, minimize: false },
);
// The dispatcher takes undispatched events oldest first; dispatched ones go after a month.
eventSchema.index({ dispatchedAt: 1, occurredAt: 1 });
eventSchema.index({ createdAt: 1 }, { expireAfterSeconds: 30 * 24 * 3_600 });

const webhookSecretSchema = new Schema<WebhookSecretDoc>(
  {
    secret: { type: String, required: true },
    expiresAt: { type: Date, default: null },
    createdAt: { type: Date, required: true },
  },
  { _id: false },
);

const webhookEndpointSchema = new Schema<WebhookEndpointDoc>(
  {
    id: { type: Number, required: true, unique: true },
    organizationId: { type: Number, required: true, index: true },
    url: { type: String, required: true },
    events: { type: [String], required: true },
    description: { type: String, default: '' },
    enabled: { type: Boolean, default: true },
    disabledReason: { type: String, default: null },
    secrets: { type: [webhookSecretSchema], required: true },
    failingSince: { type: Date, default: null },
  },
  options,
);

const webhookDeliverySchema = new Schema<WebhookDeliveryDoc>(
  {
    endpointId: { type: Number, required: true },
    organizationId: { type: Number, required: true },
    messageId: { type: String, required: true },
    eventId: { type: String, default: null },
    eventType: { type: String, required: true },
    attempt: { type: Number, required: true },
    trigger: { type: String, required: true },
    at: { type: Date, required: true },
    ok: { type: Boolean, required: true },
    status: { type: Number, default: null },
    latencyMs: { type: Number, required: true },
    errorClass: { type: String, default: null },
    response: { type: String, default: '' },
    nextAttemptAt: { type: Date, default: null },
  },
  { versionKey: false },
);
// The log of an endpoint, newest first; attempts go after 30 days.
webhookDeliverySchema.index({ endpointId: 1, at: -1 });
webhookDeliverySchema.index({ at: 1 }, { expireAfterSeconds: 30 * 24 * 3_600 });

const settingSchema = new Schema<SettingDoc>(
  { _id: { type: String, required: true }, value: { type: String, required: true } },
  { versionKey: false, timestamps: { createdAt: true, updatedAt: false } },
);

export interface Models {
  Counter: Model<CounterDoc>;
  Organization: Model<OrganizationDoc>;
  ApiToken: Model<ApiTokenDoc>;
  Folder: Model<FolderDoc>;
  Media: Model<MediaDoc>;
  KeyClaim: Model<KeyClaimDoc>;
  Usage: Model<UsageDoc>;
  JobResult: Model<JobResultDoc>;
  Setting: Model<SettingDoc>;
  Event: Model<EventDoc>;
  WebhookEndpoint: Model<WebhookEndpointDoc>;
  WebhookDelivery: Model<WebhookDeliveryDoc>;
}

export function createModels(connection: Connection): Models {
  return {
    Counter: connection.model<CounterDoc>('Counter', counterSchema, 'counters'),
    Organization: connection.model<OrganizationDoc>(
      'Organization',
      organizationSchema,
      'organizations',
    ),
    ApiToken: connection.model<ApiTokenDoc>('ApiToken', apiTokenSchema, 'api_tokens'),
    Folder: connection.model<FolderDoc>('Folder', folderSchema, 'folders'),
    Media: connection.model<MediaDoc>('Media', mediaSchema, 'media'),
    KeyClaim: connection.model<KeyClaimDoc>('KeyClaim', keyClaimSchema, 'key_claims'),
    Usage: connection.model<UsageDoc>('Usage', usageSchema, 'usage'),
    JobResult: connection.model<JobResultDoc>('JobResult', jobResultSchema, 'job_results'),
    Setting: connection.model<SettingDoc>('Setting', settingSchema, 'settings'),
    Event: connection.model<EventDoc>('Event', eventSchema, 'events'),
    WebhookEndpoint: connection.model<WebhookEndpointDoc>(
      'WebhookEndpoint',
      webhookEndpointSchema,
      'webhook_endpoints',
    ),
    WebhookDelivery: connection.model<WebhookDeliveryDoc>(
      'WebhookDelivery',
      webhookDeliverySchema,
      'webhook_deliveries',
    ),
  };
}

/** Builds every declared index (unique ones are part of correctness). */
export async function syncIndexes(models: Models): Promise<void> {
  await Promise.all(Object.values(models).map((m: Model<unknown>) => m.init()));
}
