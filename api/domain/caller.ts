/**
 * Who makes a request, as services see it: every service a route calls takes
 * `(caller, input)`. Made once per request by the transport
 * (api/http/request-context.ts, `callerOf`); services never see the request.
 */
import type { RequestOrigin } from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';

export interface Caller {
  organization: Organization;
  /** The API token's public id (kept on the records it creates, logged with every request). */
  tokenId: string;
  /** The records' `metaData`. */
  origin: RequestOrigin;
  /** The request's id (carried in every job payload). */
  requestId: string;
  /** Set when a signed URL admitted the request (no token): when that URL expires. */
  signedUntil?: Date | undefined;
  /** The request prefers an answer at once (`Prefer: respond-async`) to waiting for a job. */
  respondAsync: boolean;
  /** Told once a job is queued to make the request's outcome (an `Idempotency-Key` keeps it for retries). */
  onJobQueued?: ((jobId: string) => void) | undefined;
}
