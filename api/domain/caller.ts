/** Who makes a request, as services see it: the organization, the token, and where the request came from. */
import type { RequestOrigin } from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';

export interface Caller {
  organization: Organization;
  /** The API token's public id (kept on the records it creates, logged with every request). */
  tokenId: string;
  /** The records' `metaData`. */
  origin: RequestOrigin;
}
